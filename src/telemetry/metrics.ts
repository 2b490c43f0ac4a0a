/**
 * Every metric of contract §6, declared once on one registry. Callers use the typed handles;
 * no label ever carries a key, a token, a resource or a tenant.
 */
import { Counter, Histogram, Registry, collectDefaultMetrics, Gauge } from 'prom-client'

// A proxy's latencies: from half a millisecond to the longest upstream timeout worth seeing.
const BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10]

export function createMetrics(version: string) {
  const registry = new Registry()
  collectDefaultMetrics({ register: registry })
  const m = {
    registry,
    requests: new Counter({ name: 'fencegate_requests_total', help: 'Requests by route, method, status code and what the gateway decided.', labelNames: ['route', 'method', 'code', 'outcome'] as const, registers: [registry] }),
    requestDuration: new Histogram({ name: 'fencegate_request_duration_seconds', help: 'Time from request to the end of the response, seconds.', labelNames: ['route', 'outcome'] as const, buckets: BUCKETS, registers: [registry] }),
    upstreamDuration: new Histogram({ name: 'fencegate_upstream_duration_seconds', help: 'Time from sending upstream to its response headers, seconds.', labelNames: ['route', 'code'] as const, buckets: BUCKETS, registers: [registry] }),
    fencingRejections: new Counter({ name: 'fencegate_fencing_rejections_total', help: 'Requests refused by fencing: stale token, missing token, malformed token.', labelNames: ['route', 'reason'] as const, registers: [registry] }),
    idempotency: new Counter({ name: 'fencegate_idempotency_total', help: 'Idempotency decisions: stored, replayed, in_flight, key_reused, released, not_stored.', labelNames: ['route', 'result'] as const, registers: [registry] }),
    unknownOutcomes: new Counter({ name: 'fencegate_unknown_outcomes_total', help: 'Requests sent (or maybe sent) upstream with no complete response: the effect may or may not have happened.', labelNames: ['route', 'reason'] as const, registers: [registry] }),
    duplicateForwards: new Counter({ name: 'fencegate_duplicate_forwards_total', help: 'Keys forwarded again after an unknown outcome (unknownOutcome: retry): possible duplicate effects.', labelNames: ['route'] as const, registers: [registry] }),
    storeDuration: new Histogram({ name: 'fencegate_store_duration_seconds', help: 'Store operation time, seconds.', labelNames: ['store', 'op'] as const, buckets: BUCKETS, registers: [registry] }),
    storeErrors: new Counter({ name: 'fencegate_store_errors_total', help: 'Store operations that failed or timed out; requests depending on them were refused (503).', labelNames: ['store', 'op'] as const, registers: [registry] }),
    storeUp: new Gauge({ name: 'fencegate_store_up', help: '1 when the last store check answered, else 0.', labelNames: ['store'] as const, registers: [registry] }),
    buildInfo: new Gauge({ name: 'fencegate_build_info', help: 'Always 1; the version label says which build runs.', labelNames: ['version'] as const, registers: [registry] }),
  }
  m.buildInfo.set({ version }, 1)
  return m
}

export type Metrics = ReturnType<typeof createMetrics>
