/**
 * The admin listener (contract §5a): `/healthz` and `/readyz` answer without a token (probes);
 * everything else needs `Authorization: Bearer <admin.token>` when one is configured. The write
 * actions (`POST /resolve`, `POST /store/accept-loss`) need `admin.writeToken` instead, and
 * answer 403 when none is configured: then the CLI, run where the store is reachable, is the way.
 */
import type { IncomingMessage } from 'node:http'
import { Hono, type MiddlewareHandler } from 'hono'
import { bearerAuth } from 'hono/bearer-auth'
import { HTTPException } from 'hono/http-exception'
import { describeNote, lossFinding, StoreError, type DoctorReport, type StateWatch, type Store } from './store/index.js'
import type { Metrics } from './telemetry/metrics.js'
import { Problem, storeUnavailable } from './problems.js'
import type { Config } from './config/schema.js'
import { buildReport, parseSince, DEFAULT_SINCE } from './audit/report.js'
import { acceptStoreLoss, resolveKey, type ResolveRequest } from './audit/resolve.js'
import { listUnknown } from './audit/unknown.js'
import { buildTimeline, recentKeys, TIMELINE_LIMIT } from './audit/timeline.js'
import { buildLeases } from './audit/leases.js'
import { claimSentences } from './audit/guarantees.js'
import { mountUi, securityHeaders } from './ui/index.js'
import { routeSummaries } from './ui/route-info.js'
import { bearerToken, sameToken } from './bearer.js'
import { recordSettled } from './audit/entry.js'

export interface AdminOptions {
  token?: string
  /** needed by the write actions; default `config.admin.writeToken`; none: they answer 403 */
  writeToken?: string
  store: Store
  metrics: Metrics
  /** false once shutdown began: /readyz turns 503 so load balancers stop sending */
  accepting: () => boolean
  /** the routes and store config behind `GET /audit` and `POST /resolve` */
  config?: Config
  /** checked on every /readyz: a store that lost its state is not ready (contract §3) */
  watch?: StateWatch
  /** the store's real settings (fencegate doctor), for the claims of `GET /audit` */
  storeSettings?: () => Promise<DoctorReport | undefined>
}

/** Whether a listen host is loopback only (127.0.0.0/8, ::1, localhost). */
export function isLoopback(host: string): boolean {
  const h = host.replace(/^\[|\]$/g, '').toLowerCase()
  return h === 'localhost' || h === '::1' || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(h) || /^::ffff:127\./.test(h)
}

/**
 * The start-up warning of an admin listener reachable beyond loopback without `admin.token`
 * (anyone who reaches it reads /metrics, /audit, /unknown), or undefined.
 */
export function exposedAdmin(config: Config): string | undefined {
  const host = config.admin.listen.slice(0, config.admin.listen.lastIndexOf(':'))
  if (config.admin.token || isLoopback(host)) return undefined
  return `the admin listener on ${config.admin.listen} is reachable beyond this host and admin.token is not set: anyone who reaches it can read /metrics, /audit and /unknown. Set admin.token (e.g. token: \${FENCEGATE_ADMIN_TOKEN}), or listen on 127.0.0.1.`
}

/** The report without its `state-loss` finding (read with the settings, possibly a minute ago). */
const withoutLoss = (r: DoctorReport): DoctorReport => ({ ...r, findings: r.findings.filter((f) => f.id !== 'state-loss') })

/** What the watch saw, with the note's who and when when there is one. */
const lossSeen = (watch: StateWatch): string => (watch.note ? describeNote(watch.note) : watch.seen ?? 'epoch marker changed')

/**
 * Guards an admin write action: 403 when `admin.writeToken` is not configured (the CLI is the
 * way), 401 without it (or with a wrong one), 403 with the read token `admin.token`.
 */
function adminWrite(writeToken: string | undefined, readToken: string | undefined): MiddlewareHandler {
  return async function adminWrite(c, next) {
    if (!writeToken) {
      throw new Problem('forbidden', 'Admin write actions are off on this gateway: admin.writeToken is not set. Run the CLI where the store is reachable instead (`fencegate resolve --config PATH ... --reason TEXT`, `fencegate store accept-loss --config PATH --reason TEXT`), or set admin.writeToken and send "Authorization: Bearer <admin.writeToken>".')
    }
    const given = bearerToken(c.req.header('authorization'))
    if (given !== undefined && sameToken(given, writeToken)) return next()
    if (given !== undefined && readToken && sameToken(given, readToken)) {
      throw new Problem('forbidden', 'This is the read token (admin.token); admin write actions need "Authorization: Bearer <admin.writeToken>".', {}, { 'www-authenticate': 'Bearer error="insufficient_scope"' })
    }
    throw new Problem('unauthorized', 'Admin write actions need "Authorization: Bearer <admin.writeToken>".', {}, { 'www-authenticate': given === undefined ? 'Bearer' : 'Bearer error="invalid_token"' })
  }
}

/** Who made an admin write: `admin-api:<peer address>`, with the body's `by` when it gave one. */
function adminActor(env: unknown, by: unknown): string {
  const peer = (env as { incoming?: IncomingMessage } | undefined)?.incoming?.socket?.remoteAddress ?? 'unknown'
  const name = typeof by === 'string' ? by.replace(/[\u0000-\u001f\u007f]+/g, ' ').trim().slice(0, 100) : ''
  return `admin-api:${peer.startsWith('::ffff:') ? peer.slice(7) : peer}${name ? ` (${name})` : ''}`
}

export function createAdmin({ token, writeToken = undefined, store, metrics, accepting, config, watch, storeSettings }: AdminOptions): Hono {
  writeToken ??= config?.admin.writeToken
  const app = new Hono()
  app.use('*', securityHeaders)
  app.get('/healthz', (c) => c.json({ status: 'ok' }))
  // contract §5a: every /readyz body says the store's state (`storeState`); with `serving`, a store
  // that cannot answer is said in the body only, else in the status too (503)
  const serving = config?.admin.readiness === 'serving'
  const readyReply = (storeState: 'ready' | 'store unavailable' | 'store state lost', more: Record<string, unknown> = {}, refusedUntil = ''): Response => {
    const body = { status: 'ready', store: store.kind, storeState, ...more }
    if (storeState === 'ready') return Response.json(body)
    return serving
      ? Response.json({ ...body, readiness: 'serving', served: `plain routes are served; fenced and idempotent routes answer 503 ${refusedUntil}` })
      : Response.json({ ...body, status: storeState }, { status: 503 })
  }
  const lostReply = () => readyReply('store state lost', { seen: watch && lossSeen(watch), note: watch?.note,
    detail: 'the store lost acknowledged state (see `seen`); run `fencegate store accept-loss` once the loss is understood' }, 'until an operator accepts the loss (`fencegate store accept-loss`)')
  app.get('/readyz', async (c) => {
    if (!accepting()) return c.json({ status: 'shutting down' }, 503)
    try {
      await store.ping()
      metrics.storeUp.set({ store: store.kind }, 1)
      await watch?.check()
      if (watch?.lost) return lostReply()
      // still ready: the other shards serve; this one's writes get 503 (store.replicas)
      const short = store.replicaShortfalls?.() ?? []
      if (short.length) return readyReply('ready', { replicas: short })
      const refused = store.writeRefused?.()
      // still ready: replays and stale-token refusals are answered; new keys get 503
      if (refused) return readyReply('ready', { disk: `the store's disk refused a write ${Math.round((Date.now() - refused.at) / 1000)} s ago (${refused.code}: ${refused.message}): new keys are refused (503), replays are served` })
      return readyReply('ready')
    } catch (e) {
      // a check that met a store gone back in time (src/store/state-loss/sequence.ts) marked the loss
      if (watch?.lost) return lostReply()
      metrics.storeUp.set({ store: store.kind }, 0)
      return readyReply('store unavailable', { detail: (e as Error).message }, 'until the store answers')
    }
  })
  // write actions: their own token, checked before (and instead of) the read token
  const write = adminWrite(writeToken, token)
  app.post('/store/accept-loss', write, async (c) => {
    let body: { reason?: unknown; by?: unknown } = {}
    const text = await c.req.text()
    if (text.trim()) {
      try { body = JSON.parse(text) } catch { throw new Problem('bad-request', 'The body must be empty or JSON: {"reason": "why the loss is accepted", "by": "who"}.') }
      if (typeof body !== 'object' || body === null) throw new Problem('bad-request', 'The body must be a JSON object: {"reason", "by"}.')
    }
    const { epoch, cleared } = await acceptStoreLoss(store, { reason: body.reason as string | undefined, by: adminActor(c.env, body.by) })
    await watch?.check().catch(() => {})
    return c.json({ epoch, cleared, effect: 'the store\'s current state is accepted (and its loss note, if any, cleared); gateways sharing the store serve again within a second' })
  })
  if (config) {
    // an operator settles an unknown outcome (docs/operate.md, admin endpoints); body {route, key, scope?, as, reason?} or {route, keyHash, as, reason?}
    app.post('/resolve', write, async (c) => {
      let body: Partial<ResolveRequest>
      try {
        body = await c.req.json()
      } catch {
        throw new Problem('bad-request', 'The body must be JSON: {"route": "...", "key": "...", "scope": "..." (when the route has one), "as": "completed" | "failed", "reason": "..."}.')
      }
      if (typeof body !== 'object' || body === null) throw new Problem('bad-request', 'The body must be a JSON object: {"route", "key", "scope" (when the route has one), "as": "completed" | "failed", "reason"}.')
      const resolved = await resolveKey(config, store, { ...body, by: adminActor(c.env, body.by) } as ResolveRequest)
      // its entry is written by resolveKey, in the store's log
      recordSettled(metrics, undefined, { route: resolved.route, keyHash: resolved.keyHash, by: 'operator', as: resolved.resolution === 'completed' ? 'applied' : 'not_applied' })
      return c.json(resolved)
    })
  }
  // the audit view's shells and assets hold no data: no token (contract §5a)
  mountUi(app, { exposed: config && exposedAdmin(config) })
  if (token) app.use('*', bearerAuth({ token }))
  // bearerAuth throws; answer as every gateway-made response does, keeping its WWW-Authenticate
  app.onError((err) => {
    if (err instanceof Problem) return err.toResponse()
    if (err instanceof StoreError) return storeUnavailable().toResponse()
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
      const settings = await storeSettings?.().catch(() => undefined)
      // the loss as this gateway sees it now, not as the settings were last read
      const measured = settings ? claimSentences(withoutLoss(settings)) : []
      // a loss this gateway sees now: the guarantees are suspended until an operator accepts it
      if (watch?.lost) measured.unshift(`Now: the store has lost acknowledged state (${lossSeen(watch)}); every fenced or idempotent request is refused with 503 store-state-lost until \`fencegate store accept-loss\`.`)
      return c.json(await buildReport(config, store.audit, since, now, route, measured.length ? measured : undefined))
    })
    // contract §8: one key's or resource's attempts, oldest first
    app.get('/audit/timeline', async (c) => {
      const now = Date.now()
      const sinceText = c.req.query('since')
      const since = sinceText === undefined ? now - config.audit.retention : parseSince(sinceText, now)
      if (since === undefined) throw new Problem('bad-request', `since must be a duration back from now (30m, 1h, 7d) or an RFC 3339 time, not ${JSON.stringify(sinceText)}.`)
      const untilText = c.req.query('until')
      const until = untilText === undefined ? undefined : Date.parse(untilText)
      if (Number.isNaN(until)) throw new Problem('bad-request', `until must be an RFC 3339 time (the first entry's time of the page before), not ${JSON.stringify(untilText)}.`)
      const limitText = c.req.query('limit')
      const limit = limitText === undefined ? undefined : Number(limitText)
      if (limit !== undefined && !(Number.isInteger(limit) && limit > 0)) throw new Problem('bad-request', `limit must be a positive integer (at most ${TIMELINE_LIMIT} are given), not ${JSON.stringify(limitText)}.`)
      return c.json(await buildTimeline(config, store.audit, { route: c.req.query('route'), keyHash: c.req.query('keyHash'), key: c.req.query('key'), scope: c.req.query('scope'), resource: c.req.query('resource'), since, until, limit }))
    })
    // the audit view's overview: the keys and resources of the newest attempts
    app.get('/audit/recent', async (c) => c.json(await recentKeys(store.audit, Date.now() - Math.min(config.audit.retention, 24 * 3_600_000))))
    // the audit view's Routes: each route's match, fencing and idempotency settings (no upstream addresses, no tokens)
    app.get('/routes', (c) => c.json(routeSummaries(config)))
    // contract §8: effect durations, stale writers' lateness and lease advice per fenced route
    app.get('/leases', async (c) => {
      const now = Date.now()
      const sinceText = c.req.query('since') ?? DEFAULT_SINCE
      const since = parseSince(sinceText, now)
      if (since === undefined) throw new Problem('bad-request', `since must be a duration back from now (30m, 1h, 7d) or an RFC 3339 time, not ${JSON.stringify(sinceText)}.`)
      return c.json(await buildLeases(config, store.audit, since, now, c.req.query('route')))
    })
    // contract §8: the records now in the unknown state, to be settled with POST /resolve {keyHash}
    app.get('/unknown', async (c) => {
      const route = c.req.query('route')
      if (route !== undefined && !config.routes.some((r) => r.name === route)) {
        throw new Problem('bad-request', `No route named ${JSON.stringify(route)} in the config (routes: ${config.routes.map((r) => r.name).join(', ')}).`)
      }
      return c.json(await listUnknown(config, store, Date.now(), route))
    })
  }
  // fencegate doctor's report as this gateway reads it (memory: its records and their rate)
  app.get('/doctor', async (c) => {
    const report = await storeSettings?.().catch(() => undefined)
    if (!report) throw new StoreError('the store\'s settings cannot be read now', 'doctor')
    // the settings may be a minute old; the loss is this gateway's view now (the note it read or left)
    await watch?.check().catch(() => {})
    const now = withoutLoss(report)
    if (watch?.lost) now.findings.unshift(lossFinding(watch.note, watch.seen))
    return c.json(now)
  })
  app.notFound(() => new Problem('no-route', `No admin endpoint here: /metrics, /healthz, /readyz, /doctor${config ? ', /audit, /audit/timeline, /audit/recent, /leases, /unknown, /routes, POST /resolve; the audit view at /' : ''}, POST /store/accept-loss.`).toResponse())
  return app
}
