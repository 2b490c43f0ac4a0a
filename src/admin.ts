/**
 * The admin listener (contract §5a): `/healthz` and `/readyz` answer without a token (probes);
 * everything else needs `Authorization: Bearer <admin.token>` when one is configured.
 */
import { Hono } from 'hono'
import { bearerAuth } from 'hono/bearer-auth'
import { HTTPException } from 'hono/http-exception'
import type { Store } from './store/types.js'
import type { Metrics } from './telemetry/metrics.js'
import { Problem } from './problems.js'
import type { Config } from './config/schema.js'
import { buildReport, parseSince, DEFAULT_SINCE } from './audit/report.js'
import { resolveKey, type ResolveRequest } from './audit/resolve.js'
import { listUnknown } from './audit/unknown.js'
import { buildTimeline } from './audit/timeline.js'
import { storeProblem } from './store/problem.js'
import type { StateWatch } from './store/state.js'

export interface AdminOptions {
  token?: string
  store: Store
  metrics: Metrics
  /** false once shutdown began: /readyz turns 503 so load balancers stop sending */
  accepting: () => boolean
  /** the routes and store config behind `GET /audit` and `POST /resolve` */
  config?: Config
  /** checked on every /readyz: a store that lost its state is not ready (contract §3) */
  watch?: StateWatch
}

export function createAdmin({ token, store, metrics, accepting, config, watch }: AdminOptions): Hono {
  const app = new Hono()
  app.get('/healthz', (c) => c.json({ status: 'ok' }))
  app.get('/readyz', async (c) => {
    if (!accepting()) return c.json({ status: 'shutting down' }, 503)
    try {
      await store.ping()
      metrics.storeUp.set({ store: store.kind }, 1)
      await watch?.check()
      if (watch?.lost) {
        return c.json({ status: 'store state lost', store: store.kind, detail: 'the store\'s epoch marker changed or is missing; run `fencegate store accept-loss` once the loss is understood' }, 503)
      }
      return c.json({ status: 'ready', store: store.kind })
    } catch (e) {
      metrics.storeUp.set({ store: store.kind }, 0)
      return c.json({ status: 'store unavailable', store: store.kind, detail: (e as Error).message }, 503)
    }
  })
  if (token) app.use('*', bearerAuth({ token }))
  // bearerAuth throws; answer as every gateway-made response does, keeping its WWW-Authenticate
  app.onError((err) => {
    if (err instanceof Problem) return err.toResponse()
    const unavailable = storeProblem(err)
    if (unavailable instanceof Problem) return unavailable.toResponse()
    if (!(err instanceof HTTPException)) throw err
    const challenge = err.getResponse().headers.get('www-authenticate') ?? 'Bearer'
    return new Problem('unauthorized', 'Admin endpoints other than /healthz and /readyz need "Authorization: Bearer <admin.token>".', {}, { 'www-authenticate': challenge }).toResponse()
  })
  app.get('/metrics', async (c) => {
    const { body, contentType } = await metrics.expose(c.req.header('accept'))
    return c.body(body, 200, { 'content-type': contentType })
  })
  if (config) {
    // contract §8: the attempt log's counts per route with each route's claim
    app.get('/audit', async (c) => {
      const now = Date.now()
      const sinceText = c.req.query('since') ?? DEFAULT_SINCE
      const since = parseSince(sinceText, now)
      if (since === undefined) throw new Problem('bad-request', `since must be a duration back from now (30m, 1h, 7d) or an RFC 3339 time, not ${JSON.stringify(sinceText)}.`)
      const route = c.req.query('route')
      if (route !== undefined && !config.routes.some((r) => r.name === route)) {
        throw new Problem('bad-request', `No route named ${JSON.stringify(route)} in the config (routes: ${config.routes.map((r) => r.name).join(', ')}).`)
      }
      return c.json(await buildReport(config, store.audit, since, now, route))
    })
    // contract §8: one key's or resource's attempts, oldest first
    app.get('/audit/timeline', async (c) => {
      const now = Date.now()
      const sinceText = c.req.query('since')
      const since = sinceText === undefined ? now - config.audit.retention : parseSince(sinceText, now)
      if (since === undefined) throw new Problem('bad-request', `since must be a duration back from now (30m, 1h, 7d) or an RFC 3339 time, not ${JSON.stringify(sinceText)}.`)
      return c.json(await buildTimeline(config, store.audit, { route: c.req.query('route'), keyHash: c.req.query('keyHash'), key: c.req.query('key'), scope: c.req.query('scope'), resource: c.req.query('resource'), since }))
    })
    // contract §8: the records now in the unknown state, to be settled with POST /resolve {keyHash}
    app.get('/unknown', async (c) => {
      const route = c.req.query('route')
      if (route !== undefined && !config.routes.some((r) => r.name === route)) {
        throw new Problem('bad-request', `No route named ${JSON.stringify(route)} in the config (routes: ${config.routes.map((r) => r.name).join(', ')}).`)
      }
      return c.json(await listUnknown(config, store, Date.now(), route))
    })
    // issue 5 §2: an operator settles an unknown outcome; body {route, key, scope?, as} or {route, keyHash, as}
    app.post('/resolve', async (c) => {
      let body: Partial<ResolveRequest>
      try {
        body = await c.req.json()
      } catch {
        throw new Problem('bad-request', 'The body must be JSON: {"route": "...", "key": "...", "scope": "..." (when the route has one), "as": "completed" | "failed"}.')
      }
      if (typeof body !== 'object' || body === null) throw new Problem('bad-request', 'The body must be a JSON object: {"route", "key", "scope" (when the route has one), "as": "completed" | "failed"}.')
      return c.json(await resolveKey(config, store, body as ResolveRequest))
    })
  }
  app.notFound(() => new Problem('no-route', `No admin endpoint here: /metrics, /healthz, /readyz${config ? ', /audit, /audit/timeline, /unknown, /resolve' : ''}.`).toResponse())
  return app
}
