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
import type { Logger } from './log.js'
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
function observe(metrics: Metrics, audit?: AuditQueue): MiddlewareHandler<GatewayEnv> {
  return async function observe(c, next) {
    const started = performance.now()
    const annotate = serverSpan(c)
    const traceId = annotate && activeTraceId()
    const path = c.env.incoming.url ?? '/'
    const q = path.indexOf('?')
    if (DOT_SEGMENT.test(q < 0 ? path : path.slice(0, q))) {
      const p = new Problem('bad-path', 'The path contains a "." or ".." segment (raw or percent-encoded); the gateway does not forward such paths.')
      c.set('outcome', p.outcome)
      c.res = p.toResponse()
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
    audit?.push(attemptEntry(c, outcome, code, ms, traceId))
  }
}

export function createGateway(config: Config, store: Store, metrics: Metrics, log: Logger, audit?: AuditQueue, watch?: StateWatch): Gateway {
  const app = new Hono<GatewayEnv>()
  const pools: Pool[] = []
  const inFlight = new InFlight() // per process: fencing's requests in flight, by resource
  metrics.trackInFlight(inFlight)
  app.use('*', observe(metrics, audit))
  for (const rc of config.routes) {
    const route = compileRoute(rc)
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
    return new Problem('no-route', 'No route of this gateway matches the request\'s method and path.').toResponse()
  })
  app.onError((err, c) => {
    if (err instanceof Problem) {
      c.set('outcome', err.outcome)
      return err.toResponse()
    }
    if (c.env.incoming.errored || c.env.incoming.destroyed && !c.env.incoming.complete) {
      // the client left before its request was whole: nothing was forwarded, nobody to answer
      c.set('outcome', 'bad_request')
      c.set('code', 499)
      c.env.outgoing.destroy()
      return RESPONSE_ALREADY_SENT
    }
    log.error('unexpected error on the request path', { route: c.get('route')?.name, error: err.message })
    c.set('outcome', 'upstream_error')
    if (c.env.outgoing.headersSent) { c.env.outgoing.destroy(); return RESPONSE_ALREADY_SENT }
    return new Problem('upstream-unavailable', 'The gateway failed to handle the request.').toResponse()
  })
  return { app, pools }
}
