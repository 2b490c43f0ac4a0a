/**
 * One route's request path, read top to bottom in `handle`: the route's own refusals (the store's
 * state lost; on an unguarded route a declared body over its limit), fencing and idempotency
 * reading the request, admission (the store calls and the one decision, src/admission/), and
 * for a request admitted: send → record → respond. A fenced request is in the check-to-apply
 * window (src/fencing/request-window.ts) from before its store check until it ends.
 *
 * Every answer is written here: a refusal as its problem, a replay and a forwarded answer by
 * the same respond code (src/forward/respond.ts). The record is written before the client sees
 * an answer it keeps, so a retry racing the answer's end finds it completed.
 */
import type { Pool } from 'undici'
import type { Exchange } from './exchange.js'
import type { RequestFacts } from './facts.js'
import type { CompiledRoute } from './route.js'
import type { StateWatch, Store } from './store/index.js'
import type { Metrics } from './telemetry/metrics.js'
import type { Logger } from './log.js'
import { stateLost, type Problem } from './problems.js'
import { BodyLimit } from './body.js'
import { requestTemplateSource } from './template-fill.js'
import { Admission } from './admission/index.js'
import { RouteWindows, type RequestWindow } from './fencing/request-window.js'
import type { WindowTracker } from './fencing/window-tracker.js'
import { Records, type Claim } from './idempotency/index.js'
import { Upstream } from './forward/send.js'
import { addedHeaders, respondAnswer, respondWhole } from './forward/respond.js'

/** What a route's path needs from the gateway. */
export interface PathParts {
  store: Store
  metrics: Metrics
  log: Logger
  /** this process's fencing windows, shared by every route */
  windows: WindowTracker
  pool: Pool
  /** the request fields the trace propagator writes (src/forward/send.ts) */
  traceFields: readonly string[]
  watch?: StateWatch
  /** writes a refusal (src/gateway.ts: the problem, with the audit view's address when configured) */
  refuse: (x: Exchange, p: Problem) => void
}

/** A route's handler: answers the request (or destroys its connection when nobody is left to answer). */
export type RouteHandler = (x: Exchange) => Promise<void>

const noop = () => {}

/**
 * The route's handler.
 * @throws StoreError when the store cannot answer (the app's error handler: 503, fail closed);
 *   anything else is a bug (500 gateway-error)
 */
export function routeHandler(route: CompiledRoute, parts: PathParts): RouteHandler {
  const { store, metrics, log, watch } = parts
  const name = route.name
  const pattern = route.config.match.path
  const idHeader = route.requestIdHeader
  const guarded = !!(route.fencing || route.idempotency)
  const limit = new BodyLimit(route.config.maxRequestBytes)
  const records = route.idempotency ? new Records(route, store, metrics, log) : undefined
  const admission = new Admission(route, store, metrics, records)
  const windows = route.fencing ? new RouteWindows(route, store, parts.windows, metrics, log) : undefined
  const upstream = new Upstream(route, parts.pool, metrics, parts.traceFields)

  const refuse = parts.refuse

  /** send → record → respond. */
  async function forward(x: Exchange, f: RequestFacts, claim?: Claim, body?: Buffer, window?: RequestWindow): Promise<void> {
    const { incoming, outgoing } = x
    try {
      const sent = await upstream.send(incoming, outgoing, f, body, claim?.captureBytes ?? 0, window ? () => window.markSent() : noop)
      if (sent.kind === 'failed') {
        await claim?.record(sent)
        if (sent.problem) return refuse(x, sent.problem)
        outgoing.destroy() // the client left, or the answer broke off before anything was written
        return
      }
      // before the client sees an answer the record keeps; alongside one too large to keep, so the
      // upstream is never left waiting on a paused connection
      const recording = claim?.record(sent)
      if (sent.body !== undefined) await recording
      const broke = await respondAnswer(outgoing, sent, addedHeaders(idHeader, f.requestId, false), idHeader,
        (aborted, timedOut) => upstream.brokenOff(f, sent.span, sent.call, aborted, timedOut, outgoing.headersSent))
      await recording
      if (broke !== undefined) {
        // the answer broke off mid-body: its outcome is unknown after all
        await claim?.record({ kind: 'failed', sent: true, reason: broke })
        outgoing.destroy()
      }
    } finally {
      claim?.end()
    }
  }

  return async function handle(x) {
    const f = x.facts
    f.route = name
    f.pattern = pattern
    const incoming = x.incoming
    if (!guarded) {
      // a route with neither check pays only what a proxy pays
      if (limit.declaredOver(incoming.headers)) return refuse(x, limit.tooLarge())
      return forward(x, f)
    }
    if (watch?.lost) return refuse(x, stateLost())
    let src: ReturnType<typeof requestTemplateSource> | undefined
    const source = () => (src ??= requestTemplateSource(x))
    const gone = () => incoming.socket.destroyed
    const fence = admission.readFence(incoming, source)
    if (fence !== undefined && 'refused' in fence) return answer(x, f, await admission.admit(f, fence, undefined, undefined, gone))
    const key = await admission.readKey(incoming, source)
    if (fence === undefined) return answer(x, f, await admission.admit(f, fence, key, undefined, gone))
    f.resource = fence.resource
    f.token = fence.token
    // entered before the check: an older token accepted before this one is always seen here
    const window = windows!.enter(fence.resource, fence.token)
    try {
      return await answer(x, f, await admission.admit(f, fence, key, window, gone), window)
    } finally {
      await window.end(f)
    }
  }

  /** Carries out admission's decision: the refusal, the replay, or the forward. */
  function answer(x: Exchange, f: RequestFacts, admitted: Awaited<ReturnType<Admission['admit']>>, window?: RequestWindow): void | Promise<void> {
    switch (admitted.kind) {
      case 'refuse':
        return refuse(x, admitted.problem)
      case 'replay': {
        // the stored response byte for byte; the request id is this request's, not the first one's
        const r = admitted.response
        respondWhole(x.outgoing, r.status, r.headers, r.body, addedHeaders(idHeader, f.requestId, true), idHeader)
        return
      }
      case 'forward':
        return forward(x, f, admitted.claim, admitted.body, window)
    }
  }
}
