/**
 * Starts and stops a gateway process: store, proxy listener, admin listener. SIGTERM/SIGINT:
 * stop accepting, let requests in flight finish up to `shutdown.grace`, then close upstream
 * pools and the store. `reload()` (SIGHUP) swaps in the app of a new config while requests in
 * flight finish under the old one (./reload.ts). A shared store that does not answer at start-up
 * does not stop the start: the gateway serves, failing closed, and connects when it answers
 * (./store/runtime/late.ts). The store is opened as the `--workers` primary opens it (./store/runtime/open.ts).
 */
import type { AddressInfo } from 'node:net'
import { createServer, type Server } from 'node:http'
import { createServer as createHttpsServer, type ServerOptions as TlsOptions } from 'node:https'
import type { Pool } from 'undici'
import type { Duplex } from 'node:stream'
import { createAdaptorServer } from '@hono/node-server'
import type { Config } from './config/schema.js'
import { createGateway, type Gateway } from './gateway.js'
import { createAdmin, exposedAdmin } from './admin.js'
import { openGuardedStore, StateWatch, type RiskRefused } from './store/index.js'
import { nextConfig, refuseReload, type ReloadResult } from './reload.js'
import { listenerTls, prepareRotation, recordListenerExpiry, servesTls } from './tls/listeners.js'
import { TlsFilesError } from './tls/material.js'
import { recordUpstreamExpiry, routesTls, type UpstreamTls } from './tls/upstream.js'
import { recordStoreExpiry, storeTlsMaterial } from './tls/store.js'
import { hopelessUpload, onClientError, routingUrl, screened } from './front-door.js'
import { refuse } from './refuse.js'
import { closeUpstreams } from './forward/send.js'
import { createMetrics, type Metrics } from './telemetry/metrics.js'
import { createLogger, type Logger } from './log.js'
import { VERSION } from './version.js'
import { hostPort } from './listen-address.js'
import { AuditQueue } from './audit/queue.js'
import { watchUnknown } from './audit/unknown.js'

export interface Running {
  /** `http://host:port` of the proxy listener (`https://` with `tls`) */
  url: string
  adminUrl: string
  metrics: Metrics
  /** the attempt log writer; `flush()` waits until what was queued is written */
  audit: AuditQueue
  /** graceful stop; resolves once everything is closed */
  close(): Promise<void>
  /**
   * SIGHUP: applies the config file again (or `next`), or refuses it and keeps the running one;
   * requests in flight finish under the config they started with
   */
  reload(next?: Config): Promise<ReloadResult>
}

export function listen(server: Server, listenAt: string): Promise<string> {
  const { host, port } = hostPort(listenAt)
  return new Promise((resolve, reject) => {
    server.once('error', reject)
    server.listen(port, host, () => {
      server.off('error', reject)
      const a = server.address() as AddressInfo
      resolve(`${servesTls(server) ? 'https' : 'http'}://${a.family === 'IPv6' ? `[${a.address}]` : a.address}:${a.port}`)
    })
  })
}

export interface StartOptions {
  /** false: no admin listener (a `--workers` worker: the primary serves admin); default true */
  admin?: boolean
  /** the file `reload()` reads again */
  configFile?: string
  /**
   * called after the gateway closed itself because a store that answered only after start-up
   * turned out to have a setting that refuses it (a blocking risk of `fencegate doctor`)
   */
  onRefused?: (e: RiskRefused) => void
}

/** One config's request handling: what a request is admitted by, and finishes under (./reload.ts). */
interface Generation {
  config: Config
  handle: Gateway['handle']
  pools: Pool[]
  /** its routes' background probes (idempotency.settle), stopped when it is replaced */
  settler: Gateway['settler']
  /** the request id header, lower case */
  idHeader: string
  /** the largest body any route accepts */
  largest: number
  /** requests admitted by this generation whose response has not ended */
  active: number
  /** replaced by a newer generation: its pools close once `active` is 0 */
  retired: boolean
}

/**
 * How often Node looks for connections past headersTimeout or requestTimeout: a tenth of the
 * shorter one, at most every second (Node's default, 30 s, would let a slow client hold its
 * connection up to 30 s past the timeout).
 */
const checkingInterval = (s: Config['server']): number =>
  Math.min(1000, Math.max(10, Math.floor(Math.min(s.headersTimeout, s.requestTimeout) / 10)))

/**
 * The proxy listener: the current generation's request handling behind the front door (./front-door.ts), with the configured
 * client timeouts. Each request is counted on the generation that admitted it until its
 * response has ended; `retire` is called when a replaced generation has none left.
 */
function createProxyServer(config: Config, current: () => Generation, retire: (g: Generation) => void, tls?: TlsOptions): Server {
  const s = config.server
  const server = ((tls ? createHttpsServer : createServer) as typeof createServer)({
    ...tls,
    headersTimeout: s.headersTimeout,
    requestTimeout: s.requestTimeout,
    connectionsCheckingInterval: checkingInterval(s),
    // a missing Host is still refused (by routingUrl, as a problem, not Node's bare 400)
    requireHostHeader: false,
  }, (req, res) => {
    const g = current()
    if (screened(req, res, g.idHeader)) return
    const url = routingUrl(req)
    if (typeof url !== 'string') return refuse({ outgoing: res }, url, { idHeader: g.idHeader })
    g.active++
    res.once('close', () => { if (--g.active === 0 && g.retired) retire(g) })
    void g.handle(req, res, url)
  })
  server.keepAliveTimeout = s.keepAliveTimeout
  server.on('clientError', (err: Error & { code?: string; reason?: string }, socket: Duplex) => onClientError(current().idHeader)(err, socket))
  return server
}

/**
 * `Expect: 100-continue`: a body larger than every route accepts is refused before the client
 * sends it (./front-door.ts); any other request gets its 100 Continue as Node would send it.
 */
function refuseHopelessUploads(server: Server, current: () => Generation): void {
  server.on('checkContinue', (req, res) => {
    const { largest, idHeader } = current()
    if (screened(req, res, idHeader) || hopelessUpload(req, res, largest, idHeader)) return
    res.writeContinue()
    server.emit('request', req, res)
  })
}

/**
 * Opens the store and starts both listeners. A redis or postgres store that does not answer yet
 * does not stop the start (contract §2): see ./store/runtime/late.ts.
 * @throws StoreError when a memory or sqlite store cannot be opened; RiskRefused when the store's
 *   settings hold a blocking risk (./store/doctor/inspect.ts); Error (EADDRINUSE…) when a port is taken
 */
export async function startGateway(config: Config, log: Logger = createLogger(), options: StartOptions = {}): Promise<Running> {
  const metrics = createMetrics(VERSION)
  log.setLevel?.(config.log.level)
  // the store's real settings: one log line, and no start on a risk store.acceptRisks does not
  // name (a --workers worker leaves both to the primary)
  const opened = await openGuardedStore(config, log, metrics, { checkSettings: options.admin !== false })
  const { store, settings: storeSettings } = opened
  const watch = new StateWatch(store, config.store.onStateLoss, metrics, log)
  await watch.start() // a store that does not answer yet: its first answer sets the epoch
  let accepting = true
  const audit = new AuditQueue(store.audit, { capacity: config.audit.queueSize, stdout: config.audit.stdout ? process.stdout : undefined, dropped: metrics.auditDropped, log })
  let stopUnknown = watchUnknown(config, store, metrics, log, audit)

  const generation = (c: Config, upstreamTls?: (UpstreamTls | undefined)[]): Generation => {
    const { handle, pools, settler } = createGateway(c, store, metrics, log, audit, watch, upstreamTls)
    settler.start()
    const idHeader = c.log.requestIdHeader.toLowerCase()
    return { config: c, handle, pools, settler, idHeader, largest: Math.max(...c.routes.map((r) => r.maxRequestBytes)), active: 0, retired: false }
  }
  let current = generation(config)
  // replaced generations whose requests have not all ended yet: their pools close with the last one, or at shutdown
  const lingering = new Set<Generation>()
  const retire = (g: Generation) => { lingering.delete(g); closeUpstreams(g.pools).catch(() => {}) }
  const proxyTls = listenerTls(config, 'proxy')
  const adminTls = options.admin !== false ? listenerTls(config, 'admin') : undefined
  const server = createProxyServer(config, () => current, retire, proxyTls?.options)
  refuseHopelessUploads(server, () => current)
  const adminApp = (c: Config) => createAdmin({ token: c.admin.token, store, metrics, accepting: () => accepting, config: c, watch, storeSettings })
  let adminFetch = adminApp(config).fetch
  const admin = createAdaptorServer({ fetch: (req, env) => adminFetch(req, env), ...(adminTls ? { createServer: createHttpsServer, serverOptions: adminTls.options } : {}) }) as Server
  recordListenerExpiry(metrics, 'proxy', proxyTls)
  recordListenerExpiry(metrics, 'admin', adminTls)
  // the store's client certificate: read once, as the store connection is opened once (restart to rotate)
  recordStoreExpiry(metrics, config.store, storeTlsMaterial(config.store))
  let url: string, adminUrl = ''
  try {
    url = await listen(server, config.listen)
    if (options.admin !== false) adminUrl = await listen(admin, config.admin.listen)
  } catch (e) {
    watch.stop()
    stopUnknown()
    server.close()
    await store.close()
    throw e
  }
  if (options.admin !== false) {
    const exposed = exposedAdmin(config)
    if (exposed) log.warn(exposed, { admin: config.admin.listen })
  }

  const reload = async (next?: Config): Promise<ReloadResult> => {
    const checked = nextConfig(options.configFile, current.config, metrics, log, next)
    if ('refused' in checked) return checked.refused
    const c = checked.config
    let rotate: () => void
    let upstreamTls: (UpstreamTls | undefined)[]
    try {
      rotate = prepareRotation(c, { proxy: proxyTls && server, admin: adminTls && admin }, metrics)
      // every route gets a new pool (below), so its upstream TLS files are read again here
      upstreamTls = routesTls(c)
    } catch (e) {
      if (e instanceof TlsFilesError) return refuseReload(options.configFile, metrics, log, 'a TLS file cannot be used', e.problems.map((p) => `${p.path}: ${p.message}`))
      throw e
    }
    rotate()
    const previous = current
    current = generation(c, upstreamTls) // new requests from here on; those in flight keep `previous`
    for (const r of previous.config.routes) if (!c.routes.some((n) => n.name === r.name)) recordUpstreamExpiry(metrics, r.name, undefined)
    previous.retired = true
    previous.settler.stop()
    if (previous.active === 0) retire(previous)
    else lingering.add(previous)
    adminFetch = adminApp(c).fetch
    stopUnknown()
    stopUnknown = watchUnknown(c, store, metrics, log, audit)
    log.setLevel?.(c.log.level)
    metrics.configReloads.inc({ result: 'applied' })
    log.info('config reloaded', { file: options.configFile, routes: c.routes.length, inFlight: previous.active })
    return { applied: true, routes: c.routes.length }
  }

  let closing: Promise<void> | undefined
  const close = () => (closing ??= (async () => {
    accepting = false
    current.settler.stop()
    watch.stop()
    stopUnknown()
    const drained = new Promise<void>((r) => server.close(() => r()))
    server.closeIdleConnections()
    const grace = new Promise<'late'>((r) => setTimeout(() => r('late'), current.config.shutdown.grace).unref())
    if ((await Promise.race([drained, grace])) === 'late') {
      log.warn('shutdown grace passed; closing connections with requests still in flight')
      server.closeAllConnections()
    }
    await closeUpstreams([current, ...lingering].flatMap((g) => g.pools)).catch(() => {})
    await audit.flush().catch(() => {})
    await store.close().catch(() => {})
    admin.closeAllConnections()
    await new Promise<void>((r) => admin.close(() => r()))
  })())
  // a store that did not answer at start-up: its settings are read once it does
  opened.checkWhenConnected(async (e) => {
    log.error(`the store's settings refuse this gateway, which stops: ${e.message}`, { store: config.store.kind, refused: e.findings.map((f) => f.id).join(', ') })
    await close()
    options.onRefused?.(e)
  })
  return { url, adminUrl, metrics, audit, close, reload }
}
