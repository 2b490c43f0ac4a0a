/**
 * Turns what the request path left in `c.var` into one attempt log entry. Called once per
 * request, from the `observe` middleware (src/gateway.ts), after the response.
 */
import { hostname } from 'node:os'
import { trace } from '@opentelemetry/api'
import type { Context } from 'hono'
import type { GatewayEnv } from '../context.js'
import type { Outcome } from '../problems.js'
import { sha256hex } from '../route.js'
import type { AuditEntry } from './types.js'

/** hostname:pid of this process: which replica (or worker) made a decision. */
export const REPLICA = `${hostname()}:${process.pid}`

/** The key hash of the attempt log: hex SHA-256 of the record's scope (itself a hash, or "") and key. */
export const auditKeyHash = (scope: string, key: string): string => sha256hex(`${scope}\n${key}`)

/** The trace id of the active span when tracing records it, else undefined. */
export function activeTraceId(): string | undefined {
  const span = trace.getActiveSpan()
  return span?.isRecording() ? span.spanContext().traceId : undefined
}

export function attemptEntry(c: Context<GatewayEnv>, outcome: Outcome, status: number, durationMs: number, traceId: string | undefined): AuditEntry {
  const v = <K extends keyof GatewayEnv['Variables']>(k: K) => c.get(k) // c.var copies them all
  const fence = v('fence')
  const record = v('idempotencyRecord')
  const e: AuditEntry = {
    time: Date.now(),
    kind: 'attempt',
    replica: REPLICA,
    route: v('route')?.name ?? 'none',
    method: c.env.incoming.method ?? 'GET',
    outcome,
    status,
    durationMs: Math.round(durationMs * 1000) / 1000,
  }
  if (fence) { e.resource = fence.resource; e.token = String(fence.token) }
  if (record) e.keyHash = auditKeyHash(record.scope, record.key)
  if (v('fingerprint')) e.fingerprint = v('fingerprint')
  const result = v('idempotencyResult') ?? (outcome === 'in_flight' || outcome === 'key_reused' ? outcome : undefined)
  if (result) e.result = result
  if (v('unknownReason')) e.unknown = v('unknownReason')
  if (v('abandoned')) e.abandoned = true
  if (v('duplicateForward')) e.duplicate = true
  if (fence?.overtaken) e.overtaken = true
  if (v('upstreamStatus') !== undefined) e.upstreamStatus = v('upstreamStatus')
  if (traceId) e.traceId = traceId
  const rid = v('requestId')
  if (rid) e.requestId = rid
  return e
}
