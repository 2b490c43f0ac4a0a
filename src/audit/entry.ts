/**
 * The attempt log's entries the gateway writes itself: one per request from its facts
 * (src/facts.ts; from the `observe` middleware, src/gateway.ts, after the response), and the
 * settlement of an unknown outcome (`recordSettled`).
 */
import { hostname } from 'node:os'
import type { RequestFacts } from '../facts.js'
import type { AuditEntry } from '../store/index.js'
import type { Metrics } from '../telemetry/metrics.js'
import type { SETTLED_AS, SETTLED_BY } from '../telemetry/route-series.js'

/** Where entries go to be written (src/audit/queue.ts). */
export interface EntrySink { push(entry: AuditEntry): boolean }

/** hostname:pid of this process: which replica (or worker) made a decision. */
export const REPLICA = `${hostname()}:${process.pid}`

/** One settlement of an unknown outcome (contract §4a): who settled it, as what, and why. */
export interface Settlement {
  route: string
  keyHash: string
  by: (typeof SETTLED_BY)[number]
  /** `applied`: the effect happened (the record completed); `not_applied`: released */
  as: (typeof SETTLED_AS)[number]
  /** the entry's sentence; without it no entry is written (the caller wrote its own) */
  reason?: string
  /** the entry's time, epoch ms; default now */
  time?: number
  /** the probe's answer status */
  upstreamStatus?: number
}

/**
 * Records a settlement: counted in `fencegate_unknown_outcomes_settled_total{route, by, as}`
 * (contract §6) and, with a `reason`, its `resolve` entry pushed to `sink` for the key's timeline
 * (contract §8).
 */
export function recordSettled(metrics: Metrics, sink: EntrySink | undefined, s: Settlement): void {
  metrics.settled.inc({ route: s.route, by: s.by, as: s.as })
  if (s.reason === undefined) return
  sink?.push({ time: s.time ?? Date.now(), kind: 'resolve', replica: REPLICA, route: s.route, keyHash: s.keyHash, resolution: s.as === 'applied' ? 'completed' : 'failed', by: s.by, reason: s.reason, upstreamStatus: s.upstreamStatus })
}

/**
 * @param status the status the client got (499: it left; 0: no status line)
 * @param durationMs the request's duration in the gateway, ms
 * @param traceId the SERVER span's trace id, when tracing is on
 */
export function attemptEntry(f: RequestFacts, status: number, durationMs: number, traceId: string | undefined): AuditEntry {
  const outcome = f.outcome ?? 'forwarded'
  // one literal with every field (undefined where the request has none: JSON leaves those out),
  // not fields added one by one: a dozen shape changes per entry otherwise
  return {
    time: Date.now(),
    kind: 'attempt',
    replica: REPLICA,
    route: f.route ?? 'none',
    method: f.method,
    outcome,
    status,
    durationMs: Math.round(durationMs * 1000) / 1000,
    resource: f.resource,
    token: f.resource !== undefined ? String(f.token) : undefined,
    keyHash: f.keyHash || undefined,
    fingerprint: f.fingerprint || undefined,
    result: f.result ?? (outcome === 'in_flight' || outcome === 'key_reused' ? outcome : undefined),
    unknown: f.unknown || undefined,
    abandoned: f.abandoned ? true : undefined,
    duplicate: f.duplicate ? true : undefined,
    overtaken: f.overtaken ? true : undefined,
    upstreamStatus: f.upstreamStatus,
    upstreamMs: f.upstreamMs !== undefined ? Math.round(f.upstreamMs * 1000) / 1000 : undefined,
    lateMs: f.lateMs,
    highestToken: outcome === 'stale' && f.highest !== undefined ? String(f.highest) : undefined,
    traceId: traceId || undefined,
    requestId: f.requestId,
  }
}
