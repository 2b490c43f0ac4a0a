/**
 * What the request path needs from tracing (contract §7), on the OpenTelemetry API only: the
 * SDK is started by `bootstrap.ts`, or not at all. With no SDK every call here finds no span
 * and returns at once, so tracing off costs one context lookup per request.
 *
 * The SERVER span is the one `@opentelemetry/instrumentation-http` starts for the request; the
 * gateway names it `{method} {http.route}` and adds the `fencegate.*` attributes. The CLIENT
 * span of the upstream call is `@opentelemetry/instrumentation-undici`'s.
 */
import { auditKeyHash } from '../audit/entry.js'
import type { Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { context as otelContext, trace, TraceFlags, type Span } from '@opentelemetry/api'
import { getRPCMetadata, RPCType } from '@opentelemetry/core'
import type { Context } from 'hono'
import type { GatewayEnv } from '../context.js'

/**
 * Whether the environment asks for traces to be exported: `OTEL_TRACES_EXPORTER` set to
 * anything but `none`, or an OTLP endpoint (`OTEL_EXPORTER_OTLP_ENDPOINT`,
 * `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`); never when `OTEL_SDK_DISABLED=true`.
 */
export function tracingRequested(env: NodeJS.ProcessEnv = process.env): boolean {
  if (env.OTEL_SDK_DISABLED?.trim().toLowerCase() === 'true') return false
  const exporters = env.OTEL_TRACES_EXPORTER?.split(',').map((s) => s.trim().toLowerCase()).filter(Boolean)
  if (exporters?.length) return !exporters.includes('none')
  return Boolean(env.OTEL_EXPORTER_OTLP_ENDPOINT?.trim() || env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT?.trim())
}

/** Span attribute and event names of contract §7. */
export const ATTR = {
  route: 'fencegate.route',
  outcome: 'fencegate.outcome',
  resource: 'fencegate.fencing.resource',
  token: 'fencegate.fencing.token',
  highest: 'fencegate.fencing.highest_token',
  keyHash: 'fencegate.idempotency.key_hash',
  result: 'fencegate.idempotency.result',
  requestId: 'fencegate.request_id',
} as const
export const EVENT_FENCING_REJECTED = 'fencegate.fencing.rejected'
export const EVENT_REPLAYED = 'fencegate.idempotency.replayed'

/**
 * Request header fields the gateway's propagator writes on the upstream request (`traceparent`,
 * `tracestate`, `baggage` with the default W3C propagators), lower-case. Empty while tracing is
 * off. The client's values of these fields are not forwarded when tracing is on: the upstream
 * gets the gateway's own span context, never a second `traceparent` (contract §5).
 */
export let replacedTraceFields: readonly string[] = []

/** True once the SDK started in this process (`startTracing`), until it shuts down. */
export const tracingOn = (): boolean => replacedTraceFields.length > 0

/** Set by the SDK start-up to the propagator's fields. */
export function setReplacedTraceFields(fields: readonly string[]): void {
  replacedTraceFields = fields.map((f) => f.toLowerCase())
}

// Listeners whose requests get no span (the admin listener: probes and scrapes are not traffic).
const untracedListeners = new Set<string>()
const listenerKey = (address: string | undefined, port: number | undefined) => `${address}|${port}`

/** Requests to this server get no SERVER span (call it before or after it listens). */
export function untraced(server: Server): void {
  let key: string | undefined
  const add = () => {
    const a = server.address() as AddressInfo | null
    if (a && typeof a === 'object') untracedListeners.add(key = listenerKey(a.address, a.port))
  }
  if (server.listening) add()
  else server.once('listening', add)
  server.once('close', () => { if (key) untracedListeners.delete(key) })
}

/** For `ignoreIncomingRequestHook`: whether a request arrived on an untraced listener. */
export function isUntracedRequest(req: { socket: { localAddress?: string; localPort?: number } }): boolean {
  return untracedListeners.size > 0 && untracedListeners.has(listenerKey(req.socket.localAddress, req.socket.localPort))
}

/** The active span when it is sampled, for exemplars: `{trace_id, span_id}`, else undefined. */
export function traceExemplar(): { trace_id: string; span_id: string } | undefined {
  const span = trace.getActiveSpan()
  if (!span) return undefined
  const sc = span.spanContext()
  if (!(sc.traceFlags & TraceFlags.SAMPLED)) return undefined
  return { trace_id: sc.traceId, span_id: sc.spanId }
}

/**
 * What spans carry instead of the key: the attempt log's key hash (SHA-256 of scope hash and
 * key), so a span and its audit row can be joined, and one key used by two tenants differs.
 */
export const keyHash = auditKeyHash

/**
 * Starts annotating the request's SERVER span, if there is one: returns a function that writes
 * the attributes and events from `c.var` once. It also runs just before the span ends (the
 * response's `close`, which the HTTP instrumentation ends the span on), since a streamed
 * response may end before the middleware chain returns.
 */
export function serverSpan(c: Context<GatewayEnv>): ((outcome?: string) => void) | undefined {
  const active = otelContext.active()
  const span = trace.getSpan(active)
  if (!span || !span.isRecording()) return undefined
  const rpc = getRPCMetadata(active)
  let done = false
  const annotate = (outcome?: string) => {
    if (done) return
    done = true
    if (span.isRecording()) annotateServerSpan(span, c, outcome ?? c.get('outcome'), rpc?.type === RPCType.HTTP ? rpc : undefined)
  }
  c.env.outgoing.prependOnceListener('close', () => annotate())
  return annotate
}

function annotateServerSpan(span: Span, c: Context<GatewayEnv>, outcome: string | undefined, rpc: { route?: string } | undefined): void {
  const route = c.get('route')
  const method = c.env.incoming.method ?? 'GET'
  if (route) {
    const pattern = route.config.match.path
    span.updateName(`${method} ${pattern}`)
    span.setAttribute('http.route', pattern)
    span.setAttribute(ATTR.route, route.name)
    // the HTTP instrumentation names the span from this too when it ends it
    if (rpc) rpc.route = pattern
  }
  if (outcome) span.setAttribute(ATTR.outcome, outcome)
  const rid = c.get('requestId')
  if (rid) span.setAttribute(ATTR.requestId, rid)
  const fence = c.get('fence')
  if (fence) {
    span.setAttribute(ATTR.resource, fence.resource)
    span.setAttribute(ATTR.token, String(fence.token))
    span.setAttribute(ATTR.highest, String(fence.highest))
  }
  const record = c.get('idempotencyRecord')
  if (record) span.setAttribute(ATTR.keyHash, keyHash(record.scope, record.key))
  const result = c.get('idempotencyResult') ?? resultOf(outcome)
  if (result) span.setAttribute(ATTR.result, result)
  if (outcome === 'stale' && fence) {
    span.addEvent(EVENT_FENCING_REJECTED, { reason: 'stale', [ATTR.token]: String(fence.token), [ATTR.highest]: String(fence.highest) })
  } else if (outcome === 'token_missing' || outcome === 'token_malformed') {
    span.addEvent(EVENT_FENCING_REJECTED, { reason: outcome === 'token_missing' ? 'missing' : 'malformed' })
  }
  if (result === 'replayed') span.addEvent(EVENT_REPLAYED)
}

// Idempotency results that the outcome alone tells.
function resultOf(outcome: string | undefined): string | undefined {
  return outcome === 'in_flight' || outcome === 'key_reused' ? outcome : undefined
}
