/**
 * Traces (contract §7), made by the gateway itself on the OpenTelemetry API: one SERVER span per
 * request on the proxy listener (its parent from the client's `traceparent`), one CLIENT span
 * per upstream call, whose context is injected into the upstream request by the registered
 * propagator. No generic HTTP or undici instrumentation runs: they cost more per request than
 * the rest of the gateway together.
 *
 * The SDK is started by `sdk.ts` (from `bootstrap.ts`), or not at all: with none, `tracingOn()` is
 * false and the request path makes no span and no context switch. Names and attributes follow the
 * OpenTelemetry HTTP semantic conventions, plus the `fencegate.*` attributes of contract §7.
 */
import type { IncomingMessage } from 'node:http'
import { context as otelContext, propagation, ROOT_CONTEXT, SpanKind, SpanStatusCode, trace, TraceFlags, type Context, type Span, type TextMapGetter, type Tracer } from '@opentelemetry/api'
import { VERSION } from '../version.js'
import type { RequestFacts } from '../facts.js'

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

let tracer: Tracer | undefined
let fields: readonly string[] = []

/** True once the SDK started in this process, until it shuts down. */
export const tracingOn = (): boolean => tracer !== undefined

/**
 * Request header fields the propagator writes on the upstream request (`traceparent`,
 * `tracestate`, `baggage` with the default W3C propagators), lower case; empty while tracing is
 * off. The client's values of these fields are not forwarded then (contract §5).
 */
export const traceFields = (): readonly string[] => fields

/** Called by the SDK's start (`on`) and shutdown (`off`). */
export function setTracing(on: boolean): void {
  tracer = on ? trace.getTracer('fencegate', VERSION) : undefined
  fields = on ? propagation.fields().map((f) => f.toLowerCase()) : []
}

const headerGetter: TextMapGetter<IncomingMessage['headers']> = {
  keys: (h) => Object.keys(h),
  get: (h, key) => h[key],
}

/** The active span when it is sampled, for exemplars: `{trace_id, span_id}`, else undefined. */
export function traceExemplar(): { trace_id: string; span_id: string } | undefined {
  const span = trace.getActiveSpan()
  if (!span) return undefined
  const sc = span.spanContext()
  if (!(sc.traceFlags & TraceFlags.SAMPLED)) return undefined
  return { trace_id: sc.traceId, span_id: sc.spanId }
}

/** A request's SERVER span and the context to run the rest of the request in. */
export interface ServerTrace {
  ctx: Context
  /** the trace id, for the attempt log and the access line */
  traceId: string
  /** names the span, sets the `fencegate.*` attributes from the facts, and ends it (once) */
  end(f: RequestFacts, status: number): void
}

/**
 * Starts the SERVER span of a request on the proxy listener, or returns undefined with tracing
 * off. Its parent is the client's `traceparent` when it sent one.
 */
export function startServerSpan(req: IncomingMessage): ServerTrace | undefined {
  if (!tracer) return undefined
  const parent = propagation.extract(ROOT_CONTEXT, req.headers, headerGetter)
  const method = req.method ?? 'GET'
  const span = tracer.startSpan(method, {
    kind: SpanKind.SERVER,
    attributes: {
      'http.request.method': method,
      'url.path': pathOf(req.url),
      'url.scheme': (req.socket as { encrypted?: boolean }).encrypted ? 'https' : 'http',
      'network.protocol.version': req.httpVersion,
      'client.address': req.socket?.remoteAddress,
      'user_agent.original': req.headers['user-agent'],
    },
  }, parent)
  const ctx = trace.setSpan(parent, span)
  let ended = false
  return {
    ctx,
    traceId: span.spanContext().traceId,
    end(f, status) {
      if (ended) return
      ended = true
      annotate(span, f, status)
      span.end()
    },
  }
}

function pathOf(url: string | undefined): string {
  if (!url) return '/'
  const q = url.indexOf('?')
  return q < 0 ? url : url.slice(0, q)
}

function annotate(span: Span, f: RequestFacts, status: number): void {
  if (f.pattern) {
    span.updateName(`${f.method} ${f.pattern}`)
    span.setAttribute('http.route', f.pattern)
  }
  if (f.route) span.setAttribute(ATTR.route, f.route)
  if (status > 0) span.setAttribute('http.response.status_code', status)
  if (status >= 500 || status === 0) span.setStatus({ code: SpanStatusCode.ERROR })
  const outcome = f.outcome ?? 'forwarded'
  span.setAttribute(ATTR.outcome, outcome)
  span.setAttribute(ATTR.requestId, f.requestId)
  if (f.resource !== undefined) span.setAttribute(ATTR.resource, f.resource)
  if (f.token !== undefined) span.setAttribute(ATTR.token, String(f.token))
  if (f.highest !== undefined) span.setAttribute(ATTR.highest, String(f.highest))
  if (f.keyHash) span.setAttribute(ATTR.keyHash, f.keyHash)
  const result = f.result ?? (outcome === 'in_flight' || outcome === 'key_reused' ? outcome : undefined)
  if (result) span.setAttribute(ATTR.result, result)
  if (outcome === 'stale') {
    span.addEvent(EVENT_FENCING_REJECTED, { reason: 'stale', [ATTR.token]: String(f.token), [ATTR.highest]: String(f.highest) })
  } else if (outcome === 'token_missing' || outcome === 'token_malformed') {
    span.addEvent(EVENT_FENCING_REJECTED, { reason: outcome === 'token_missing' ? 'missing' : 'malformed' })
  }
  if (result === 'replayed') span.addEvent(EVENT_REPLAYED)
}

/** An upstream call's CLIENT span; `end` once the call is over. */
export interface ClientTrace {
  end(status: number | undefined, error?: string): void
}

/**
 * Starts the CLIENT span of an upstream call in the active context (the request's SERVER span)
 * and writes its context into `headers` (a flat name/value list) with the propagator.
 * @returns undefined with tracing off
 */
export function startClientSpan(method: string, origin: URL, path: string, headers: string[]): ClientTrace | undefined {
  if (!tracer) return undefined
  const span = tracer.startSpan(method, {
    kind: SpanKind.CLIENT,
    attributes: {
      'http.request.method': method,
      'url.full': `${origin.origin}${path}`,
      'server.address': origin.hostname,
      'server.port': Number(origin.port || (origin.protocol === 'https:' ? 443 : 80)),
    },
  }, otelContext.active())
  propagation.inject(trace.setSpan(otelContext.active(), span), headers, { set: (carrier, key, value) => { carrier.push(key, value) } })
  let ended = false
  return {
    end(status, error) {
      if (ended) return
      ended = true
      if (status !== undefined) span.setAttribute('http.response.status_code', status)
      if (error !== undefined) {
        span.setAttribute('error.type', error)
        span.setStatus({ code: SpanStatusCode.ERROR })
      } else if (status !== undefined && status >= 500) {
        span.setStatus({ code: SpanStatusCode.ERROR })
      }
      span.end()
    },
  }
}
