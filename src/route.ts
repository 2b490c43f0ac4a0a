/**
 * A route from the config, compiled once at start-up: templates become functions, durations
 * are numbers, header names are lower-cased.
 */
import type { RouteConfig } from './config/schema.js'
import { compileTemplate, pathParams, type Template } from './config/template.js'

export interface CompiledRoute {
  name: string
  config: RouteConfig
  /** the request id header, lower case (`log.requestIdHeader`): forwarded upstream and echoed */
  requestIdHeader: string
  /** its requests go to the attempt log: fencing or idempotency is on, or `attemptLog: true` */
  audited: boolean
  fencing?: { resource: Template; tokenHeader: string; required: boolean }
  idempotency?: {
    keyHeader: string
    required: boolean
    methods: ReadonlySet<string>
    scope: Template
    /** true when the scope is the empty template: every request of the route shares one scope */
    scopeIsRoute: boolean
    /** `idempotency.releaseStatuses`: upstream statuses that release the claim instead of being stored */
    releaseStatuses: ReadonlySet<number>
  } & Omit<NonNullable<RouteConfig['idempotency']>, 'keyHeader' | 'required' | 'methods' | 'scope' | 'releaseStatuses'>
}

/** @param requestIdHeader `log.requestIdHeader` */
export function compileRoute(r: RouteConfig, requestIdHeader = 'X-Request-Id'): CompiledRoute {
  const params = pathParams(r.match.path)
  const out: CompiledRoute = { name: r.name, config: r, requestIdHeader: requestIdHeader.toLowerCase(), audited: !!(r.fencing || r.idempotency || r.attemptLog) }
  if (r.fencing) {
    out.fencing = { resource: compileTemplate(r.fencing.resource, params), tokenHeader: r.fencing.tokenHeader.toLowerCase(), required: r.fencing.required }
  }
  if (r.idempotency) {
    const { keyHeader, required, methods, scope, releaseStatuses, ...rest } = r.idempotency
    out.idempotency = {
      ...rest,
      releaseStatuses: new Set(releaseStatuses),
      keyHeader: keyHeader.toLowerCase(),
      required,
      methods: new Set(methods),
      scope: compileTemplate(scope, params),
      scopeIsRoute: scope === '',
    }
  }
  return out
}
