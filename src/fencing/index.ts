/**
 * `fencing()`: rejects stale fencing tokens before anything of the request is forwarded
 * (contract §3). The check-and-set of the high-water mark is one atomic store call; the token
 * is forwarded unchanged so the upstream can check it too.
 *
 * Around the check, the request is registered in this process's in-flight tracker
 * (./inflight.ts) until it ends: a request that ends after a newer token of its resource was sent
 * upstream is counted in `fencegate_fencing_overtaken_total`; with `fencing.serialize` a newer
 * token waits for the older ones instead (503 `serialize-timeout` when the wait runs out).
 */
import type { MiddlewareHandler } from 'hono'
import type { GatewayEnv, PendingFence } from '../context.js'
import type { CompiledRoute } from '../route.js'
import type { Metrics } from '../telemetry/metrics.js'
import type { Logger } from '../log.js'
import type { Store } from '../store/types.js'
import { Problem } from '../problems.js'
import { parseFencingToken } from './token.js'
import { storeProblem } from '../store/problem.js'
import { requestTemplateSource } from '../template-source.js'
import { InFlight } from './inflight.js'

export { InFlight } from './inflight.js'

/**
 * Makes a fencing check on its own (no claim with it) and settles it; a no-op once settled.
 * @throws Problem 412 stale-fencing-token, 503 store-unavailable
 */
export async function settleFence(check: PendingFence | undefined, store: Store): Promise<void> {
  if (!check || check.settled) return
  let result
  try {
    result = await store.fence(check.resource, check.token)
  } catch (e) {
    throw storeProblem(e)
  }
  check.settle(result)
}

/**
 * @example
 * const inFlight = new InFlight()
 * app.post('/accounts/:account/*', fencing(route, store, metrics, log, inFlight), forward(route))
 * @throws Problem 428 fencing-token-required, 400 fencing-token-malformed,
 *   400 fencing-resource-missing, 412 stale-fencing-token, 503 store-unavailable,
 *   503 serialize-timeout (with Retry-After)
 */
export function fencing(route: CompiledRoute, store: Store, metrics: Metrics, log: Logger, inFlight: InFlight): MiddlewareHandler<GatewayEnv> {
  const f = route.fencing
  if (!f) return async function fencingOff(_c, next) { await next() }
  const { tokenHeader, required, resource } = f
  const cfg = route.config.fencing!
  const headerName = cfg.tokenHeader // as configured, for messages
  const serialize = cfg.serialize
  const waitMs = cfg.serializeWait ?? route.config.upstream.timeout
  // an unknown outcome holds the resource for the idempotency lease (from the request's start)
  // when the request had a record, else for one more upstream timeout after it ended
  const leaseMs = route.config.idempotency?.lease
  const upstreamTimeout = route.config.upstream.timeout
  // with idempotency on the route, the check waits for the claim so both take one store call;
  // with serialize it must come first (the wait for older tokens sits between the two). The
  // price: a stale writer's body (up to maxRequestBytes) is read before its 412, since the
  // claim needs the fingerprint; nothing of it is forwarded or stored.
  const handOff = route.idempotency !== undefined && !serialize
  const count = inFlight.route(route.name)
  const overtaken = { route: route.name }
  metrics.fencingOvertaken.inc(overtaken, 0) // present from the start, so increase() sees the first one
  const reject = (reason: 'stale' | 'missing' | 'malformed', p: Problem): never => {
    metrics.fencingRejections.inc({ route: route.name, reason })
    throw p
  }
  const stale = (res: string, token: bigint, highest: bigint): never =>
    reject('stale', new Problem('stale-fencing-token', `Fencing token ${token} is older than ${highest}, the highest accepted for this resource: a newer lease holder has written since.`, {
      resource: res, token: String(token), highestToken: String(highest),
    }))

  return async function fencing(c, next) {
    const raw = c.env.incoming.headers[tokenHeader]
    if (raw === undefined) {
      if (!required) return next()
      reject('missing', new Problem('fencing-token-required', `This route requires a ${headerName} header carrying the lease's fencing token.`))
    }
    const value = Array.isArray(raw) ? raw.join(', ') : raw!
    const token = parseFencingToken(value)
    if (token === undefined) {
      reject('malformed', new Problem('fencing-token-malformed', `${headerName} must be one canonical decimal integer from 0 to 9223372036854775807.`))
    }
    const filled = resource(requestTemplateSource(c))
    if (typeof filled !== 'string') {
      // refused before anything changes: no mark raised, nothing claimed or forwarded
      reject('malformed', new Problem('fencing-resource-missing', filled.unfilled === 'missing'
        ? `The fencing resource of this route cannot be determined from the request: ${filled.detail}.`
        : `The fencing resource of this route cannot be determined from the request: ${filled.detail}. The upstream could apply the write to another resource than the one checked; nothing was forwarded.`))
    }
    const res = filled as string
    // a NUL is no name a store can keep (PostgreSQL text refuses it); the template sources
    // refuse a decoded %00 already, this catches one from anywhere else (a template literal)
    if (res!.includes('\u0000')) {
      reject('malformed', new Problem('fencing-resource-missing', 'The fencing resource of this route, filled from the request, contains a NUL character (%00), which no resource name may hold.'))
    }
    // registered before the check: an older token accepted before this one is always seen here
    const flights = inFlight.enter(res!, token!)
    count.n++
    const started = serialize ? Date.now() : 0
    let held = false
    const check: PendingFence = {
      resource: res!,
      token: token!,
      settled: false,
      settle(result) {
        check.settled = true
        c.set('fence', { resource: res!, token: token!, highest: result.highest, flights })
        if (!result.accepted) stale(res!, token!, result.highest)
      },
    }
    try {
      if (handOff) {
        // idempotency() makes the check, together with its claim (Store.admit)
        c.set('pendingFence', check)
      } else {
        await settleFence(check, store)
      }
      if (serialize) {
        if (!(await inFlight.waitForOlder(flights, token!, waitMs))) {
          const retry = flights.heldUntil > Date.now() ? Math.ceil((flights.heldUntil - Date.now()) / 1000) : 1
          throw new Problem('serialize-timeout', `An older fencing token's request for this resource was still in flight (or its outcome unknown) after ${waitMs} ms; this request was not forwarded, so that a newer write never reaches the upstream before an older one. Retry later.`, { token: String(token) }, { 'retry-after': String(retry) })
        }
        if (c.env.incoming.socket.destroyed) {
          // the client left while held: do not send a write nobody waits for (nginx's 499)
          c.set('code', 499)
          throw new Problem('serialize-timeout', 'The client closed the connection while the request waited for older fencing tokens; it was not forwarded.', { token: String(token) })
        }
        // cannot happen while every route sharing the resource serializes; refused if it does
        if (flights.sent > token!) stale(res!, token!, flights.sent)
      }
      await next()
      const fence = c.get('fence')
      if (fence?.sent && flights.sent > token!) {
        fence.overtaken = true
        metrics.fencingOvertaken.inc(overtaken)
        log.warn('a request ended after one with a newer fencing token for the same resource had been sent upstream: the upstream may have applied the older write last', {
          route: route.name, token: String(token), newerToken: String(flights.sent), requestId: c.get('requestId'),
        })
      }
      if (serialize && fence?.sent && c.get('outcome') === 'outcome_unknown') {
        const until = c.get('exchange') !== undefined && leaseMs !== undefined ? started + leaseMs : Date.now() + upstreamTimeout
        if (until > Date.now()) {
          held = true
          inFlight.hold(flights, token!, until, () => { count.n-- })
        }
      }
    } finally {
      if (!held) {
        count.n--
        inFlight.leave(flights, token!)
      }
    }
  }
}
