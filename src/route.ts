/**
 * A route from the config, compiled once at start-up: templates become functions, durations
 * are numbers, header names are lower-cased. And the route's context: the collaborators every
 * step of its path is built from.
 */
import type { Pool } from 'undici'
import type { RouteConfig } from './config/schema.js'
import { compileTemplate, pathParams, type Template } from './config/template.js'
import type { Store } from './store/index.js'
import type { StateWatch } from './store/index.js'
import type { Metrics } from './telemetry/metrics.js'
import type { Logger } from './log.js'
import type { WindowTracker } from './fencing/window-tracker.js'
import type { Refusing } from './refuse.js'
import type { RouteProber } from './idempotency/settle/prober.js'

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

/**
 * One route's collaborators, provisioned once per route by the gateway (./gateway.ts) and handed
 * whole to each step of its path: admission (./admission/), fencing's windows, idempotency's
 * claims, the upstream (./forward/send.ts).
 */
export interface RouteContext {
  readonly route: CompiledRoute
  readonly store: Store
  readonly metrics: Metrics
  readonly log: Logger
  /** this process's fencing windows, shared by every route */
  readonly windows: WindowTracker
  /** the route's upstream connections */
  readonly pool: Pool
  /** the request fields the trace propagator writes (./forward/send.ts) */
  readonly traceFields: readonly string[]
  /** the store's epoch watch: a guarded route refuses while the state is lost */
  readonly watch?: StateWatch
  /** how the route's refusals are written (./refuse.ts) */
  readonly refusing: Refusing
  /** `idempotency.settle`: the route's probes (src/idempotency/settle/), shared with the gateway's settler */
  readonly prober?: RouteProber
}
