/**
 * Builds the gateway's Hono app. Each route of the config becomes one handler chain in the
 * contract's order — route → fencing → idempotency → forward — registered in config order, so
 * the first matching route wins.
 */
import { Hono, type MiddlewareHandler } from 'hono'
import { RESPONSE_ALREADY_SENT } from '@hono/node-server/utils/response'
import type { Pool } from 'undici'
import type { Config } from './config/schema.js'
import type { GatewayEnv } from './context.js'
import { compileRoute, type CompiledRoute } from './route.js'
import { Problem } from './problems.js'
import { tooLarge } from './body.js'
import type { Store } from './store/types.js'
import type { StateWatch } from './store/state.js'
import type { Metrics } from './telemetry/metrics.js'
import { serverSpan } from './telemetry/tracing.js'
import type { Fields, Logger } from './log.js'
import { randomUUID } from 'node:crypto'
import type { AuditEntry } from './audit/types.js'
import { fencing, InFlight } from './fencing/index.js'
import { idempotency } from './idempotency/index.js'
import { forward, createUpstream } from './forward/index.js'
import type { AuditQueue } from './audit/queue.js'
import { activeTraceId, attemptEntry } from './audit/entry.js'

// A dot segment, raw or percent-encoded, between separators raw or encoded (%2F, %5C, \):
// resolving it after routing could reach another route's path or resource (an upstream that
// decodes %2F and normalises), and resolving it before would forward a path the client did
// not send. Refused instead.
const DOT_SEGMENT = /(?:^|\/|%2f|%5c|\\)(?:\.|%2e){1,2}(?:\/|%2f|%5c|\\|$)/i

export interface Gateway {
  app: Hono<GatewayEnv>
  pools: Pool[]
}

/**
 * Sets the route for the chain. Refuses, before any check can change state (a fencing
 * high-water mark raised for a request that then cannot be sent): a declared body larger than
 * the route accepts, and — with the store's state lost — every fenced or idempotent request.
 */
function routeEntry(route: CompiledRoute, watch?: StateWatch): MiddlewareHandler<GatewayEnv> {
  const guarded = !!(route.fencing || route.idempotency)
  const maxBody = route.config.maxRequestBytes
  return async function routeEntry(c, next) {
    c.set('route', route)
    const declared = c.env.incoming.headers['content-length']
    if (declared !== undefined && Number(declared) > maxBody) throw tooLarge(maxBody)
    if (guarded && watch?.lost) {
      throw new Problem('store-state-lost', 'The store has lost its state (high-water marks and idempotency records may be gone), so this request cannot be checked; nothing was forwarded. An operator must run `fencegate store accept-loss`.', {}, { 'retry-after': '5' })
    }
    await next()
  }
}

/**
 * Measures every request and records its outcome (contract §6); with tracing on, names the
 * request's SERVER span and gives it the `fencegate.*` attributes from `c.var` (contract §7);
 * queues the request's attempt log entry (contract §8): the one place every decision is written.
 */
function observe(metrics: Metrics, log: Logger, logConfig: Config['log'], audit?: AuditQueue): MiddlewareHandler<GatewayEnv> {
  const idHeader = logConfig.requestIdHeader.toLowerCase()
  const access = logConfig.access
  return async function observe(c, next) {
    const started = performance.now()
    const incoming = c.env.incoming
    const requestId = saneRequestId(incoming.headers[idHeader]) ?? randomUUID()
    c.set('requestId', requestId)
    const annotate = serverSpan(c)
    const traceId = annotate && activeTraceId()
    const path = incoming.url ?? '/'
    const q = path.indexOf('?')
    if (DOT_SEGMENT.test(q < 0 ? path : path.slice(0, q))) {
      const p = new Problem('bad-path', 'The path contains a "." or ".." segment (raw or percent-encoded); the gateway does not forward such paths.')
      c.set('outcome', p.outcome)
      c.res = p.toResponse(requestId, idHeader)
    } else {
      await next()
    }
    const route = c.get('route')?.name ?? 'none'
    const outcome = c.get('outcome') ?? 'forwarded'
    const code = c.get('code') ?? (c.res === RESPONSE_ALREADY_SENT || c.res.headers.has('x-hono-already-sent') ? c.env.outgoing.statusCode : c.res.status)
    metrics.requests.inc({ route, method: c.env.incoming.method ?? 'GET', code: String(code), outcome })
    annotate?.(outcome)
    const ms = performance.now() - started
    metrics.requestDuration.observe({ route, outcome }, ms / 1000)
    const entry = attemptEntry(c, outcome, code, ms, traceId)
    audit?.push(entry)
    if (access === 'all' || (access === 'decisions' && isDecision(entry))) log.access(accessFields(entry, q < 0 ? path : path.slice(0, q), incoming.socket?.remoteAddress))
  }
}

/**
 * A client's request id is used when it is 1–200 of `A-Z a-z 0-9 - _ . : / + =` (a UUID, a
 * ULID, a trace-like id); anything else is replaced, never echoed into logs or upstream.
 */
const REQUEST_ID = /^[A-Za-z0-9\-_.:/+=]{1,200}$/
function saneRequestId(v: string | string[] | undefined): string | undefined {
  return typeof v === 'string' && REQUEST_ID.test(v) ? v : undefined
}

/** `log.access: decisions`: a request refused, replayed, or not completed, or a possible duplicate effect. */
const isDecision = (e: AuditEntry): boolean =>
  e.outcome !== 'forwarded' || e.unknown !== undefined || !!e.duplicate || !!e.overtaken || !!e.abandoned

/** The access log line of a request: its attempt entry's facts, the path without its query, the peer. */
function accessFields(e: AuditEntry, path: string, client: string | undefined): Fields {
  return {
    requestId: e.requestId, traceId: e.traceId, route: e.route, method: e.method, path, status: e.status,
    outcome: e.outcome, durationMs: e.durationMs, resource: e.resource, token: e.token, keyHash: e.keyHash,
    result: e.result, unknown: e.unknown, upstreamStatus: e.upstreamStatus,
    duplicate: e.duplicate, overtaken: e.overtaken, abandoned: e.abandoned,
    client: client?.startsWith('::ffff:') ? client.slice(7) : client,
  }
}

export function createGateway(config: Config, store: Store, metrics: Metrics, log: Logger, audit?: AuditQueue, watch?: StateWatch): Gateway {
  const app = new Hono<GatewayEnv>()
  const pools: Pool[] = []
  const inFlight = new InFlight() // per process: fencing's requests in flight, by resource
  metrics.trackInFlight(inFlight)
  const idHeader = config.log.requestIdHeader.toLowerCase()
  app.use('*', observe(metrics, log, config.log, audit))
  for (const rc of config.routes) {
    const route = compileRoute(rc, config.log.requestIdHeader)
    metrics.initRoute(rc, store.kind) // every series of the route at 0, so increase() sees the first event
    const pool = createUpstream(route)
    pools.push(pool)
    const chain = [
      routeEntry(route, watch),
      fencing(route, store, metrics, log, inFlight),
      idempotency(route, store, metrics, log),
      forward(route, pool, metrics),
    ] as const
    if (rc.match.methods) app.on(rc.match.methods, rc.match.path, ...chain)
    else app.all(rc.match.path, ...chain)
  }
  app.notFound((c) => {
    c.set('outcome', 'no_route')
    return new Problem('no-route', 'No route of this gateway matches the request\'s method and path.').toResponse(c.get('requestId'), idHeader)
  })
  app.onError((err, c) => {
    if (err instanceof Problem) {
      c.set('outcome', err.outcome)
      return err.toResponse(c.get('requestId'), idHeader)
    }
    if (c.env.incoming.errored || c.env.incoming.destroyed && !c.env.incoming.complete) {
      // the client left before its request was whole: nothing was forwarded, nobody to answer
      c.set('outcome', 'bad_request')
      c.set('code', 499)
      c.env.outgoing.destroy()
      return RESPONSE_ALREADY_SENT
    }
    log.error('unexpected error on the request path', { route: c.get('route')?.name, requestId: c.get('requestId'), error: err.message })
    c.set('outcome', 'upstream_error')
    if (c.env.outgoing.headersSent) { c.env.outgoing.destroy(); return RESPONSE_ALREADY_SENT }
    return new Problem('upstream-unavailable', 'The gateway failed to handle the request.').toResponse(c.get('requestId'), idHeader)
  })
  return { app, pools }
}
