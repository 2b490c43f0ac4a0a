/**
 * One request on the proxy listener, as the request path sees it: Node's request and response,
 * the request's facts (./facts.ts), the route that matched and its path parameters. Made once
 * per request by the gateway (./gateway.ts); no framework object stands between the path and
 * Node's request and response.
 */
import type { IncomingMessage, ServerResponse } from 'node:http'
import { tryDecodeURIComponent } from 'hono/utils/url'
import type { RequestFacts } from './facts.js'
import type { CompiledRoute } from './route.js'
import type { RouteMatch } from './routing.js'

export class Exchange {
  /** the route that matched; undefined until routed, and when none did */
  route: CompiledRoute | undefined = undefined
  /** the router's match of `route`: its path parameters */
  match: RouteMatch<unknown> | undefined = undefined

  constructor(readonly incoming: IncomingMessage, readonly outgoing: ServerResponse, readonly facts: RequestFacts) {}

  /**
   * A path parameter of the matched route (`:account`), percent-decoded as Hono decodes it
   * (an invalid escape is left as it came); undefined when the route has no such parameter.
   */
  param(name: string): string | undefined {
    const v = this.match?.param(name)
    return v && tryDecodeURIComponent(v)
  }
}
