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

export interface AdminOptions {
  token?: string
  store: Store
  metrics: Metrics
  /** false once shutdown began: /readyz turns 503 so load balancers stop sending */
  accepting: () => boolean
}

export function createAdmin({ token, store, metrics, accepting }: AdminOptions): Hono {
  const app = new Hono()
  app.get('/healthz', (c) => c.json({ status: 'ok' }))
  app.get('/readyz', async (c) => {
    if (!accepting()) return c.json({ status: 'shutting down' }, 503)
    try {
      await store.ping()
      metrics.storeUp.set({ store: store.kind }, 1)
      return c.json({ status: 'ready', store: store.kind })
    } catch (e) {
      metrics.storeUp.set({ store: store.kind }, 0)
      return c.json({ status: 'store unavailable', store: store.kind, detail: (e as Error).message }, 503)
    }
  })
  if (token) app.use('*', bearerAuth({ token }))
  // bearerAuth throws; answer as every gateway-made response does, keeping its WWW-Authenticate
  app.onError((err) => {
    if (!(err instanceof HTTPException)) throw err
    const challenge = err.getResponse().headers.get('www-authenticate') ?? 'Bearer'
    return new Problem('unauthorized', 'Admin endpoints other than /healthz and /readyz need "Authorization: Bearer <admin.token>".', {}, { 'www-authenticate': challenge }).toResponse()
  })
  app.get('/metrics', async (c) => {
    const { body, contentType } = await metrics.expose(c.req.header('accept'))
    return c.body(body, 200, { 'content-type': contentType })
  })
  app.notFound(() => new Problem('no-route', 'No admin endpoint here: /metrics, /healthz, /readyz.').toResponse())
  return app
}
