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
import type { MiddlewareHandler } from 'hono'
import type { Context } from 'hono'
import { RESPONSE_ALREADY_SENT } from '@hono/node-server/utils/response'
import type { Pool } from 'undici'
import type { GatewayEnv } from './context.js'
import type { RequestFacts } from './facts.js'
import type { CompiledRoute } from './route.js'
import type { Store } from './store/types.js'
import type { StateWatch } from './store/state-loss.js'
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
  /** a refusal's response (src/gateway.ts: the problem, with the audit view's address when configured) */
  refuse: (f: RequestFacts, p: Problem) => Response
}

const noop = () => {}

/**
 * The route's handler.
 * @throws StoreError when the store cannot answer (the app's error handler: 503, fail closed);
 *   anything else is a bug (500 gateway-error)
 */
export function routeHandler(route: CompiledRoute, parts: PathParts): MiddlewareHandler<GatewayEnv> {
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
  async function forward(c: Context<GatewayEnv>, f: RequestFacts, claim?: Claim, body?: Buffer, window?: RequestWindow): Promise<Response> {
    const { incoming, outgoing } = c.env
    try {
      const sent = await upstream.send(incoming, outgoing, f, body, claim?.captureBytes ?? 0, window ? () => window.markSent() : noop)
      if (sent.kind === 'failed') {
        await claim?.record(sent)
        if (sent.problem) return refuse(f, sent.problem)
        outgoing.destroy() // the client left, or the answer broke off before anything was written
        return RESPONSE_ALREADY_SENT
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
      return RESPONSE_ALREADY_SENT
    } finally {
      claim?.end()
    }
  }

  return async function handle(c) {
    const f = c.get('facts')
    f.route = name
    f.pattern = pattern
    c.set('route', route)
    const incoming = c.env.incoming
    if (!guarded) {
      // a route with neither check pays only what a proxy pays
      if (limit.declaredOver(incoming.headers)) return refuse(f, limit.tooLarge())
      return forward(c, f)
    }
    if (watch?.lost) return refuse(f, stateLost())
    let src: ReturnType<typeof requestTemplateSource> | undefined
    const source = () => (src ??= requestTemplateSource(c))
    const gone = () => incoming.socket.destroyed
    const fence = admission.readFence(incoming, source)
    if (fence !== undefined && 'refused' in fence) return answer(c, f, await admission.admit(f, fence, undefined, undefined, gone))
    const key = await admission.readKey(incoming, source)
    if (fence === undefined) return answer(c, f, await admission.admit(f, fence, key, undefined, gone))
    f.resource = fence.resource
    f.token = fence.token
    // entered before the check: an older token accepted before this one is always seen here
    const window = windows!.enter(fence.resource, fence.token)
    try {
      return await answer(c, f, await admission.admit(f, fence, key, window, gone), window)
    } finally {
      await window.end(f)
    }
  }

  /** Carries out admission's decision: the refusal, the replay, or the forward. */
  function answer(c: Context<GatewayEnv>, f: RequestFacts, admitted: Awaited<ReturnType<Admission['admit']>>, window?: RequestWindow): Response | Promise<Response> {
    switch (admitted.kind) {
      case 'refuse':
        return refuse(f, admitted.problem)
      case 'replay': {
        // the stored response byte for byte; the request id is this request's, not the first one's
        const r = admitted.response
        respondWhole(c.env.outgoing, r.status, r.headers, r.body, addedHeaders(idHeader, f.requestId, true), idHeader)
        return RESPONSE_ALREADY_SENT
      }
      case 'forward':
        return forward(c, f, admitted.claim, admitted.body, window)
    }
  }
}
