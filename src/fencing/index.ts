/**
 * `fencing()`: rejects stale fencing tokens before anything of the request is forwarded
 * (contract §3). The check-and-set of the high-water mark is one atomic store call; the token
 * is forwarded unchanged so the upstream can check it too.
 */
import type { MiddlewareHandler } from 'hono'
import type { GatewayEnv } from '../context.js'
import type { CompiledRoute } from '../route.js'
import type { Metrics } from '../telemetry/metrics.js'
import type { Store } from '../store/types.js'
import { Problem } from '../problems.js'
import { parseFencingToken } from './token.js'
import { storeProblem } from '../store/problem.js'
import { requestTemplateSource } from '../template-source.js'

/**
 * @example
 * app.post('/accounts/:account/*', fencing(route, store, metrics), forward(route))
 * @throws Problem 428 fencing-token-required, 400 fencing-token-malformed,
 *   400 fencing-resource-missing, 412 stale-fencing-token, 503 store-unavailable
 */
export function fencing(route: CompiledRoute, store: Store, metrics: Metrics): MiddlewareHandler<GatewayEnv> {
  const f = route.fencing
  if (!f) return async function fencingOff(_c, next) { await next() }
  const { tokenHeader, required, resource } = f
  const headerName = route.config.fencing!.tokenHeader // as configured, for messages
  const reject = (reason: 'stale' | 'missing' | 'malformed', p: Problem): never => {
    metrics.fencingRejections.inc({ route: route.name, reason })
    throw p
  }
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
    const res = resource(requestTemplateSource(c))
    if (res === undefined) {
      reject('malformed', new Problem('fencing-resource-missing', 'The fencing resource of this route cannot be determined from the request (a header, parameter or query value it names is absent).'))
    }
    let result
    try {
      result = await store.fence(res!, token!)
    } catch (e) {
      throw storeProblem(e)
    }
    c.set('fence', { resource: res!, token: token!, highest: result.highest })
    if (!result.accepted) {
      reject('stale', new Problem('stale-fencing-token', `Fencing token ${token} is older than ${result.highest}, the highest accepted for this resource: a newer lease holder has written since.`, {
        resource: res!, token: String(token), highestToken: String(result.highest),
      }))
    }
    await next()
  }
}
