/**
 * Turns a request's facts (src/facts.ts) into one attempt log entry. Called once per request,
 * from the `observe` middleware (src/gateway.ts), after the response.
 */
import { hostname } from 'node:os'
import type { RequestFacts } from '../facts.js'
import type { AuditEntry } from '../store/attempt-log/types.js'

/** hostname:pid of this process: which replica (or worker) made a decision. */
export const REPLICA = `${hostname()}:${process.pid}`

/**
 * @param status the status the client got (499: it left; 0: no status line)
 * @param durationMs the request's duration in the gateway, ms
 * @param traceId the SERVER span's trace id, when tracing is on
 */
export function attemptEntry(f: RequestFacts, status: number, durationMs: number, traceId: string | undefined): AuditEntry {
  const e: AuditEntry = {
    time: Date.now(),
    kind: 'attempt',
    replica: REPLICA,
    route: f.route ?? 'none',
    method: f.method,
    outcome: f.outcome ?? 'forwarded',
    status,
    durationMs: Math.round(durationMs * 1000) / 1000,
  }
  if (f.resource !== undefined) { e.resource = f.resource; e.token = String(f.token) }
  if (f.keyHash) e.keyHash = f.keyHash
  if (f.fingerprint) e.fingerprint = f.fingerprint
  const result = f.result ?? (e.outcome === 'in_flight' || e.outcome === 'key_reused' ? e.outcome : undefined)
  if (result) e.result = result
  if (f.unknown) e.unknown = f.unknown
  if (f.abandoned) e.abandoned = true
  if (f.duplicate) e.duplicate = true
  if (f.overtaken) e.overtaken = true
  if (f.upstreamStatus !== undefined) e.upstreamStatus = f.upstreamStatus
  if (f.upstreamMs !== undefined) e.upstreamMs = Math.round(f.upstreamMs * 1000) / 1000
  if (f.lateMs !== undefined) e.lateMs = f.lateMs
  if (e.outcome === 'stale' && f.highest !== undefined) e.highestToken = String(f.highest)
  if (traceId) e.traceId = traceId
  e.requestId = f.requestId
  return e
}
