/**
 * What the request path's middleware share through Hono's context (`c.var`): the request's
 * facts (src/facts.ts), set first by `observe` (src/gateway.ts) and filled along the path, and
 * the route that matched (src/request-path.ts sets it).
 */
import type { HttpBindings } from '@hono/node-server'
import type { RequestFacts } from './facts.js'
import type { CompiledRoute } from './route.js'

export type GatewayEnv = {
  Bindings: HttpBindings
  Variables: {
    facts: RequestFacts
    route: CompiledRoute
  }
}
