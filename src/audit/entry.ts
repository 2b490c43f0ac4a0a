/**
 * Turns a request's facts (src/facts.ts) into one attempt log entry. Called once per request,
 * from the `observe` middleware (src/gateway.ts), after the response.
 */
import { hostname } from 'node:os'
import type { RequestFacts } from '../facts.js'
import type { AuditEntry } from '../store/index.js'

/** hostname:pid of this process: which replica (or worker) made a decision. */
export const REPLICA = `${hostname()}:${process.pid}`

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
