/**
 * Starts and stops a gateway process: store, proxy listener, admin listener. SIGTERM/SIGINT:
 * stop accepting, let requests in flight finish up to `shutdown.grace`, then close upstream
 * pools and the store. `reload()` (SIGHUP) swaps in the app of a new config while requests in
 * flight finish under the old one (./reload.ts). A shared store that does not answer at start-up
 * does not stop the start: the gateway serves, failing closed, and connects when it answers
 * (./store/late.ts). The store is opened as the `--workers` primary opens it (./store/open.ts).
 */
import type { AddressInfo } from 'node:net'
import { randomUUID } from 'node:crypto'
import { createServer, STATUS_CODES, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import type { Pool } from 'undici'
import type { Duplex } from 'node:stream'
import { createAdaptorServer, getRequestListener, RequestError } from '@hono/node-server'
import type { Config } from './config/schema.js'
import { createGateway } from './gateway.js'
import { createAdmin, exposedAdmin } from './admin.js'
import { openGuardedStore } from './store/open.js'
import type { RiskRefused } from './store/doctor.js'
import { nextConfig, type ReloadResult } from './reload.js'
import { StateWatch } from './store/state-loss.js'
import { BodyLimit } from './body.js'
import { Problem } from './problems.js'
import { closeUpstreams } from './forward/send.js'
import { createMetrics, type Metrics } from './telemetry/metrics.js'
import { createLogger, type Logger } from './log.js'
import { VERSION } from './version.js'
import { AuditQueue } from './audit/queue.js'
import { watchUnknown } from './audit/unknown.js'

export interface Running {
  /** `http://host:port` of the proxy listener */
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

const hostPort = (listen: string): { host: string; port: number } => {
  const i = listen.lastIndexOf(':')
  return { host: listen.slice(0, i).replace(/^\[|\]$/g, ''), port: Number(listen.slice(i + 1)) }
}

export function listen(server: Server, listenAt: string): Promise<string> {
  const { host, port } = hostPort(listenAt)
  return new Promise((resolve, reject) => {
    server.once('error', reject)
    server.listen(port, host, () => {
      server.off('error', reject)
      const a = server.address() as AddressInfo
      resolve(`http://${a.family === 'IPv6' ? `[${a.address}]` : a.address}:${a.port}`)
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
  listener: ReturnType<typeof getRequestListener>
  pools: Pool[]
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
 * A problem (RFC 9457) the listener answers itself, before any route — outside the request
 * metrics and the attempt log, like the requests Node's parser refuses — in the shape of
 * Problem.body(): `instance` a new request id (a request refused this early has no other),
 * and Stripe's `error` member.
 */
function listenerProblem(status: number, name: string, title: string, detail: string): { id: string; body: string } {
  const id = randomUUID()
  const error = { type: status >= 500 ? 'api_error' : 'invalid_request_error', code: name, message: detail }
  return { id, body: JSON.stringify({ type: `urn:fencegate:problem:${name}`, title, status, detail, instance: id, error }) }
}

/** The header lines of a listener-made problem response; the connection is closed after it. */
const problemHeaders = (p: { id: string; body: string }, idHeader: string): Record<string, string | number> => ({
  'content-type': 'application/problem+json', 'cache-control': 'no-store', 'content-length': Buffer.byteLength(p.body), connection: 'close', [idHeader]: p.id,
})

/**
 * Refuses what the upstream could read otherwise than the gateway, before routing:
 * - an HTTP version other than 1.0 and 1.1 (505, RFC 9110 §15.6.6): Node's parser passes
 *   "HTTP/2.0" and "HTTP/0.9" request lines (other versions it refuses, see onClientError);
 *   they are not HTTP/1.1 framing the gateway can vouch for;
 * - a "#fragment" in the request target (400 bad-path): no form of request-target has one
 *   (RFC 9112 §3.2); Hono routes and fences the path before the "#" while the target is
 *   forwarded whole, so the upstream could read another path. Envoy refuses it too (its default
 *   since 1.19.1; stripping is opt-in, keeping it deprecated as unsafe).
 * The body of a refused request is never read: the connection is closed after the answer.
 * @returns true when the request was answered
 */
function screened(req: IncomingMessage, res: ServerResponse, idHeader: string): boolean {
  let p: { id: string; body: string } | undefined
  let status = 0
  if (req.httpVersionMajor !== 1 || (req.httpVersionMinor !== 1 && req.httpVersionMinor !== 0)) {
    status = 505
    p = listenerProblem(505, 'http-version-not-supported', 'HTTP version not supported', `This gateway speaks HTTP/1.1 and HTTP/1.0, not HTTP/${req.httpVersion}; nothing was forwarded.`)
  } else if (req.url !== undefined && req.url.includes('#')) {
    const bad = new Problem('bad-path', 'The request target carries a "#fragment", which no HTTP request target may hold (RFC 9112 §3.2); nothing was forwarded.')
    status = bad.status
    p = listenerProblem(bad.status, 'bad-path', bad.title, bad.detail)
  }
  if (!p) return false
  res.writeHead(status, problemHeaders(p, idHeader))
  res.end(p.body)
  return true
}

// What Node's parser refuses (clientError), as problems instead of Node's bare status lines.
const CLIENT_ERRORS: Record<string, [number, string, string]> = {
  HPE_HEADER_OVERFLOW: [431, 'request-headers-too-large', 'The request line and headers are larger than this gateway accepts.'],
  HPE_CHUNK_EXTENSIONS_OVERFLOW: [413, 'body-too-large', 'The chunk extensions of the request body are larger than this gateway accepts.'],
  ERR_HTTP_REQUEST_TIMEOUT: [408, 'request-timeout', 'The request did not arrive whole within the server\'s timeouts (server.headersTimeout, server.requestTimeout).'],
}
const VERSION_NOT_SUPPORTED: [number, string, string] = [505, 'http-version-not-supported', 'This gateway speaks HTTP/1.1 and HTTP/1.0 only; nothing was forwarded.']

/**
 * Answers a request Node's HTTP parser refused (smuggling attempts such as Content-Length with
 * Transfer-Encoding, bad bytes, unknown methods, oversized heads, timeouts) with a problem and
 * closes the connection. Nothing of such a request reaches the app, hence nothing the upstream.
 * As Node does: an answer only when no response has begun on the connection.
 */
function onClientError(idHeader: string) {
  return (err: Error & { code?: string; reason?: string }, socket: Duplex): void => {
    const current = (socket as Duplex & { _httpMessage?: ServerResponse | null })._httpMessage
    if (err.code === 'ECONNRESET' || !socket.writable || current?.headersSent) {
      socket.destroy()
      return
    }
    // llhttp's HPE_INVALID_VERSION also stands for a malformed request line ("Expected CRLF after version")
    const [status, name, detail] = err.code === 'HPE_INVALID_VERSION' && err.reason === 'Invalid HTTP version'
      ? VERSION_NOT_SUPPORTED
      : CLIENT_ERRORS[err.code ?? ''] ?? [400, 'request-malformed', `The request is not well-formed HTTP/1.1 (${err.code ?? 'parse error'}${err.reason ? `: ${err.reason}` : ''}); nothing was forwarded.`]
    const reason = STATUS_CODES[status] ?? 'Bad Request'
    const p = listenerProblem(status, name, reason, detail)
    const head = Object.entries(problemHeaders(p, idHeader)).map(([k, v]) => `${k}: ${v}\r\n`).join('')
    socket.end(`HTTP/1.1 ${status} ${reason}\r\n${head}\r\n${p.body}`, () => socket.destroy())
  }
}

/**
 * How often Node looks for connections past headersTimeout or requestTimeout: a tenth of the
 * shorter one, at most every second (Node's default, 30 s, would let a slow client hold its
 * connection up to 30 s past the timeout).
 */
const checkingInterval = (s: Config['server']): number =>
  Math.min(1000, Math.max(10, Math.floor(Math.min(s.headersTimeout, s.requestTimeout) / 10)))

/**
 * What @hono/node-server cannot make a Request of (a target such as "*" or "x", a bad Host
 * header, a raw backslash in the path): a 400 problem instead of its bare 400. Nothing was routed.
 */
function unusableRequest(idHeader: string) {
  return (err: unknown): Response => {
    const bad = err instanceof RequestError
    const p = bad
      ? listenerProblem(400, 'request-malformed', 'Bad Request', `The request cannot be routed (${(err as Error).message}); nothing was forwarded.`)
      : listenerProblem(502, 'upstream-unavailable', 'Upstream unavailable', 'The gateway failed to handle the request.')
    const { 'content-length': _, ...headers } = problemHeaders(p, idHeader)
    return new Response(p.body, { status: bad ? 400 : 502, headers: headers as Record<string, string> })
  }
}

/** Hono's listener for one generation's app. */
const requestListener = (fetch: Parameters<typeof getRequestListener>[0], idHeader: string) =>
  getRequestListener(fetch, { autoCleanupIncoming: false, errorHandler: unusableRequest(idHeader) })

/**
 * The proxy listener: the current generation's listener behind `screened`, with the configured
 * client timeouts. Each request is counted on the generation that admitted it until its
 * response has ended; `retire` is called when a replaced generation has none left.
 */
function createProxyServer(config: Config, current: () => Generation, retire: (g: Generation) => void): Server {
  const s = config.server
  const server = createServer({
    headersTimeout: s.headersTimeout,
    requestTimeout: s.requestTimeout,
    connectionsCheckingInterval: checkingInterval(s),
    // a missing Host is still refused (by unusableRequest, as a problem, not Node's bare 400)
    requireHostHeader: false,
  }, (req, res) => {
    const g = current()
    if (screened(req, res, g.idHeader)) return
    g.active++
    res.once('close', () => { if (--g.active === 0 && g.retired) retire(g) })
    void g.listener(req, res)
  })
  server.keepAliveTimeout = s.keepAliveTimeout
  server.on('clientError', (err: Error & { code?: string; reason?: string }, socket: Duplex) => onClientError(current().idHeader)(err, socket))
  return server
}

/**
 * `Expect: 100-continue` (RFC 9110 §10.1.1): a body larger than every route accepts is refused
 * with 413 before the client sends it; any other request gets its 100 Continue as Node would
 * send it. (A body over a smaller route's limit is refused after routing, once it is sent.)
 */
function refuseHopelessUploads(server: Server, current: () => Generation): void {
  server.on('checkContinue', (req, res) => {
    const { largest, idHeader } = current()
    if (screened(req, res, idHeader)) return
    if (Number(req.headers['content-length'] ?? 0) > largest) {
      const p = new BodyLimit(largest).tooLarge()
      res.writeHead(p.status, { 'content-type': 'application/problem+json', connection: 'close' })
      res.end(p.body())
      return
    }
    res.writeContinue()
    server.emit('request', req, res)
  })
}

/**
 * Opens the store and starts both listeners. A redis or postgres store that does not answer yet
 * does not stop the start (contract §2): see ./store/late.ts.
 * @throws StoreError when a memory or sqlite store cannot be opened; RiskRefused when the store's
 *   settings hold a blocking risk (./store/doctor.ts); Error (EADDRINUSE…) when a port is taken
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
  let stopUnknown = watchUnknown(config, store, metrics, log)
  const audit = new AuditQueue(store.audit, { capacity: config.audit.queueSize, stdout: config.audit.stdout ? process.stdout : undefined, dropped: metrics.auditDropped, log })

  const generation = (c: Config): Generation => {
    const { app, pools } = createGateway(c, store, metrics, log, audit, watch)
    const idHeader = c.log.requestIdHeader.toLowerCase()
    return { config: c, listener: requestListener(app.fetch, idHeader), pools, idHeader, largest: Math.max(...c.routes.map((r) => r.maxRequestBytes)), active: 0, retired: false }
  }
  let current = generation(config)
  // replaced generations whose requests have not all ended yet: their pools close with the last one, or at shutdown
  const lingering = new Set<Generation>()
  const retire = (g: Generation) => { lingering.delete(g); closeUpstreams(g.pools).catch(() => {}) }
  const server = createProxyServer(config, () => current, retire)
  refuseHopelessUploads(server, () => current)
  const adminApp = (c: Config) => createAdmin({ token: c.admin.token, store, metrics, accepting: () => accepting, config: c, watch, storeSettings })
  let adminFetch = adminApp(config).fetch
  const admin = createAdaptorServer({ fetch: (req, env) => adminFetch(req, env) }) as Server
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
    const previous = current
    current = generation(c) // new requests from here on; those in flight keep `previous`
    previous.retired = true
    if (previous.active === 0) retire(previous)
    else lingering.add(previous)
    adminFetch = adminApp(c).fetch
    stopUnknown()
    stopUnknown = watchUnknown(c, store, metrics, log)
    log.setLevel?.(c.log.level)
    metrics.configReloads.inc({ result: 'applied' })
    log.info('config reloaded', { file: options.configFile, routes: c.routes.length, inFlight: previous.active })
    return { applied: true, routes: c.routes.length }
  }

  let closing: Promise<void> | undefined
  const close = () => (closing ??= (async () => {
    accepting = false
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
