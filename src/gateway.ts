/**
 * The proxy listener's request handling. Every request passes `observe` (its facts, measured and
 * recorded once; a path with a dot segment refused there); the route table (./routing.ts, Hono's
 * router) picks the first route of the config that takes it; that route's handler runs the
 * contract's order — the route's refusals → admission (fencing, the check-to-apply window,
 * idempotency) → send → record → respond (./request-path.ts) — on Node's request and response
 * (./exchange.ts). Every refusal is written by ./refuse.ts.
 */
import type { IncomingMessage, ServerResponse } from 'node:http'
import { context as otelContext } from '@opentelemetry/api'
import type { Pool } from 'undici'
import type { Config } from './config/schema.js'
import { Exchange } from './exchange.js'
import { newFacts, type RequestFacts } from './facts.js'
import { RouteProber } from './idempotency/settle/prober.js'
import { Settler } from './idempotency/settle/settler.js'
import { compileRoute, type CompiledRoute, type RouteContext } from './route.js'
import { RouteTable } from './routing.js'
import { Problem } from './problems.js'
import { refuse, unanswered, type Refusing } from './refuse.js'
import { saneRequestId } from './front-door.js'
import { StoreError, type AuditEntry, type Store } from './store/index.js'
import type { StateWatch } from './store/index.js'
import type { Metrics } from './telemetry/metrics.js'
import { startServerSpan, traceFields } from './telemetry/tracing.js'
import type { Fields, Logger } from './log.js'
import { WindowTracker } from './fencing/index.js'
import { createUpstream } from './forward/send.js'
import { recordUpstreamExpiry, routesTls, type UpstreamTls } from './tls/upstream.js'
import { routeHandler, type RouteHandler } from './request-path.js'
import type { AuditQueue } from './audit/queue.js'
import { attemptEntry } from './audit/entry.js'
import { timelineLink } from './ui/links.js'
import { newId } from './ids.js'
import { LeaseService } from './leases/service.js'

export interface Gateway {
  /**
   * Handles one request the front door let through (src/server.ts): answers it, or destroys its
   * connection when nobody is left to answer. Never rejects.
   * @param url the absolute URL it is routed on (src/front-door.ts `routingUrl`)
   */
  handle(incoming: IncomingMessage, outgoing: ServerResponse, url: string): Promise<void>
  pools: Pool[]
  /** the background probes of the routes with idempotency.settle (contract §4a): start it, stop it with the generation */
  settler: Settler
}

// A dot segment, raw or percent-encoded, between separators raw or encoded (%2F, %5C, \):
// resolving it after routing could reach another route's path or resource (an upstream that
// decodes %2F and normalises), and resolving it before would forward a path the client did
// not send. Refused instead.
const DOT_SEGMENT = /(?:^|\/|%2f|%5c|\\)(?:\.|%2e){1,2}(?:\/|%2f|%5c|\\|$)/i

/** 400 bad-path for a request target whose path holds a dot segment; undefined for any other. */
export function dotSegmentPath(target: string): Problem | undefined {
  // most paths hold neither a dot nor an escape: no regex, no slice
  if (!target.includes('.') && !target.includes('%') && !target.includes('\\')) return undefined
  const q = target.indexOf('?')
  if (!DOT_SEGMENT.test(q < 0 ? target : target.slice(0, q))) return undefined
  return new Problem('bad-path', 'The path contains a "." or ".." segment (raw or percent-encoded); the gateway does not forward such paths.')
}

/** 500 gateway-error: a bug on the request path, said as such. */
const gatewayError = (): Problem =>
  new Problem('gateway-error', 'The gateway failed to handle the request; nothing of it is known to have reached the upstream unless its outcome says so.')

/** What `observe` reads and writes to: the config's `log` and `admin.publicUrl`, and where it records. */
interface Observing {
  metrics: Metrics
  log: Logger
  logConfig: Config['log']
  /** the attempt log's writer; none: nothing is audited */
  audit?: AuditQueue
  publicUrl?: string
}

/**
 * Opens every request: its facts (request id first), its SERVER span when tracing is on; and
 * closes it: the one place its outcome is measured (contract §6), its span annotated (§7), its
 * attempt entry queued (§8) and its access line written. It decides nothing.
 * @param route routes the request and runs the route's path
 */
function observe({ metrics, log, logConfig, audit, publicUrl }: Observing, route: (x: Exchange, url: string) => Promise<void>): Gateway['handle'] {
  const idHeader = logConfig.requestIdHeader.toLowerCase()
  const plain: Refusing = { idHeader }
  const access = logConfig.access
  return async function observe(incoming, outgoing, url) {
    const started = performance.now()
    const f = newFacts(saneRequestId(incoming.headers[idHeader]) ?? newId(), incoming.method ?? 'GET')
    const x = new Exchange(incoming, outgoing, f)
    const span = startServerSpan(incoming)
    // a path with a dot segment is refused before routing (400 bad-path), counted like any request
    const badPath = dotSegmentPath(incoming.url ?? '/')
    if (badPath) refuse(x, badPath, plain)
    else if (span) await otelContext.with(span.ctx, route, undefined, x, url)
    else await route(x, url)
    const code = f.code ?? outgoing.statusCode
    const ms = performance.now() - started
    const record = () => {
      metrics.recordRequest(f.route ?? 'none', f.method, String(code), f.outcome ?? 'forwarded', ms / 1000)
      span?.end(f, code)
    }
    // inside the span's context: the duration's exemplar points at it
    if (span) otelContext.with(span.ctx, record)
    else record()
    // only a route with checks (or attemptLog: true) writes to the store: a plain route's request has no claim to audit
    const audited = audit !== undefined && x.route?.audited === true
    const logged = access === 'all' || (access === 'decisions' && isDecision(f))
    // most requests of a plain route are neither audited nor logged: no entry is built for them
    if (!audited && !logged) return
    const entry = attemptEntry(f, code, ms, span?.traceId)
    if (audited) audit.push(entry)
    if (logged) log.access(accessFields(entry, incoming, publicUrl))
  }
}

/** `log.access: decisions`: a request refused, replayed, or not completed, or a possible duplicate effect. */
const isDecision = (f: RequestFacts): boolean =>
  (f.outcome ?? 'forwarded') !== 'forwarded' || !!f.unknown || !!f.duplicate || !!f.overtaken || !!f.abandoned

/**
 * The access log line of a request: its attempt entry's facts, the path without its query, the
 * peer, and the audit view's timeline of its key or resource (`view`, after admin.publicUrl).
 */
function accessFields(e: AuditEntry, incoming: IncomingMessage, publicUrl?: string): Fields {
  const url = incoming.url ?? '/'
  const q = url.indexOf('?')
  const client = incoming.socket?.remoteAddress
  return {
    requestId: e.requestId, traceId: e.traceId, route: e.route, method: e.method, path: q < 0 ? url : url.slice(0, q), status: e.status,
    outcome: e.outcome, durationMs: e.durationMs, resource: e.resource, token: e.token, keyHash: e.keyHash,
    result: e.result, unknown: e.unknown, upstreamStatus: e.upstreamStatus, upstreamMs: e.upstreamMs, lateMs: e.lateMs,
    duplicate: e.duplicate, overtaken: e.overtaken, abandoned: e.abandoned,
    client: client?.startsWith('::ffff:') ? client.slice(7) : client,
    view: timelineLink(e, publicUrl),
  }
}

/**
 * The gateway of one config: its routes, their upstream pools, the request handling.
 * @param audit the attempt log's writer; none: nothing is audited
 * @param upstreamTls every route's upstream TLS, read (src/tls/upstream.ts `routesTls`); default read here
 * @throws TlsFilesError when a route's upstream TLS file cannot be used (only when `upstreamTls` is not given)
 */
export function createGateway(config: Config, store: Store, metrics: Metrics, log: Logger, audit?: AuditQueue, watch?: StateWatch, upstreamTls: (UpstreamTls | undefined)[] = routesTls(config)): Gateway {
  const table = new RouteTable<{ route: CompiledRoute; handle: RouteHandler }>()
  const pools: Pool[] = []
  const windows = new WindowTracker() // per process: fencing's requests between check and end, by resource
  metrics.trackWindows(windows)
  const idHeader = config.log.requestIdHeader.toLowerCase()
  /** with admin.publicUrl, a refusal names the audit view's timeline of its key or resource, where operators can reach it */
  const refusing: Refusing = { idHeader, publicUrl: config.admin.publicUrl }
  const plain: Refusing = { idHeader }
  const probers: RouteProber[] = []
  for (const [i, rc] of config.routes.entries()) {
    const route = compileRoute(rc, config.log.requestIdHeader)
    metrics.initRoute(rc, store.kind) // every series of the route at 0, so increase() sees the first event
    const pool = createUpstream(route, upstreamTls[i])
    recordUpstreamExpiry(metrics, rc.name, upstreamTls[i])
    pools.push(pool)
    const prober = rc.idempotency?.settle ? new RouteProber(route, pool, store, metrics, log, audit) : undefined
    if (prober) probers.push(prober)
    const context: RouteContext = { route, store, metrics, log, windows, pool, traceFields: traceFields(), watch, refusing, prober }
    table.add(rc.match.methods, rc.match.path, { route, handle: routeHandler(context) })
  }

  /**
   * What escaped the route's path: a problem or a store error is refused like any other (fail
   * closed, contract §4); a client that left before its request was whole is not answered;
   * anything else is a bug, said as such (never blamed on the upstream).
   */
  const failed = (x: Exchange, err: unknown): void => {
    if (err instanceof Problem || err instanceof StoreError) return refuse(x, err, refusing)
    const { incoming, facts: f } = x
    // nothing was forwarded, nobody to answer
    if (incoming.errored || (incoming.destroyed && !incoming.complete)) return unanswered(x, 'bad_request')
    log.error('unexpected error on the request path', { route: f.route, requestId: f.requestId, error: (err as Error)?.message })
    refuse(x, gatewayError(), plain)
  }

  const route = async (x: Exchange, url: string): Promise<void> => {
    const m = table.match(x.facts.method, url)
    if (m === undefined) return refuse(x, new Problem('no-route', 'No route of this gateway matches the request\'s method and path.'), plain)
    x.route = m.value.route
    x.match = m
    try {
      await m.value.handle(x)
    } catch (err) {
      failed(x, err)
    }
  }

  const observed = observe({ metrics, log, logConfig: config.log, audit, publicUrl: config.admin.publicUrl }, route)
  // contract §3a: the lease service before the routes; without it, not even the prefix compare
  const leases = config.leases ? new LeaseService(config, store, metrics, audit, watch) : undefined
  const observedOrLease: Gateway['handle'] = leases === undefined ? observed : (incoming, outgoing, url) =>
    (incoming.url?.startsWith(leases.prefix) && leases.owns(incoming.url) ? leases.handle(incoming, outgoing) : observed(incoming, outgoing, url))
  const handle: Gateway['handle'] = (incoming, outgoing, url) => observedOrLease(incoming, outgoing, url).catch((err) => {
    // a bug in observing itself: answered if nothing was, never left hanging
    log.error('unexpected error on the request path', { error: (err as Error)?.message })
    refuse({ outgoing, facts: newFacts(newId(), incoming.method ?? 'GET') }, gatewayError(), { idHeader })
  })
  const settler = new Settler(store, probers, new Map(config.routes.map((r) => [r.name, r.idempotency?.ttl ?? 0])), log)
  return { handle, pools, settler }
}
