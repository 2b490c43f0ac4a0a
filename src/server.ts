/**
 * Starts and stops a gateway process: store, proxy listener, admin listener. SIGTERM/SIGINT:
 * stop accepting, let requests in flight finish up to `shutdown.grace`, then close upstream
 * pools and the store.
 */
import type { AddressInfo } from 'node:net'
import type { Server } from 'node:http'
import { createAdaptorServer } from '@hono/node-server'
import type { Config } from './config/schema.js'
import { createGateway } from './gateway.js'
import { createAdmin } from './admin.js'
import { openStore, guardStore } from './store/index.js'
import { StateWatch } from './store/state.js'
import { tooLarge } from './body.js'
import { closeUpstreams } from './forward/index.js'
import { createMetrics, type Metrics } from './telemetry/metrics.js'
import { createLogger, type Logger } from './log.js'
import { VERSION } from './version.js'
import { untraced } from './telemetry/tracing.js'
import { AuditQueue } from './audit/queue.js'

export interface Running {
  /** `http://host:port` of the proxy listener */
  url: string
  adminUrl: string
  metrics: Metrics
  /** the attempt log writer; `flush()` waits until what was queued is written */
  audit: AuditQueue
  /** graceful stop; resolves once everything is closed */
  close(): Promise<void>
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
}

/**
 * `Expect: 100-continue` (RFC 9110 §10.1.1): a body larger than every route accepts is refused
 * with 413 before the client sends it; any other request gets its 100 Continue as Node would
 * send it. (A body over a smaller route's limit is refused after routing, once it is sent.)
 */
function refuseHopelessUploads(server: Server, largest: number): void {
  server.on('checkContinue', (req, res) => {
    if (Number(req.headers['content-length'] ?? 0) > largest) {
      const p = tooLarge(largest)
      res.writeHead(p.status, { 'content-type': 'application/problem+json', connection: 'close' })
      res.end(p.body())
      return
    }
    res.writeContinue()
    server.emit('request', req, res)
  })
}

/**
 * Opens the store and starts both listeners.
 * @throws StoreError when the store cannot be opened; Error (EADDRINUSE…) when a port is taken
 */
export async function startGateway(config: Config, log: Logger = createLogger(), options: StartOptions = {}): Promise<Running> {
  const metrics = createMetrics(VERSION)
  const raw = await openStore(config.store, config.audit)
  const store = guardStore(raw, metrics, config.store.timeout, log)
  try {
    await store.ping()
  } catch (e) {
    await raw.close().catch(() => {})
    throw e
  }
  const watch = new StateWatch(store, config.store.onStateLoss, metrics, log)
  try {
    await watch.start()
  } catch (e) {
    await raw.close().catch(() => {})
    throw e
  }
  let accepting = true
  const audit = new AuditQueue(store.audit, { capacity: config.audit.queueSize, stdout: config.audit.stdout ? process.stdout : undefined, dropped: metrics.auditDropped, log })
  const { app, pools } = createGateway(config, store, metrics, log, audit, watch)
  const server = createAdaptorServer({ fetch: app.fetch, autoCleanupIncoming: false }) as Server
  refuseHopelessUploads(server, Math.max(...config.routes.map((r) => r.maxRequestBytes)))
  const admin = createAdaptorServer({ fetch: createAdmin({ token: config.admin.token, store, metrics, accepting: () => accepting, config, watch }).fetch }) as Server
  untraced(admin) // probes and scrapes are not traffic: no spans
  let url: string, adminUrl = ''
  try {
    url = await listen(server, config.listen)
    if (options.admin !== false) adminUrl = await listen(admin, config.admin.listen)
  } catch (e) {
    watch.stop()
    server.close()
    await raw.close()
    throw e
  }
  let closing: Promise<void> | undefined
  const close = () => (closing ??= (async () => {
    accepting = false
    watch.stop()
    const drained = new Promise<void>((r) => server.close(() => r()))
    server.closeIdleConnections()
    const grace = new Promise<'late'>((r) => setTimeout(() => r('late'), config.shutdown.grace).unref())
    if ((await Promise.race([drained, grace])) === 'late') {
      log.warn('shutdown grace passed; closing connections with requests still in flight')
      server.closeAllConnections()
    }
    await closeUpstreams(pools).catch(() => {})
    await audit.flush().catch(() => {})
    await raw.close().catch(() => {})
    admin.closeAllConnections()
    await new Promise<void>((r) => admin.close(() => r()))
  })())
  return { url, adminUrl, metrics, audit, close }
}
