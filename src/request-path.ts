/**
 * One route's request path, read top to bottom in `handle`: the route's own refusals (the store's
 * state lost; on an unguarded route a declared body over its limit), admission (src/admission/:
 * fencing and idempotency read the request, the store calls, the check-to-apply window, the one
 * decision — a refusal or a replay answered there), and for a request admitted: send → record →
 * respond (`forward`), then the end of what admission opened (its window, its claim's lease).
 *
 * The record is written before the client sees an answer it keeps, so a retry racing the
 * answer's end finds it completed. Every refusal is written by src/refuse.ts.
 */
import type { Exchange } from './exchange.js'
import type { RouteContext } from './route.js'
import { stateLost } from './problems.js'
import { refuse } from './refuse.js'
import { BodyLimit } from './body.js'
import { Admission, UNGUARDED, type Pass } from './admission/index.js'
import { Upstream } from './forward/send.js'
import { respondAnswer } from './forward/respond.js'

/** A route's handler: answers the request (or destroys its connection when nobody is left to answer). */
export type RouteHandler = (x: Exchange) => Promise<void>

/**
 * The route's handler.
 * @throws when the client left mid-body (nobody to answer), or on a bug (500 gateway-error):
 *   src/gateway.ts answers those
 */
export function routeHandler(context: RouteContext): RouteHandler {
  const { route, watch, refusing } = context
  const name = route.name
  const pattern = route.config.match.path
  const guarded = !!(route.fencing || route.idempotency)
  const limit = new BodyLimit(route.config.maxRequestBytes)
  const admission = guarded ? new Admission(context) : undefined
  const upstream = new Upstream(context)

  /** send → record → respond. */
  async function forward(x: Exchange, pass: Pass): Promise<void> {
    const claim = pass.claim
    const sent = await upstream.send(x, pass)
    if (sent.kind === 'failed') {
      await claim?.record(sent)
      if (sent.problem) return refuse(x, sent.problem, refusing)
      x.outgoing.destroy() // the client left, or the answer broke off before anything was written
      return
    }
    // before the client sees an answer the record keeps; alongside one too large to keep, so the
    // upstream is never left waiting on a paused connection
    const recording = claim?.record(sent)
    if (sent.body !== undefined) await recording
    const broke = await respondAnswer(x, sent, (reason) => upstream.brokenOff(x, sent, reason))
    await recording
    if (broke !== undefined) {
      // the answer broke off mid-body: its outcome is unknown after all
      await claim?.record({ kind: 'failed', sent: true, reason: broke })
      x.outgoing.destroy()
    }
  }

  return async function handle(x) {
    const f = x.facts
    f.route = name
    f.pattern = pattern
    if (admission === undefined) {
      // a route with neither check pays only what a proxy pays
      if (limit.declaredOver(x.incoming.headers)) return refuse(x, limit.tooLarge(), refusing)
      return forward(x, UNGUARDED)
    }
    if (watch?.lost) return refuse(x, stateLost(), refusing)
    const pass = await admission.admit(x)
    try {
      if (pass.admitted) await forward(x, pass)
    } finally {
      await pass.end()
    }
  }
}
