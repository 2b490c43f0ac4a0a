/**
 * Checks across keys, for the mistakes that validate key by key and still break a deployment:
 * a route that can never match, an upstream URL whose path would be dropped, two listeners on
 * one address, idempotency methods the route never admits. They run on whatever parts of the
 * config are valid, field by field (./salvage.ts): a check whose inputs did not validate is
 * skipped, so `check-config` reports everything in one pass and never a guess.
 */
import type { Config, RouteConfig } from './schema.js'
import type { Parts } from './salvage.js'
import { compileTemplate, pathParams } from './template.js'
import { compileProbeTemplate } from './probe-template.js'
import { HOP_BY_HOP } from '../hop-by-hop.js'
import { hostPort, isWildcard } from '../listen-address.js'

/** One finding: its YAML path and the message. */
export interface Finding { path: PropertyKey[]; message: string }

const ALL_METHODS = ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS']

/**
 * The methods a route really receives. The route table answers HEAD with the GET routes
 * (src/routing.ts, as a Hono app dispatches a HEAD request), so a route listing GET gets HEAD
 * too, and HEAD alone gets nothing.
 */
export function routedMethods(methods: readonly string[] | undefined): Set<string> {
  const m = new Set(methods ?? ALL_METHODS)
  if (m.has('GET')) m.add('HEAD')
  else m.delete('HEAD')
  return m
}

type Segment = { kind: 'literal'; text: string } | { kind: 'param' } | { kind: 'wildcard' } | { kind: 'other' }

/** A Hono path pattern as segments; `other` for what this check does not reason about (regex, optional, partial wildcards). */
function segments(pattern: string): Segment[] {
  return pattern.split('/').slice(1).map((s): Segment => {
    if (s === '*') return { kind: 'wildcard' }
    if (/^:[A-Za-z0-9_]+$/.test(s)) return { kind: 'param' }
    if (s.includes(':') || s.includes('*') || s.includes('{') || s.includes('?')) return { kind: 'other' }
    return { kind: 'literal', text: s }
  })
}

/**
 * Whether every path `later` matches is matched by `earlier` too (so `earlier` takes them
 * all). Only says true when sure: a pattern with regex or optional parameters is never taken
 * for covered.
 */
export function pathCovers(earlier: string, later: string): boolean {
  const a = segments(earlier)
  const b = segments(later)
  for (let i = 0; i < a.length; i++) {
    const s = a[i]
    // a trailing "*" matches the rest, none included ("/a/*" matches "/a")
    if (s.kind === 'wildcard' && i === a.length - 1) return true
    const t = b[i]
    if (!t || s.kind === 'wildcard' || s.kind === 'other' || t.kind === 'wildcard' || t.kind === 'other') return false
    if (s.kind === 'literal' && (t.kind !== 'literal' || t.text !== s.text)) return false
  }
  return a.length === b.length
}

const methodsText = (m: readonly string[] | undefined) => (m ? m.join(', ') : 'every method')

/** A route's name in a message; its place when the name itself did not validate. */
const nameOf = (r: { name?: string | null }, i: number) => (typeof r.name === 'string' ? r.name : `routes[${i}]`)

/** `listen` and `admin.listen` on one address (or one port, one of them on every interface). */
export function listenersClash(listen: string, admin: string): boolean {
  const p = hostPort(listen)
  const q = hostPort(admin)
  if (p.port !== q.port || p.port === 0) return false
  return p.host === q.host || isWildcard(p.host) || isWildcard(q.host)
}

/** A route as far as it validated (`Parts`); a fully valid route is one too. */
export type RouteParts = Parts<RouteConfig>

/** `match.methods`: the list, undefined for every method, null when it did not validate. */
const methodsOf = (r: RouteParts): readonly string[] | undefined | null => (r.match ? r.match.methods : null)

/** The checks of one route on its own (templates, timings, upstream URL, methods). */
export function routeFindings(r: RouteParts, i: number): Finding[] {
  const out: Finding[] = []
  const at = (...p: PropertyKey[]) => ['routes', i, ...p]
  const params = typeof r.match?.path === 'string' ? pathParams(r.match.path) : undefined
  const template = (text: string | null | undefined, ...p: PropertyKey[]) => {
    if (typeof text !== 'string' || !params) return
    try { compileTemplate(text, params) } catch (e) { out.push({ path: at(...p), message: (e as Error).message }) }
  }
  const methods = methodsOf(r)
  if (r.fencing) template(r.fencing.resource, 'fencing', 'resource')
  if (r.idempotency) {
    const { lease, ttl } = r.idempotency
    const timeout = r.upstream?.timeout
    // a request still in flight past its lease is taken for crashed: its result would be lost
    if (typeof lease === 'number' && typeof timeout === 'number' && lease < timeout) {
      out.push({ path: at('idempotency', 'lease'), message: `lease (${lease} ms) must be at least upstream.timeout (${timeout} ms): a request still waiting for the upstream would be taken for crashed and its response lost` })
    }
    // an in-flight record that expires frees the key while the first request is still upstream
    if (typeof ttl === 'number' && typeof lease === 'number' && ttl < lease) {
      out.push({ path: at('idempotency', 'ttl'), message: `ttl (${ttl} ms) must be at least lease (${lease} ms): the key would be forgotten while its first request is still in flight` })
    }
    template(r.idempotency.scope, 'idempotency', 'scope')
    if (r.idempotency.settle) out.push(...settleFindings(r.idempotency.settle, params, at))
    const keyed = r.idempotency.methods
    if (keyed && methods !== null) {
      const admitted = routedMethods(methods)
      if (!keyed.some((m) => admitted.has(m))) {
        out.push({ path: at('idempotency', 'methods'), message: `none of ${keyed.join(', ')} is in match.methods (${methodsText(methods)}), so this route never uses an idempotency key: list the route's write methods here, or add them to match.methods` })
      }
    }
  }
  if (methods && routedMethods(methods).size === 0) {
    out.push({ path: at('match', 'methods'), message: 'HEAD alone never matches: HEAD requests are routed as GET (to routes listing GET). List GET too, or both' })
  }
  out.push(...upstreamUrlFindings(r.upstream?.url, i))
  return out
}

/**
 * `idempotency.settle` (contract §4a): the probe's templates name only what the request has, its
 * headers are ones the gateway does not set itself.
 */
function settleFindings(s: NonNullable<RouteParts['idempotency']>['settle'] & object, params: string[] | undefined, at: (...p: PropertyKey[]) => PropertyKey[]): Finding[] {
  const out: Finding[] = []
  const probe = s.probe
  if (probe && params) {
    const check = (text: unknown, inPath: boolean, ...p: PropertyKey[]) => {
      if (typeof text !== 'string') return
      try { compileProbeTemplate(text, params, inPath) } catch (e) { out.push({ path: at('idempotency', 'settle', 'probe', ...p), message: (e as Error).message }) }
    }
    check(probe.path, true, 'path')
    for (const [name, text] of Object.entries(probe.headers ?? {})) {
      if (HOP_BY_HOP.has(name.toLowerCase()) || name.toLowerCase() === 'host') out.push({ path: at('idempotency', 'settle', 'probe', 'headers', name), message: `${name} is set by the gateway on every upstream request (hop-by-hop or Host): a probe cannot carry its own` })
      else check(text, false, 'headers', name)
    }
  }
  return out
}

/**
 * `routes[i].upstream.url` holds an origin only: the request's path and query go to it
 * unchanged, so a path (or query, or credentials) there would be silently dropped. Refused
 * rather than taken for a prefix, so the path the client sends is the path the upstream sees
 * (and the path fencing's template reads).
 */
export function upstreamUrlFindings(url: unknown, i: number): Finding[] {
  if (typeof url !== 'string') return []
  let u: URL
  try { u = new URL(url) } catch { return [] /* not a URL: the schema says so */ }
  const out: Finding[] = []
  const path = ['routes', i, 'upstream', 'url']
  const extra = `${u.pathname === '/' ? '' : u.pathname}${u.search}${u.hash}`
  if (extra) {
    out.push({ path, message: `has a path or query (${JSON.stringify(extra)}): fencegate forwards each request's own path and query to the upstream's origin unchanged, so ${JSON.stringify(extra)} would be silently dropped, not prefixed. Write the origin only (${u.origin}), and put the prefix in the clients' paths and in match.path` })
  }
  if (u.username || u.password) out.push({ path, message: 'holds a user name or password: they are not sent upstream; give credentials in a header the client sends' })
  return out
}

/**
 * Checks across routes (names, shadowing) and across sections (listeners, store URL), on the
 * parts that validated: `routes` holds each route, as far as it validated, with its index in the
 * file; a section that did not validate is null or left out.
 */
export function crossFindings(parts: { listen?: string | null; adminListen?: string | null; store?: Parts<Config['store']> | null; routes: [number, RouteParts][] }): Finding[] {
  const out: Finding[] = []
  const seen = new Map<string, number>()
  for (const [i, r] of parts.routes) {
    if (typeof r.name === 'string') {
      if (seen.has(r.name)) out.push({ path: ['routes', i, 'name'], message: `route name "${r.name}" is already used by routes[${seen.get(r.name)}]` })
      else seen.set(r.name, i)
    }
    out.push(...routeFindings(r, i))
  }
  // first match wins: a route whose every request an earlier route takes never runs (a "/*"
  // before a fenced route silently turns its fencing off); only routes whose path and methods
  // validated take part
  const matching = parts.routes.filter(([, r]) => typeof r.match?.path === 'string' && methodsOf(r) !== null) as [number, RouteParts & { match: { path: string; methods?: string[] } }][]
  for (const [j, later] of matching) {
    const laterMethods = routedMethods(later.match.methods)
    if (!laterMethods.size) continue
    for (const [i, earlier] of matching) {
      if (i >= j) break
      const earlierMethods = routedMethods(earlier.match.methods)
      if (![...laterMethods].every((m) => earlierMethods.has(m)) || !pathCovers(earlier.match.path, later.match.path)) continue
      const lost = [later.fencing && 'fencing', later.idempotency && 'idempotency'].filter(Boolean)
      out.push({
        path: ['routes', j, 'match', 'path'],
        message: `route ${nameOf(later, j)} never matches: routes[${i}] (${nameOf(earlier, i)}: ${earlier.match.path}, ${methodsText(earlier.match.methods)}) comes first and takes every request it would get${lost.length ? `, so its ${lost.join(' and ')} never applies` : ''}. Routes are tried in order: move it above routes[${i}], or narrow routes[${i}]`,
      })
      break
    }
  }
  if (parts.listen && parts.adminListen && listenersClash(parts.listen, parts.adminListen)) {
    out.push({ path: ['admin', 'listen'], message: `${parts.adminListen} is taken by listen (${parts.listen}): the proxy and the admin listener each need their own port` })
  }
  const store = parts.store
  // a url that did not validate is reported as such, not as missing
  if (store && store.url !== null) {
    // null: given but not valid, reported on its own path
    const sentinels = store.kind === 'redis' && store.sentinels !== undefined
    if (sentinels && !store.url) {
      // the Sentinels say where the primary is; a url would only add credentials
    } else if ((store.kind === 'redis' || store.kind === 'postgres') && !store.url) {
      out.push({ path: ['store', 'url'], message: `store.kind ${store.kind} needs store.url` })
    } else if (store.kind === 'redis' && !/^rediss?:\/\/./.test(store.url!)) {
      out.push({ path: ['store', 'url'], message: 'store.kind redis needs a redis:// or rediss:// URL' })
    } else if (store.kind === 'postgres' && !/^postgres(ql)?:\/\/./.test(store.url!)) {
      out.push({ path: ['store', 'url'], message: 'store.kind postgres needs a postgres:// or postgresql:// URL' })
    }
  }
  return out
}

/**
 * Contract §3a: the lease path is checked before the routes, so a route every request of which is
 * under `leases.path` never runs.
 */
export function leasePathFindings(config: Pick<Config, 'leases' | 'routes'>): Finding[] {
  const path = config.leases?.path
  if (path === undefined) return []
  return config.routes.flatMap((r, i) => pathCovers(`${path}/*`, r.match.path)
    ? [{ path: ['routes', i, 'match', 'path'], message: `route ${r.name} never matches: every request to ${r.match.path} is a call of the lease service (leases.path ${path}), which is checked before the routes. Move the route, or set leases.path elsewhere` }]
    : [])
}
