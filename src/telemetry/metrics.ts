/**
 * Every metric of contract §6, declared once on one registry. Callers use the typed handles;
 * no label ever carries a key, a token, a resource or a tenant.
 *
 * The exposition is OpenMetrics when the scraper asks for it (Prometheus does), else the
 * Prometheus text format. With tracing on, the duration histograms carry exemplars
 * (`trace_id`, `span_id` of the sampled request), which only OpenMetrics can show.
 *
 * Series from the start (contract §6): Prometheus's increase() needs two samples of a series, so
 * a series born at 1 hides its first event (`..._total 1` on /metrics, increase() 0, no alert).
 * Every counter and histogram an alert or a panel reads therefore exists at 0 from start-up:
 * the label values that are not per route at `createMetrics`, the store's ops at `initStore`,
 * and each route's at `initRoute` (called by createGateway for every configured route).
 * prom-client 15 writes no OpenMetrics `_created` lines (in neither format), so a Prometheus
 * with created-timestamp ingestion cannot fill the gap either: an event before the first scrape
 * after a start stays invisible to increase().
 */
import { Counter, Histogram, Registry, collectDefaultMetrics, Gauge, type HistogramConfiguration, type LabelValues, type ObserveDataWithExemplar, type OpenMetricsContentType } from 'prom-client'
import type { Config, RouteConfig } from '../config/schema.js'
import { FENCING_REASONS, IDEMPOTENCY_RESULTS, UNKNOWN_REASONS, WRITE_REFUSAL_REASONS, type StoreLimit } from '../outcomes.js'
import { traceExemplar, tracingOn } from './tracing.js'
import { counterSeries, histogramSeries } from './series.js'
import { gatewayAnswers, zeroOnce, SETTLED_AS, SETTLED_BY, PROBE_ANSWER_LABELS } from './route-series.js'

/** The `store` label: the configured store kind (contract §2). */
type StoreKind = Config['store']['kind']
/** Which certificate fencegate_tls_certificate_expiry_seconds is about: one of the three labels. */
export type CertificateLabels = { listener: 'proxy' | 'admin' } | { route: string } | { store: StoreKind }

// A proxy's latencies: from half a millisecond to the longest upstream timeout worth seeing.
const BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10]
// A stale writer's lateness: from a request racing its successor to a lease holder paused for an hour.
const LATENESS_BUCKETS = [0.01, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600]

/**
 * Label values of contract §6, each present at 0 from start-up. The request path's value sets
 * (fencing reasons, idempotency results, unknown reasons) are defined once in src/outcomes.ts.
 */
export const AUDIT_DROP_REASONS = ['queue_full', 'store_error', 'log_full', 'evicted'] as const
/** The limits of a store that refuses new entries when full (the memory store's, SQLite's disk; `fencegate_store_full_total`). */
export const STORE_LIMITS_BY_STORE = { memory: ['max_records', 'max_resources', 'max_attempts'], sqlite: ['disk'] } as const satisfies Partial<Record<StoreKind, readonly StoreLimit[]>>
export const RELOAD_RESULTS = ['applied', 'refused'] as const
/** `fencegate_leases_total`'s results (contract §3a). */
export const LEASE_RESULTS = ['granted', 'held', 'renewed', 'released', 'stale', 'expired'] as const
/**
 * The `op` label of the store metrics: every operation guardStore (src/store/runtime/guard.ts) times and
 * counts. A new store operation belongs here too, or its first error is invisible to alerts
 * (test/dashboard.test.ts compares this list with guardStore's calls).
 */
export const STORE_OPS = ['fence', 'highest', 'mark', 'claim', 'admit', 'finish', 'release', 'renew', 'resolve', 'unknowns', 'unknown_record', 'take_probe', 'settle', 'lease_acquire', 'lease_renew', 'lease_release', 'lease_read', 'markers', 'accept_loss', 'retire_epoch', 'ping', 'register', 'older_registered', 'unregister'] as const
/**
 * A histogram whose observations carry the active sampled span as an exemplar, with the plain
 * `observe(labels, value)` and `startTimer()` calls of any histogram.
 */
class TracedHistogram<T extends string> extends Histogram<T> {
  constructor(config: HistogramConfiguration<T>) {
    super({ ...config, enableExemplars: true })
    const observeWithExemplar = (this as unknown as { observeWithExemplar(d: ObserveDataWithExemplar<T>): void }).observeWithExemplar.bind(this)
    const observe = (labelsOrData: LabelValues<T> | ObserveDataWithExemplar<T> | number, value?: number): void => {
      // startTimer() of an exemplar histogram calls observe({ labels, value, exemplarLabels })
      const data: ObserveDataWithExemplar<T> = typeof labelsOrData === 'number' ? { value: labelsOrData }
        : value === undefined ? labelsOrData as ObserveDataWithExemplar<T>
        : { labels: labelsOrData as LabelValues<T>, value }
      if (!data.exemplarLabels || Object.keys(data.exemplarLabels).length === 0) {
        const ex = traceExemplar()
        data.exemplarLabels = ex as LabelValues<T> | undefined
      }
      observeWithExemplar(data)
    }
    this.observe = observe as Histogram<T>['observe']
  }
}

const OPENMETRICS = Registry.OPENMETRICS_CONTENT_TYPE
const PROMETHEUS = Registry.PROMETHEUS_CONTENT_TYPE

/**
 * Whether an Accept header prefers OpenMetrics to the Prometheus text format (Prometheus sends
 * `application/openmetrics-text;version=1.0.0,...,text/plain;version=0.0.4;q=0.5,...`).
 */
export function wantsOpenMetrics(accept: string | undefined): boolean {
  if (!accept) return false
  let om = 0
  let text = 0
  for (const part of accept.split(',')) {
    const [type, ...params] = part.split(';').map((p) => p.trim().toLowerCase())
    const qp = params.find((p) => p.startsWith('q='))
    const q = qp === undefined ? 1 : Number(qp.slice(2)) || 0
    if (type === 'application/openmetrics-text') om = Math.max(om, q)
    else if (type === 'text/plain') text = Math.max(text, q)
  }
  return om > 0 && om >= text
}

/**
 * What the fencing window tracker (src/fencing/window-tracker.ts) reports, read at scrape time so
 * the request path only moves plain integers.
 */
export interface WindowSource {
  byRoute(): Iterable<[string, { n: number }]>
  readonly resources: number
}

/**
 * The duration histograms carry trace exemplars when tracing has started in this process:
 * without traces there is nothing to point at, and an exemplar observation costs several plain
 * ones.
 */
export function createMetrics(version: string) {
  let windows: WindowSource | undefined
  /** the notAfter (ms) of each certificate served or presented, by its labels' text */
  const certificates = new Map<string, { labels: CertificateLabels; notAfter: number }>()
  const TimedHistogram = tracingOn() ? TracedHistogram : Histogram
  // OpenMetrics from the start: prom-client refuses exemplar metrics on a Prometheus registry
  const registry = new Registry<OpenMetricsContentType>()
  registry.setContentType(OPENMETRICS)
  collectDefaultMetrics({ register: registry })
  // gauges named *_total break the naming rules (promtool check metrics); the same numbers are
  // the sums of nodejs_active_handles / _requests / _resources by type
  for (const name of ['nodejs_active_handles_total', 'nodejs_active_requests_total', 'nodejs_active_resources_total']) registry.removeSingleMetric(name)
  const m = {
    registry,
    requests: new Counter({ name: 'fencegate_requests_total', help: 'Requests by route, method, status code and what the gateway decided.', labelNames: ['route', 'method', 'code', 'outcome'] as const, registers: [registry] }),
    requestDuration: new TimedHistogram({ name: 'fencegate_request_duration_seconds', help: 'Time from request to the end of the response, seconds.', labelNames: ['route', 'outcome'] as const, buckets: BUCKETS, registers: [registry] }),
    upstreamDuration: new TimedHistogram({ name: 'fencegate_upstream_duration_seconds', help: 'Time from sending upstream to its response headers, seconds.', labelNames: ['route', 'code'] as const, buckets: BUCKETS, registers: [registry] }),
    fencingRejections: new Counter({ name: 'fencegate_fencing_rejections_total', help: 'Requests refused by fencing: stale token, missing token, malformed token.', labelNames: ['route', 'reason'] as const, registers: [registry] }),
    idempotency: new Counter({ name: 'fencegate_idempotency_total', help: 'Idempotency decisions: stored, replayed, in_flight, key_reused, released, not_stored.', labelNames: ['route', 'result'] as const, registers: [registry] }),
    unknownOutcomes: new Counter({ name: 'fencegate_unknown_outcomes_total', help: 'Requests sent (or maybe sent) upstream with no complete response: the effect may or may not have happened.', labelNames: ['route', 'reason'] as const, registers: [registry] }),
    fencingOvertaken: new Counter({ name: 'fencegate_fencing_overtaken_total', help: 'Requests that ended after a request with a newer fencing token for the same resource had been sent upstream by this process: the upstream may have applied the older write after the newer one.', labelNames: ['route'] as const, registers: [registry] }),
    fencingInFlight: new Gauge({
      name: 'fencegate_fencing_in_flight', help: 'Fenced requests this process is handling (checking, waiting, sent), plus ended ones whose unknown outcome still holds their resource (fencing.serialize).', labelNames: ['route'] as const, registers: [registry],
      collect() { if (windows) for (const [route, c] of windows.byRoute()) this.set({ route }, c.n) },
    }),
    fencingTrackedResources: new Gauge({
      name: 'fencegate_fencing_tracked_resources', help: 'Fencing resources with at least one request tracked in flight by this process (the size of the in-flight map).', registers: [registry],
      collect() { this.set(windows?.resources ?? 0) },
    }),
    settled: new Counter({ name: 'fencegate_unknown_outcomes_settled_total', help: 'Unknown outcomes settled (contract §4a): by probe (the resource answered idempotency.settle\'s lookup), operator (fencegate resolve through this gateway\'s admin API), or expiry; as applied (the effect happened) or not_applied.', labelNames: ['route', 'by', 'as'] as const, registers: [registry] }),
    settleProbes: new Counter({ name: 'fencegate_settle_probes_total', help: 'Probes sent to ask the resource whether an attempt whose outcome is unknown took effect (idempotency.settle), by answer: applied, not_applied, undecided (another status), error (no answer, or one larger than maxResponseBytes).', labelNames: ['route', 'answer'] as const, registers: [registry] }),
    duplicateForwards: new Counter({ name: 'fencegate_duplicate_forwards_total', help: 'Keys forwarded again after an unknown outcome (unknownOutcome: retry): possible duplicate effects.', labelNames: ['route'] as const, registers: [registry] }),
    storeDuration: new TimedHistogram({ name: 'fencegate_store_duration_seconds', help: 'Store operation time, seconds.', labelNames: ['store', 'op'] as const, buckets: BUCKETS, registers: [registry] }),
    storeErrors: new Counter({ name: 'fencegate_store_errors_total', help: 'Store operations that failed or timed out; requests depending on them were refused (503).', labelNames: ['store', 'op'] as const, registers: [registry] }),
    auditDropped: new Counter({ name: 'fencegate_audit_dropped_total', help: 'Attempt log entries dropped instead of written: queue_full (the queue held audit.queueSize entries), store_error (the store refused the batch), log_full (the memory attempt log held store.maxAttempts entries within audit.retention), evicted (an older entry dropped within audit.retention to make room: store.acceptRisks maxAttempts).', labelNames: ['reason'] as const, registers: [registry] }),
    storeFull: new Counter({ name: 'fencegate_store_full_total', help: 'New entries the store refused because it held its limit of unexpired ones (memory: max_records store.maxRecords, max_resources store.maxResources, max_attempts store.maxAttempts; sqlite: disk, the disk refused the write — full or read-only): the request was refused (503) rather than a record or mark forgotten before its time.', labelNames: ['store', 'limit'] as const, registers: [registry] }),
    idempotencyEvicted: new Counter({ name: 'fencegate_idempotency_evicted_total', help: 'Completed idempotency records dropped before their ttl to make room (only where store.acceptRisks names it: memory maxRecords): a retry of such a key is forwarded again, a second effect.', labelNames: ['route'] as const, registers: [registry] }),
    unknownUnresolved: new Gauge({ name: 'fencegate_unknown_outcomes_unresolved', help: 'Idempotency records now in the unknown state (sent upstream, no complete response, not yet resolved or expired), as the store holds them: the same number on every gateway sharing the store. Settle each with `fencegate unknown` and `fencegate resolve`.', labelNames: ['route'] as const, registers: [registry] }),
    fencingGenerations: new Counter({ name: 'fencegate_fencing_generations_total', help: 'Fencing check-and-sets that raised a resource\'s high-water mark (or set its first): new lease generations, how often leases change hands.', labelNames: ['route'] as const, registers: [registry] }),
    idempotencyLease: new Gauge({ name: 'fencegate_idempotency_lease_seconds', help: 'The route\'s configured idempotency.lease, seconds: shown beside the observed effect durations (fencegate leases).', labelNames: ['route'] as const, registers: [registry], aggregator: 'max' }),
    staleLateness: new TimedHistogram({ name: 'fencegate_fencing_stale_lateness_seconds', help: 'How long after the superseding token\'s first acceptance a stale write came (412), seconds: how far behind a superseded lease holder was.', labelNames: ['route'] as const, buckets: LATENESS_BUCKETS, registers: [registry] }),
    storeWritesRefused: new Counter({ name: 'fencegate_store_writes_refused_total', help: 'Redis writes refused (503, nothing forwarded), by reason: replica_shortfall (fewer replicas than store.replicas acknowledged the write in time: the named shard in /readyz and fencegate doctor), failover_settling (the slot\'s master just took over from a replica and is not trusted before every gateway compared its writes).', labelNames: ['store', 'reason'] as const, registers: [registry] }),
    storeStateLost: new Gauge({ name: 'fencegate_store_state_lost', help: '1 while the store has lost its state (epoch marker changed or missing) and no operator accepted it; fenced and idempotent routes answer 503.', labelNames: ['store'] as const, registers: [registry] }),
    storeStateLosses: new Counter({ name: 'fencegate_store_state_losses_total', help: 'Times the store was found to have lost its state (contract §3).', labelNames: ['store'] as const, registers: [registry] }),
    storeClockOffset: new Gauge({ name: 'fencegate_store_clock_offset_seconds', help: 'The store\'s clock minus this gateway\'s, seconds (redis, postgres: measured at connect and every minute from one round trip; its error is at most half that round trip). Leases and deadlines run on the store\'s clock, so replicas need not agree; this offset shows in Retry-After, supersededForMs and the attempt log\'s times.', labelNames: ['store'] as const, registers: [registry], aggregator: 'average' }),
    storeClockOffsetExceeded: new Gauge({ name: 'fencegate_store_clock_offset_exceeded', help: '1 while the store\'s clock is further from this gateway\'s than store.maxClockOffset, else 0.', labelNames: ['store'] as const, registers: [registry], aggregator: 'max' }),
    storeUp: new Gauge({ name: 'fencegate_store_up', help: '1 when the last store check answered, else 0.', labelNames: ['store'] as const, registers: [registry] }),
    buildInfo: new Gauge({ name: 'fencegate_build_info', help: 'Always 1; the version label says which build runs.', labelNames: ['version'] as const, registers: [registry] }),
    leases: new Counter({ name: 'fencegate_leases_total', help: 'Lease service calls (contract §3a), by result: granted, held (another holder\'s lease was live: 409), renewed, released, stale (a renewal or release by a token that is no longer the lease: 412), expired (a lease past its end taken over by a grant, counted with that grant).', labelNames: ['result'] as const, registers: [registry] }),
    configReloads: new Counter({ name: 'fencegate_config_reloads_total', help: 'Config reloads asked for with SIGHUP: applied, or refused (the file does not validate, or changes what needs a restart) with the running config kept.', labelNames: ['result'] as const, registers: [registry] }),
    tlsCertificateExpiry: new Gauge({ name: 'fencegate_tls_certificate_expiry_seconds', help: 'Seconds until the notAfter of the certificate served (listener="proxy" or "admin") or presented (route, store), as read at start-up or the last reload (contract §5b); negative once expired.', labelNames: ['listener', 'route', 'store'] as const, registers: [registry], aggregator: 'min',
      collect() { for (const c of certificates.values()) this.set(c.labels, (c.notAfter - Date.now()) / 1000) } }),
  }
  m.buildInfo.set({ version }, 1)
  for (const reason of AUDIT_DROP_REASONS) m.auditDropped.inc({ reason }, 0)
  for (const result of RELOAD_RESULTS) m.configReloads.inc({ result }, 0)
  for (const result of LEASE_RESULTS) m.leases.inc({ result }, 0)
  /**
   * The certificate a listener serves, or a route or the store presents, for
   * fencegate_tls_certificate_expiry_seconds: one label set; `notAfter` undefined removes it.
   */
  const certificateExpiry = (labels: CertificateLabels, notAfter: Date | undefined) => {
    const k = JSON.stringify(labels)
    if (notAfter) certificates.set(k, { labels, notAfter: notAfter.getTime() })
    else if (certificates.delete(k)) m.tlsCertificateExpiry.remove(labels)
  }
  /** Lets the gauges above read the gateway's window tracker at scrape time. */
  const trackWindows = (source: WindowSource) => { windows = source }
  /** The store metrics of every op at 0 (contract §6). Safe to call again. */
  const initStore = (store: StoreKind) => {
    m.storeStateLosses.inc({ store }, 0)
    if (store === 'redis') for (const reason of WRITE_REFUSAL_REASONS) m.storeWritesRefused.inc({ store, reason }, 0)
    for (const limit of (STORE_LIMITS_BY_STORE as Partial<Record<StoreKind, readonly string[]>>)[store] ?? []) m.storeFull.inc({ store, limit }, 0)
    for (const op of STORE_OPS) {
      m.storeErrors.inc({ store, op }, 0)
      zeroOnce(m.storeDuration, { store, op })
    }
  }
  /**
   * Every series of contract §6 the route can have, at 0: the label values listed for each
   * counter and histogram, limited to the route's features (fencing rejections on fenced
   * routes, idempotency results and duplicate forwards on idempotent ones), the gateway's own
   * answers in fencegate_requests_total by method, and — for `store` — the store's ops.
   * Safe to call again (a config reload): nothing counted is reset.
   */
  const initRoute = (r: RouteConfig, store?: StoreKind) => {
    const route = r.name
    if (store) initStore(store)
    const outcomes = new Set(['forwarded'])
    for (const a of gatewayAnswers(r)) {
      m.requests.inc({ route, ...a }, 0)
      outcomes.add(a.outcome)
    }
    for (const outcome of outcomes) zeroOnce(m.requestDuration, { route, outcome })
    for (const reason of UNKNOWN_REASONS) m.unknownOutcomes.inc({ route, reason }, 0)
    if (r.fencing) {
      for (const reason of FENCING_REASONS) m.fencingRejections.inc({ route, reason }, 0)
      m.fencingOvertaken.inc({ route }, 0)
      m.fencingGenerations.inc({ route }, 0)
      zeroOnce(m.staleLateness, { route })
    }
    if (r.idempotency) {
      for (const result of IDEMPOTENCY_RESULTS) m.idempotency.inc({ route, result }, 0)
      m.duplicateForwards.inc({ route }, 0)
      m.idempotencyEvicted.inc({ route }, 0)
      m.idempotencyLease.set({ route }, r.idempotency.lease / 1000)
      for (const by of SETTLED_BY) for (const as of SETTLED_AS) m.settled.inc({ route, by, as }, 0)
      // every idempotent route, settle or not: a panel over all routes has a series, and settle can be turned on by a reload
      for (const answer of PROBE_ANSWER_LABELS) m.settleProbes.inc({ route, answer }, 0)
    }
  }
  /**
   * Counts one request and observes its duration (seconds): the two observations every request
   * makes, through series kept per label set (./series.ts), so the request path hashes no labels. With
   * tracing on, the duration goes through `observe` so its exemplar is attached.
   */
  const children = new Map<string, { count: { inc(): void }; duration: { observe(v: number): void } }>()
  const traced = tracingOn()
  /** requests recorded so far: a worker sends its counts to the primary when this moved (./worker-metrics.ts) */
  const activity = { requests: 0 }
  const recordRequest = (route: string, method: string, code: string, outcome: string, seconds: number): void => {
    activity.requests++
    const k = `${route}\n${method}\n${code}\n${outcome}`
    let ch = children.get(k)
    if (ch === undefined) {
      ch = { count: counterSeries(m.requests, route, method, code, outcome), duration: histogramSeries(m.requestDuration, route, outcome) }
      children.set(k, ch)
    }
    ch.count.inc()
    if (traced) m.requestDuration.observe({ route, outcome }, seconds)
    else ch.duration.observe(seconds)
  }
  return { ...m, trackWindows, certificateExpiry, initStore, initRoute, recordRequest, activity, expose: exposition(registry) }
}

/**
 * `expose(accept)`: the registry's exposition in the format the Accept header asks for. One
 * rendering at a time: prom-client keeps the format on the registry and renames counters
 * (`_total` dropped) while rendering OpenMetrics, so the names are put back after each.
 */
function exposition(registry: Registry<OpenMetricsContentType>) {
  let queue: Promise<unknown> = Promise.resolve()
  return (accept: string | undefined): Promise<{ body: string; contentType: string }> => {
    const contentType = wantsOpenMetrics(accept) ? OPENMETRICS : PROMETHEUS
    const run = queue.then(async () => {
      const counters = registry.getMetricsAsArray().filter((m) => (m as unknown as { type?: string }).type === 'counter') as unknown as { name: string }[]
      const names = counters.map((m) => m.name)
      registry.setContentType(contentType as OpenMetricsContentType)
      try {
        return { body: await registry.metrics(), contentType }
      } finally {
        counters.forEach((m, i) => { m.name = names[i] })
        registry.setContentType(OPENMETRICS)
      }
    })
    queue = run.catch(() => {})
    return run
  }
}

export type Metrics = ReturnType<typeof createMetrics>
