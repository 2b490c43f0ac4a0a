/**
 * Admin `GET /routes`: each route's match and its fencing and idempotency settings, for the
 * audit view's Routes (beside the claims of `GET /audit`). Upstream addresses and the scope
 * template's header names are left out: the view needs what is checked, not where it goes.
 */
import type { Config } from '../config/schema.js'

export interface RouteSummary {
  name: string
  path: string
  methods?: string[]
  fencing?: { resource: string; tokenHeader: string; required: boolean; serialize: string }
  /** durations in ms */
  idempotency?: { keyHeader: string; required: boolean; methods: string[]; scoped: boolean; ttlMs: number; leaseMs: number; inFlight: string; unknownOutcome: string }
}

/** The routes in config order, with `admin.grafanaUrl` when set. */
export function routeSummaries(config: Config): { routes: RouteSummary[]; grafanaUrl?: string } {
  const routes = config.routes.map((r): RouteSummary => {
    const s: RouteSummary = { name: r.name, path: r.match.path }
    if (r.match.methods) s.methods = r.match.methods
    if (r.fencing) s.fencing = { resource: r.fencing.resource, tokenHeader: r.fencing.tokenHeader, required: r.fencing.required, serialize: String(r.fencing.serialize) }
    const i = r.idempotency
    if (i) s.idempotency = { keyHeader: i.keyHeader, required: i.required, methods: i.methods, scoped: i.scope !== '', ttlMs: i.ttl, leaseMs: i.lease, inFlight: i.inFlight, unknownOutcome: i.unknownOutcome }
    return s
  })
  return config.admin.grafanaUrl ? { routes, grafanaUrl: config.admin.grafanaUrl } : { routes }
}
