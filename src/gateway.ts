/**
 * Builds the gateway's Hono app. Every request passes `observe` (its facts, measured and
 * recorded once; a path with a dot segment refused there); each route of the config then becomes one handler in the
 * contract's order — admission (fencing, then idempotency: one store call) → send → record →
 * respond (./request-path.ts) — registered in config order, so the first matching route wins.
 */
import { Hono, type MiddlewareHandler } from 'hono'
import { RESPONSE_ALREADY_SENT } from '@hono/node-server/utils/response'
import { context as otelContext } from '@opentelemetry/api'
import type { Pool } from 'undici'
import type { Config } from './config/schema.js'
import type { GatewayEnv } from './context.js'
import { newFacts, type RequestFacts } from './facts.js'
import { compileRoute } from './route.js'
import { Problem, stateLost, storeUnavailable } from './problems.js'
import { dotSegmentPath, gatewayError, saneRequestId } from './front-door.js'
import { StoreWentBack } from './store/sequence.js'
import { StoreError, type Store } from './store/types.js'
import type { StateWatch } from './store/state-loss.js'
import type { Metrics } from './telemetry/metrics.js'
import { startServerSpan, traceFields } from './telemetry/tracing.js'
import type { Fields, Logger } from './log.js'
import { WindowTracker } from './fencing/index.js'
import { createUpstream } from './forward/send.js'
import { routeHandler } from './request-path.js'
import type { AuditQueue } from './audit/queue.js'
import type { AuditEntry } from './store/attempt-log/types.js'
import { attemptEntry } from './audit/entry.js'
import { timelineLink } from './ui/links.js'
import { newId } from './ids.js'

export interface Gateway {
  app: Hono<GatewayEnv>
  pools: Pool[]
}

/**
 * Opens every request: its facts (request id first), its SERVER span when tracing is on; and
 * closes it: the one place its outcome is measured (contract §6), its span annotated (§7), its
 * attempt entry queued (§8) and its access line written. It decides nothing.
 */
function observe(metrics: Metrics, log: Logger, logConfig: Config['log'], audit?: AuditQueue, publicUrl?: string): MiddlewareHandler<GatewayEnv> {
  const idHeader = logConfig.requestIdHeader.toLowerCase()
  const access = logConfig.access
  return async function observe(c, next) {
    const started = performance.now()
    const incoming = c.env.incoming
    const f = newFacts(saneRequestId(incoming.headers[idHeader]) ?? newId(), incoming.method ?? 'GET')
    c.set('facts', f)
    const span = startServerSpan(incoming)
    // a path with a dot segment is refused before routing (400 bad-path), counted like any request
    const badPath = dotSegmentPath(incoming.url ?? '/')
    if (badPath) {
      f.outcome = badPath.outcome
      c.res = badPath.toResponse(f.requestId, idHeader)
    } else if (span) await otelContext.with(span.ctx, next)
    else await next()
    const code = f.code ?? (c.res === RESPONSE_ALREADY_SENT || c.res.headers.has('x-hono-already-sent') ? c.env.outgoing.statusCode : c.res.status)
    const ms = performance.now() - started
    const record = () => {
      metrics.recordRequest(f.route ?? 'none', f.method, String(code), f.outcome ?? 'forwarded', ms / 1000)
      span?.end(f, code)
    }
    // inside the span's context: the duration's exemplar points at it
    if (span) otelContext.with(span.ctx, record)
    else record()
    // only a route with checks (or attemptLog: true) writes to the store: a plain route's request has no claim to audit
    const audited = audit !== undefined && c.get('route')?.audited === true
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
function accessFields(e: AuditEntry, incoming: GatewayEnv['Bindings']['incoming'], publicUrl?: string): Fields {
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

export function createGateway(config: Config, store: Store, metrics: Metrics, log: Logger, audit?: AuditQueue, watch?: StateWatch): Gateway {
  const app = new Hono<GatewayEnv>()
  const pools: Pool[] = []
  const windows = new WindowTracker() // per process: fencing's requests between check and end, by resource
  metrics.trackWindows(windows)
  const idHeader = config.log.requestIdHeader.toLowerCase()
  /** A refusal's response; with admin.publicUrl, the audit view's timeline of its key or resource, where operators can reach it. */
  const refuse = (f: RequestFacts, p: Problem): Response => {
    f.outcome = p.outcome
    const timeline = config.admin.publicUrl && timelineLink({ outcome: f.outcome, keyHash: f.keyHash, resource: f.resource }, config.admin.publicUrl)
    return p.toResponse(f.requestId, idHeader, timeline ? { timeline } : undefined)
  }
  app.use('*', observe(metrics, log, config.log, audit, config.admin.publicUrl))
  for (const rc of config.routes) {
    const route = compileRoute(rc, config.log.requestIdHeader)
    metrics.initRoute(rc, store.kind) // every series of the route at 0, so increase() sees the first event
    const pool = createUpstream(route)
    pools.push(pool)
    const handle = routeHandler(route, { store, metrics, log, windows, pool, traceFields: traceFields(), watch, refuse })
    if (rc.match.methods) app.on(rc.match.methods, rc.match.path, handle)
    else app.all(rc.match.path, handle)
  }
  app.notFound((c) => {
    const f = c.get('facts')
    f.outcome = 'no_route'
    return new Problem('no-route', 'No route of this gateway matches the request\'s method and path.').toResponse(f.requestId, idHeader)
  })
  app.onError((err, c) => {
    const f = c.get('facts')
    if (err instanceof Problem || err instanceof StoreError) {
      // the store cannot answer: fail closed (contract §4), one mapping for every store call
      return refuse(f, err instanceof Problem ? err : err instanceof StoreWentBack ? stateLost() : storeUnavailable(err))
    }
    if (c.env.incoming.errored || c.env.incoming.destroyed && !c.env.incoming.complete) {
      // the client left before its request was whole: nothing was forwarded, nobody to answer
      f.outcome = 'bad_request'
      f.code = 499
      c.env.outgoing.destroy()
      return RESPONSE_ALREADY_SENT
    }
    // a bug on the request path: the gateway's fault, said as such (never blamed on the upstream)
    log.error('unexpected error on the request path', { route: f.route, requestId: f.requestId, error: err.message })
    const p = gatewayError()
    f.outcome = p.outcome
    if (c.env.outgoing.headersSent) { c.env.outgoing.destroy(); return RESPONSE_ALREADY_SENT }
    return p.toResponse(f.requestId, idHeader)
  })
  return { app, pools }
}
