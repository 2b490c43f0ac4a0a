/**
 * The send step: the request goes upstream with undici (one keep-alive Pool per route, the
 * exchange on its dispatch API with one handler of ours, ./upstream-call.ts). What it returns is
 * an `Answer` — the upstream's status and end-to-end headers, and the whole body when it was
 * captured, else the live exchange (`call`) the body is still coming from — or a `Failed`: why
 * nothing (complete) came back, as data. Writing the answer to the client, draining that live
 * exchange, is ./respond.ts's.
 *
 * Failure mapping (contract §5): connect failure → 502 (nothing sent); no response headers
 * within `upstream.timeout` → 504 (outcome unknown); reset after sending → 502 (outcome
 * unknown); the client left → nothing to answer (499). The path and query go as received.
 */
import { Pool, errors as undiciErrors } from 'undici'
import type { Dispatcher } from 'undici'
import type { Exchange } from '../exchange.js'
import type { CompiledRoute, RouteContext } from '../route.js'
import type { RequestFacts } from '../facts.js'
import type { Metrics } from '../telemetry/metrics.js'
import type { UnknownReason } from '../outcomes.js'
import { Problem } from '../problems.js'
import { unanswered } from '../refuse.js'
import { BodyLimit } from '../body.js'
import { UpstreamCall } from './upstream-call.js'
import { requestHeaders, responseHeaders } from './headers.js'
import { startClientSpan, tracingOn, type ClientTrace } from '../telemetry/tracing.js'
import { histogramSeries } from '../telemetry/series.js'
import { tlsReason } from '../tls/reasons.js'
import { upstreamConnector, type UpstreamConnector, type UpstreamTls } from '../tls/upstream.js'

// Errors raised before any byte of the request could reach the upstream.
const NOT_SENT = new Set(['ECONNREFUSED', 'ENOTFOUND', 'EAI_AGAIN', 'EHOSTUNREACH', 'ENETUNREACH', 'UND_ERR_CONNECT_TIMEOUT'])

/**
 * The upstream answered: `body` is the whole body when it was captured whole (for the record,
 * or a small answer), else undefined — the exchange is still live: its first chunks are in
 * `call.chunks` (`call.overflow`) or it streams from the start; `upstreamMs` from sending to the
 * response headers.
 */
export interface Answer {
  kind: 'answer'
  status: number
  headers: [string, string][]
  body: Buffer | undefined
  upstreamMs: number
  call: UpstreamCall
  span: ClientTrace | undefined
  /** aborts the exchange when the client leaves; removed once the answer is written */
  onClose: () => void
}

/**
 * No (complete) answer. `sent` false: nothing reached the upstream; true: the outcome is unknown
 * for `reason`. `problem`: what the client gets; none when there is nobody (or nothing) left to
 * answer: the client left, or the answer broke off after its headers came.
 */
export type Failed =
  | { kind: 'failed'; sent: false; problem?: Problem }
  | { kind: 'failed'; sent: true; reason: UnknownReason; problem?: Problem }

export type Sent = Answer | Failed

/**
 * What the send step is given with a request (src/admission/pass.ts `Pass`): the body when it was
 * read already (a claim fingerprints it), the bytes of the answer to capture before streaming (a
 * claim's record; 0 streams), and `markSent`, called once, when undici starts writing the
 * request (the effect may happen from here).
 */
export interface Sending {
  readonly body: Buffer | undefined
  readonly captureBytes: number
  markSent(): void
}

/**
 * The request target as the upstream must see it: origin-form. An absolute-form target
 * (RFC 9112 §3.2.2) would let the client, not the gateway's Host, name the authority.
 */
const originForm = (target: string): string => {
  if (target.startsWith('/')) return target
  try { const u = new URL(target); return `${u.pathname}${u.search}` } catch { return target }
}

/**
 * One undici Pool for a route's upstream; close them with `closeUpstreams`. `tls`: the route's
 * upstream TLS (src/tls/upstream.ts), read by the caller so a file that cannot be used is found
 * before any pool is made.
 */
export function createUpstream(route: CompiledRoute, tls?: UpstreamTls): Pool {
  const u = route.config.upstream
  const connector = tls && upstreamConnector(tls, u.connectTimeout)
  const pool = new Pool(new URL(u.url).origin, {
    connections: u.connections,
    connect: connector?.connect ?? { timeout: u.connectTimeout },
    // the exchange keeps its own millisecond timers (./upstream-call.ts): undici's are ~0.5 s coarse
    headersTimeout: 0,
    bodyTimeout: 0,
    keepAliveTimeout: 4_000,
    pipelining: 1,
  })
  if (connector) refusals.set(pool, connector.refusal)
  return pool
}

/** Each TLS pool's look-up of the alert an upstream refused a handshake with (src/tls/upstream.ts). */
const refusals = new WeakMap<Pool, UpstreamConnector['refusal']>()

/** Closes every upstream pool, letting requests in flight finish. */
export async function closeUpstreams(pools: Iterable<Pool>): Promise<void> {
  await Promise.all([...pools].map((p) => p.close()))
}

/** One route's upstream. */
export class Upstream {
  readonly #url: URL
  readonly #keep: Set<string>
  readonly #timeoutMs: number
  readonly #limit: BodyLimit
  /** the upstream duration per status code, through label children (no label hashing per request) */
  readonly #byCode = new Map<number, { observe(v: number): void }>()

  /**
   * the request fields the trace propagator writes (`traceparent`, …), lower case: the client's
   * are not forwarded, the gateway's own are (contract §5); empty with tracing off
   */
  readonly #route: CompiledRoute
  readonly #pool: Pool
  readonly #metrics: Metrics
  readonly #traceFields: readonly string[]

  /** `context.traceFields`: see the class's fields; `context.pool`: the route's (`createUpstream`) */
  constructor(context: RouteContext) {
    const route = this.#route = context.route
    this.#pool = context.pool
    this.#metrics = context.metrics
    this.#traceFields = context.traceFields
    this.#url = new URL(route.config.upstream.url)
    this.#keep = new Set([route.fencing?.tokenHeader, route.idempotency?.keyHeader].filter((h): h is string => !!h))
    this.#timeoutMs = route.config.upstream.timeout
    this.#limit = new BodyLimit(route.config.maxRequestBytes)
  }

  /**
   * Sends the request; resolves once the answer's headers are in (and its body, when captured)
   * or the exchange failed. Notes the upstream's status, duration and unknown outcomes on the
   * request's facts.
   */
  async send(x: Exchange, sending: Sending): Promise<Sent> {
    const { incoming, outgoing, facts: f } = x
    if (outgoing.destroyed || incoming.socket?.destroyed) {
      // the client left while the checks ran: send nothing
      return this.#clientLeft(x, false)
    }
    const call = new UpstreamCall(sending.captureBytes, this.#timeoutMs, sending)
    const onClose = () => { if (!outgoing.writableFinished) call.abort() }
    outgoing.once('close', onClose)
    const path = originForm(incoming.url!)
    const headers = requestHeaders(incoming, this.#url.host, this.#keep, [this.#route.requestIdHeader, f.requestId], this.#traceFields)
    const span = startClientSpan(f.method, this.#url, path, headers)
    const started = performance.now()
    try {
      await call.start(this.#pool, { path, method: f.method as Dispatcher.HttpMethod, headers, body: (sending.body ?? this.#limit.stream(incoming)) as Dispatcher.DispatchOptions['body'] })
    } catch (e) {
      outgoing.off('close', onClose)
      span?.end(undefined, call.timedOut ? 'timeout' : (e as { code?: string }).code ?? (e as Error).name)
      return this.#failed(x, e as Error, call)
    }
    const upstreamMs = f.upstreamMs = performance.now() - started
    this.#observe(call.status, upstreamMs / 1000)
    f.upstreamStatus = call.status
    f.outcome = 'forwarded'
    const answer: Answer = { kind: 'answer', status: call.status, headers: responseHeaders(call.lines), body: undefined, upstreamMs, call, span, onClose }
    if (!call.captured) return answer
    try {
      if (!(await call.body())) answer.body = call.chunks.length === 1 ? call.chunks[0] : Buffer.concat(call.chunks, call.size)
      return answer
    } catch {
      // cut off before the client saw anything: never end a truncated body cleanly
      outgoing.off('close', onClose)
      const reason = this.brokenOff(x, answer, call.unknownReason)
      call.abort()
      return { kind: 'failed', sent: true, reason }
    }
  }

  /**
   * The answer broke off after its headers (the upstream reset or went silent mid-body, or the
   * client left): the outcome is unknown, for `reason` (./upstream-call.ts `unknownReason`).
   * Notes it on the request's facts: 499 when the client left (nginx), 0 when it got no status
   * line at all (Envoy logs such a one as 0).
   * @returns `reason`
   */
  brokenOff(x: Exchange, a: Answer, reason: UnknownReason): UnknownReason {
    const f = x.facts
    a.span?.end(a.status, reason)
    this.#unknown(f, reason)
    f.outcome = 'outcome_unknown'
    if (reason === 'client_abort') f.code = 499
    else if (!x.outgoing.headersSent) f.code = 0
    return reason
  }

  #failed(x: Exchange, err: Error & { code?: string }, call: UpstreamCall): Failed {
    const f = x.facts
    const timeoutMs = this.#timeoutMs
    if (BodyLimit.exceeded(err)) return { kind: 'failed', sent: false, problem: this.#limit.tooLarge() }
    if (!call.sent && call.timedOut) {
      // queued or connecting for the whole timeout: the upstream never saw it
      const p = new Problem('upstream-timeout', `The upstream could not take the request within ${timeoutMs} ms (no connection free or connecting); nothing was sent, so retrying is safe.`)
      p.outcome = 'upstream_error'
      return { kind: 'failed', sent: false, problem: p }
    }
    // the client left while undici was still connecting or queued: nothing reached the upstream
    if (!call.sent && call.aborted) return this.#clientLeft(x, false)
    // a peer that refused the handshake (our client certificate) read no request: with TLS 1.3
    // the request may already be written when its alert comes, but it was never taken
    const refused = refusals.get(this.#pool)?.(err)
    const tls = tlsReason(refused ?? err)
    if (!call.sent || NOT_SENT.has(err.code ?? '') || NOT_SENT.has((err as { cause?: { code?: string } }).cause?.code ?? '') || refused) {
      const why = tls ? `over TLS: ${tls}` : `(${err.code ?? err.message})`
      return { kind: 'failed', sent: false, problem: new Problem('upstream-unavailable', `The upstream ${this.#url.origin} could not be reached ${why}; nothing was sent, so retrying is safe.`) }
    }
    const reason: UnknownReason = call.timedOut ? 'timeout' : call.aborted ? 'client_abort' : err instanceof undiciErrors.HeadersTimeoutError ? 'timeout' : 'reset'
    this.#unknown(f, reason)
    if (reason === 'client_abort') return this.#clientLeft(x, true)
    if (reason === 'timeout') {
      return { kind: 'failed', sent: true, reason, problem: new Problem('upstream-timeout', `The upstream sent no response within ${timeoutMs} ms. The request was sent, so it may have taken effect.`) }
    }
    const p = new Problem('upstream-unavailable', `The upstream connection failed after the request was sent (${err.code ?? err.message}); it may have taken effect.`)
    p.outcome = 'outcome_unknown'
    return { kind: 'failed', sent: true, reason, problem: p }
  }

  /** The client left before an answer: nobody to answer (src/refuse.ts `unanswered`). */
  #clientLeft(x: Exchange, sent: boolean): Failed {
    unanswered(x, sent ? 'outcome_unknown' : 'bad_request')
    return sent ? { kind: 'failed', sent: true, reason: 'client_abort' } : { kind: 'failed', sent: false }
  }

  #unknown(f: RequestFacts, reason: UnknownReason): void {
    this.#metrics.unknownOutcomes.inc({ route: this.#route.name, reason })
    f.unknown = reason
  }

  #observe(status: number, seconds: number): void {
    const metrics = this.#metrics
    const route = this.#route
    if (tracingOn()) return metrics.upstreamDuration.observe({ route: route.name, code: String(status) }, seconds) // with its exemplar
    let h = this.#byCode.get(status)
    if (h === undefined) this.#byCode.set(status, h = histogramSeries(metrics.upstreamDuration, route.name, String(status)))
    h.observe(seconds)
  }
}
