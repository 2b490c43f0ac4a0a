/**
 * The route table: the config's routes in Hono's router (its RegExpRouter, a TrieRouter where
 * a pattern needs one: Hono's own default), matched as a Hono app matches — the path decoded
 * by Hono's `getPath`, HEAD matching the routes of GET, the first route in config order winning.
 * The table holds the gateway's handlers directly; no Context is made per request.
 */
import { METHOD_NAME_ALL, type Result, type Router } from 'hono/router'
import { SmartRouter } from 'hono/router/smart-router'
import { RegExpRouter } from 'hono/router/reg-exp-router'
import { TrieRouter } from 'hono/router/trie-router'
import { getPath } from 'hono/utils/url'

/** A route that matched, with its path parameters (raw, as they stand in the path). */
export class RouteMatch<T> {
  constructor(
    readonly value: T,
    private readonly params: Record<string, string | number>,
    private readonly stash: readonly string[] | undefined,
  ) {}

  /** The raw value of `:name` in the matched path; undefined when the pattern has none. */
  param(name: string): string | undefined {
    const p = this.params[name]
    if (p === undefined) return undefined
    return this.stash ? this.stash[p as number] : (p as string)
  }
}

export class RouteTable<T> {
  readonly #router: Router<T> = new SmartRouter({ routers: [new RegExpRouter(), new TrieRouter()] })

  /**
   * @param methods the methods the route takes (any case); undefined: every method
   * @param pattern a Hono path pattern (`/accounts/:account/*`)
   */
  add(methods: readonly string[] | undefined, pattern: string, value: T): void {
    if (!methods) this.#router.add(METHOD_NAME_ALL, pattern, value)
    else for (const m of methods) this.#router.add(m.toUpperCase(), pattern, value)
  }

  /**
   * The first route that takes `method` on the path of `url`.
   * @param url an absolute URL (`http://host/path?query`): the request's, as the front door
   *   made it (./front-door.ts `routingUrl`)
   */
  match(method: string, url: string): RouteMatch<T> | undefined {
    // Hono reads only `url` of the request it routes
    const path = getPath({ url } as Request)
    const r: Result<T> = this.#router.match(method === 'HEAD' ? 'GET' : method, path)
    const first = r[0][0]
    if (first === undefined) return undefined
    return new RouteMatch(first[0], first[1] as Record<string, string | number>, r[1] as readonly string[] | undefined)
  }
}
