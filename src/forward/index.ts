/**
 * `forward()`: sends the request upstream with undici (one keep-alive Pool per route) and
 * streams the answer back (RFC 9110 §7.6). The path and query are forwarded as received.
 * Failure mapping (contract §5): connect failure → 502 (nothing sent); no response headers
 * within `upstream.timeout` → 504 (outcome unknown); reset after sending → 502 (outcome
 * unknown); reset after the response headers → the client's connection is aborted too.
 * The exchange runs on undici's dispatch API with one handler (./upstream-call.ts): on idempotent
 * routes the answer is captured for the record before the client sees it, else streamed.
 */
import type { IncomingMessage } from 'node:http'
import type { MiddlewareHandler } from 'hono'
import { RESPONSE_ALREADY_SENT } from '@hono/node-server/utils/response'
import { Pool, errors as undiciErrors } from 'undici'
import type { Dispatcher } from 'undici'
import type { GatewayEnv } from '../context.js'
import type { CompiledRoute } from '../route.js'
import type { Metrics } from '../telemetry/metrics.js'
import type { UnknownReason } from '../store/types.js'
import { Problem } from '../problems.js'
import { tooLarge } from '../body.js'
import { UpstreamCall } from './upstream-call.js'
import { requestHeaders, responseHeaders, flat, VIA } from './headers.js'
import { startClientSpan, tracingOn } from '../telemetry/tracing.js'

// Errors raised before any byte of the request could reach the upstream.
const NOT_SENT = new Set(['ECONNREFUSED', 'ENOTFOUND', 'EAI_AGAIN', 'EHOSTUNREACH', 'ENETUNREACH', 'UND_ERR_CONNECT_TIMEOUT'])

class BodyLimitError extends Error {}

/**
 * The request target as the upstream must see it: origin-form. An absolute-form target
 * (RFC 9112 §3.2.2) would let the client, not the gateway's Host, name the authority.
 */
const originForm = (target: string): string => {
  if (target.startsWith('/')) return target
  try { const u = new URL(target); return `${u.pathname}${u.search}` } catch { return target }
}

/** Streams a request body, stopping at `limit` bytes (bodies without a Content-Length). */
async function* limited(incoming: IncomingMessage, limit: number): AsyncGenerator<Buffer> {
  let size = 0
  for await (const chunk of incoming as AsyncIterable<Buffer>) {
    size += chunk.length
    if (size > limit) throw new BodyLimitError()
    yield chunk
  }
}

/** One undici Pool for a route's upstream; close them with `closeUpstreams`. */
export function createUpstream(route: CompiledRoute): Pool {
  const u = route.config.upstream
  return new Pool(new URL(u.url).origin, {
    connections: u.connections,
    connect: { timeout: u.connectTimeout },
    // the exchange keeps its own millisecond timers (./upstream-call.ts): undici's are ~0.5 s coarse
    headersTimeout: 0,
    bodyTimeout: 0,
    keepAliveTimeout: 4_000,
    pipelining: 1,
  })
}

/**
 * @param traceFields the request fields the trace propagator writes (`traceparent`, …), lower
 *   case: the client's are not forwarded, the gateway's own are (contract §5); empty with tracing off
 * @example
 * app.post('/accounts/:account/*', routeEntry(...), admission(...), forward(route, pool, metrics, []))
 */
export function forward(route: CompiledRoute, pool: Pool, metrics: Metrics, traceFields: readonly string[] = []): MiddlewareHandler<GatewayEnv> {
  const upstream = new URL(route.config.upstream.url)
  const host = upstream.host
  const maxBody = route.config.maxRequestBytes
  const keep = new Set([route.fencing?.tokenHeader, route.idempotency?.keyHeader].filter((h): h is string => !!h))
  const unknown = (reason: UnknownReason) => metrics.unknownOutcomes.inc({ route: route.name, reason })
  const fenced = route.fencing !== undefined
  const timeoutMs = route.config.upstream.timeout
  const idHeader = route.requestIdHeader
  // the upstream duration per status code, through label children (no label hashing per request)
  const byCode = new Map<number, { observe(v: number): void }>()
  const upstreamSeconds = (status: number, seconds: number) => {
    if (tracingOn()) return metrics.upstreamDuration.observe({ route: route.name, code: String(status) }, seconds) // with its exemplar
    let h = byCode.get(status)
    if (h === undefined) byCode.set(status, h = metrics.upstreamDuration.labels(route.name, String(status)))
    h.observe(seconds)
  }

  return async function forward(c) {
    const { incoming, outgoing } = c.env
    const f = c.get('facts')
    const exchange = c.get('exchange')
    const buffered = c.get('body')
    const declared = incoming.headers['content-length'] // over the limit: refused in routeEntry or admission
    const hasBody = buffered !== undefined || declared !== undefined || incoming.headers['transfer-encoding'] !== undefined
    const body = buffered ?? (!hasBody ? null : declared !== undefined ? incoming : limited(incoming, maxBody))

    const flights = fenced ? c.get('flights') : undefined
    // kept for replays: captured up to the limit, then streamed; otherwise streamed from the start
    const call = new UpstreamCall(exchange ? exchange.captureBytes : 0, timeoutMs, () => {
      // from here on, an older token of the resource ending is overtaken
      if (flights) { f.sent = true; flights.markSent(f.token!) }
    })
    const onClose = () => { if (!outgoing.writableFinished) call.abort() }
    if (outgoing.destroyed || incoming.socket?.destroyed) {
      // the client left while the checks ran: send nothing, give the claim back
      await exchange?.onFailure({ sent: false })
      f.outcome = 'bad_request'
      f.code = 499
      return RESPONSE_ALREADY_SENT
    }
    outgoing.once('close', onClose)
    const path = originForm(incoming.url!)
    const sendHeaders = requestHeaders(incoming, host, keep, [idHeader, f.requestId], traceFields)
    const span = startClientSpan(f.method, upstream, path, sendHeaders)
    const requestOptions: Dispatcher.DispatchOptions = { path, method: f.method as Dispatcher.HttpMethod, headers: sendHeaders, body }
    const started = performance.now()

    /**
     * Maps a failed exchange to its outcome (contract §5) and tells the idempotency layer.
     * @returns the response to give, or throws the problem
     */
    const failed = async (err: Error & { code?: string }, wasSent: boolean, aborted: boolean): Promise<Response> => {
      outgoing.off('close', onClose)
      span?.end(undefined, call.timedOut ? 'timeout' : err.code ?? err.name)
      if (err instanceof BodyLimitError || (err as { cause?: unknown }).cause instanceof BodyLimitError) {
        await exchange?.onFailure({ sent: false })
        throw tooLarge(maxBody)
      }
      if (!wasSent && call.timedOut) {
        // queued or connecting for the whole timeout: the upstream never saw it
        await exchange?.onFailure({ sent: false })
        const p = new Problem('upstream-timeout', `The upstream could not take the request within ${timeoutMs} ms (no connection free or connecting); nothing was sent, so retrying is safe.`)
        p.outcome = 'upstream_error'
        throw p
      }
      if (!wasSent && aborted) {
        // the client left while undici was still connecting or queued: nothing reached the upstream
        await exchange?.onFailure({ sent: false })
        f.outcome = 'bad_request'
        f.code = 499
        return RESPONSE_ALREADY_SENT
      }
      if (!wasSent || NOT_SENT.has(err.code ?? '') || NOT_SENT.has((err as { cause?: { code?: string } }).cause?.code ?? '')) {
        await exchange?.onFailure({ sent: false })
        throw new Problem('upstream-unavailable', `The upstream ${upstream.origin} could not be reached (${err.code ?? err.message}); nothing was sent, so retrying is safe.`)
      }
      const reason: UnknownReason = call.timedOut ? 'timeout' : aborted ? 'client_abort' : err instanceof undiciErrors.HeadersTimeoutError ? 'timeout' : 'reset'
      unknown(reason)
      f.unknown = reason
      await exchange?.onFailure({ sent: true, reason })
      if (reason === 'client_abort') { f.outcome = 'outcome_unknown'; f.code = 499; return RESPONSE_ALREADY_SENT }
      if (reason === 'timeout') {
        throw new Problem('upstream-timeout', `The upstream sent no response within ${timeoutMs} ms. The request was sent, so it may have taken effect.`)
      }
      const p = new Problem('upstream-unavailable', `The upstream connection failed after the request was sent (${err.code ?? err.message}); it may have taken effect.`)
      p.outcome = 'outcome_unknown'
      throw p
    }
    /** The upstream reset mid-body or the client left: never end a truncated body cleanly. */
    const broken = async (aborted: boolean, timedOut: boolean) => {
      span?.end(call.status, timedOut ? 'timeout' : aborted ? 'client_abort' : 'reset')
      if (outgoing.writableFinished) return
      const reason: UnknownReason = timedOut ? 'timeout' : aborted ? 'client_abort' : 'reset'
      unknown(reason)
      await exchange?.onFailure({ sent: true, reason })
      f.unknown = reason
      f.outcome = 'outcome_unknown'
      // what the client got: 499 when it left (nginx), 0 when it got no status line at all
      // (a captured answer cut off before its head was written; Envoy logs such a one as 0)
      if (aborted) f.code = 499
      else if (!outgoing.headersSent) f.code = 0
    }
    try {
      await call.start(pool, requestOptions)
    } catch (e) {
      return failed(e as Error, call.sent, call.aborted)
    }
    f.upstreamMs = performance.now() - started
    upstreamSeconds(call.status, f.upstreamMs / 1000)
    f.upstreamStatus = call.status
    f.outcome = 'forwarded'
    const headers = responseHeaders(call.headers as Record<string, string | string[] | undefined>)
    try {
      if (!call.captured) outgoing.writeHead(call.status, flat(headers, ['via', VIA, idHeader, f.requestId], idHeader)) // streamed: headers first
      const more = await call.body()
      if (more) {
        if (call.captured) outgoing.writeHead(call.status, flat(headers, ['via', VIA, idHeader, f.requestId], idHeader))
        for (const ch of call.chunks) outgoing.write(ch)
        const streamed = call.streamRest(outgoing)
        streamed.catch(() => {}) // awaited below; must not count as unhandled meanwhile
        // Too large to keep: the record (not_stored, status only) is written while the answer
        // streams, so the upstream is never left waiting on a paused connection.
        if (exchange) await exchange.onResponse({ status: call.status, headers, body: undefined })
        await streamed
      } else {
        const whole = call.chunks.length === 1 ? call.chunks[0] : Buffer.concat(call.chunks, call.size)
        if (exchange) await exchange.onResponse({ status: call.status, headers, body: whole })
        if (call.captured) outgoing.writeHead(call.status, flat(headers, ['via', VIA, idHeader, f.requestId], idHeader))
        outgoing.end(whole)
      }
    } catch {
      await broken(call.aborted && !call.timedOut, call.timedOut)
      call.abort()
      outgoing.destroy()
    } finally {
      outgoing.off('close', onClose)
      span?.end(call.status)
    }
    return RESPONSE_ALREADY_SENT
  }
}

/** Closes every upstream pool, letting requests in flight finish. */
export async function closeUpstreams(pools: Iterable<Pool>): Promise<void> {
  await Promise.all([...pools].map((p) => p.close()))
}
