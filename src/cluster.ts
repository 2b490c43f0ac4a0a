/**
 * `fencegate --workers N`: N worker processes (node:cluster) serving the one proxy port; the
 * primary process accepts connections and hands them out in turn, runs the admin listener and
 * restarts a worker that dies.
 *
 * Every worker opens its own connection to the store, so the store must be one they share:
 * sqlite (the same file on one host), redis or postgres. The memory store is refused.
 *
 * Metrics: the primary's `/metrics` asks every worker for its metrics over the cluster IPC
 * channel and answers with their sum (counters and histograms add up; process metrics are
 * aggregated the way prom-client defines), plus what workers that died had counted
 * (./telemetry/worker-metrics.ts: counters never go down across a worker's death) and the
 * primary's own `fencegate_build_info`, `fencegate_store_up`, `fencegate_config_reloads_total`
 * and `fencegate_worker_restarts_total`. The aggregate is in the Prometheus text format (no
 * exemplars). `/readyz` checks the primary's own store connection, and answers 503 while no
 * worker listens.
 *
 * SIGHUP to the primary: it checks the config file itself (a refusal is logged and counted once,
 * there) and, when the file can be applied, applies its admin settings and sends SIGHUP on to
 * every worker, which reloads the same way a single process does.
 */
import cluster, { type Worker } from 'node:cluster'
import type { Server } from 'node:http'
import { createServer as createHttpsServer } from 'node:https'
import { createAdaptorServer } from '@hono/node-server'
import { Counter, Registry, type Metric } from 'prom-client'
import type { Config } from './config/schema.js'
import { openGuardedStore, StateWatch, type RiskRefused } from './store/index.js'
import { createAdmin, exposedAdmin } from './admin.js'
import { nextConfig, refuseReload, type ReloadResult } from './reload.js'
import { listenerTls, prepareRotation, recordListenerExpiry } from './tls/listeners.js'
import { TlsFilesError } from './tls/material.js'
import { recordUpstreamExpiry, routesTls, type UpstreamTls } from './tls/upstream.js'
import { recordStoreExpiry, storeTlsMaterial } from './tls/store.js'
import { createMetrics, type Metrics } from './telemetry/metrics.js'
import type { Logger } from './log.js'
import { listen, startGateway, type Running } from './server.js'
import { VERSION } from './version.js'
import { AuditQueue } from './audit/queue.js'
import { ClusterMetrics, serveWorkerMetrics } from './telemetry/worker-metrics.js'

const LISTENING = 'fencegate:listening'
/** Metrics that describe a process rather than add up over workers: the primary reports them. */
const PRIMARY_ONLY = new Set(['fencegate_build_info', 'fencegate_store_up', 'fencegate_config_reloads_total', 'fencegate_tls_certificate_expiry_seconds'])
/** Why a worker exited, the `reason` label of `fencegate_worker_restarts_total`. */
export const WORKER_EXITS = ['signal', 'error', 'exit'] as const
const exitReason = (code: number | null, signal: string | null): typeof WORKER_EXITS[number] => signal ? 'signal' : code ? 'error' : 'exit'

/** Why `--workers n` cannot run with this config, or undefined when it can. */
export function workersRefusal(config: Config, workers: number): string | undefined {
  if (workers > 1 && config.store.kind === 'memory') {
    return `the memory store cannot be shared, so it cannot run with --workers ${workers}: every worker process would keep its own high-water marks and idempotency records, so a stale token or a repeated key could pass on another worker. Use store.kind sqlite (one host), redis or postgres, or run a single worker.`
  }
  return undefined
}

/** In a worker: starts the proxy listener only, and lets the primary collect this process's metrics. */
export async function startWorker(config: Config, log: Logger, configFile?: string): Promise<Running> {
  const running = await startGateway(config, log, { admin: false, configFile })
  const shared = new Registry()
  for (const m of running.metrics.registry.getMetricsAsArray()) if (!PRIMARY_ONLY.has(m.name)) shared.registerMetric(m as unknown as Metric)
  const snapshots = serveWorkerMetrics(shared, running.metrics.activity)
  process.send?.({ type: LISTENING, url: running.url })
  // the last counts reach the primary before the process exits
  return { ...running, close: async () => { await running.close(); await snapshots.flush() } }
}

/**
 * In the primary: forks `workers` workers, waits until each listens, then starts the admin
 * listener with aggregated metrics.
 * @throws StoreError when the primary cannot open the store; RiskRefused when the store's settings
 *   hold a blocking risk (./store/doctor/inspect.ts); Error when a worker exits before it listens
 */
export async function startPrimary(config: Config, workers: number, log: Logger, configFile?: string, onRefused?: (e: RiskRefused) => void): Promise<Running> {
  const metrics = createMetrics(VERSION)
  log.setLevel?.(config.log.level)
  // the store's settings are checked here, once, before any worker starts (they do not check)
  const opened = await openGuardedStore(config, log, metrics)
  const { store } = opened
  let accepting = true
  let admin: Server | undefined
  const alive = new Set<Worker>()
  const serving = new Set<Worker>()
  const workerMetrics = new ClusterMetrics()
  const restarts = new Counter({ name: 'fencegate_worker_restarts_total', help: 'Worker processes (--workers) that exited while the gateway ran and were started again, by why: signal (killed: SIGKILL, the OOM killer), error (a non-zero exit code), exit (exit code 0).', labelNames: ['reason'] as const, registers: [] })
  for (const reason of WORKER_EXITS) restarts.inc({ reason }, 0)
  const start = () => fork(alive, serving, workerMetrics)
  // the primary only watches for /readyz; each worker runs its own watch and fails closed
  const watch = new StateWatch(store, config.store.onStateLoss, metrics, log)
  try {
    await watch.start(60_000)
    const urls = await Promise.all(Array.from({ length: workers }, start))
    const own = new Registry()
    for (const name of PRIMARY_ONLY) own.registerMetric(metrics.registry.getSingleMetric(name)!)
    own.registerMetric(restarts)
    const clusterMetrics: Metrics = {
      ...metrics,
      expose: async () => {
        const [workersText, ownText] = await Promise.all([workerMetrics.collect(alive).then((r) => r.metrics()), own.metrics()])
        return { body: `${workersText.trimEnd()}\n${ownText}`, contentType: Registry.PROMETHEUS_CONTENT_TYPE }
      },
    }
    const adminApp = (c: Config) => createAdmin({ token: c.admin.token, store, metrics: clusterMetrics, accepting: () => accepting && serving.size > 0, config: c, watch, storeSettings: opened.settings })
    let adminFetch = adminApp(config).fetch
    // the workers serve the proxy listener's TLS; the primary reads its files too, for the expiry gauge
    const adminTls = listenerTls(config, 'admin')
    admin = createAdaptorServer({ fetch: (req, env) => adminFetch(req, env), ...(adminTls ? { createServer: createHttpsServer, serverOptions: adminTls.options } : {}) }) as Server
    recordListenerExpiry(metrics, 'proxy', listenerTls(config, 'proxy'))
    recordListenerExpiry(metrics, 'admin', adminTls)
    // the certificates the workers present to the upstreams and the store, for the gauge
    const presented = (c: Config, ups: (UpstreamTls | undefined)[]) => c.routes.forEach((r, i) => recordUpstreamExpiry(metrics, r.name, ups[i]))
    presented(config, routesTls(config))
    recordStoreExpiry(metrics, config.store, storeTlsMaterial(config.store))
    const adminUrl = await listen(admin, config.admin.listen)
    const exposed = exposedAdmin(config)
    if (exposed) log.warn(exposed, { admin: config.admin.listen })
    let running = config
    const reload = async (next?: Config): Promise<ReloadResult> => {
      const checked = nextConfig(configFile, running, metrics, log, next)
      if ('refused' in checked) return checked.refused
      try {
        const proxyTls = listenerTls(checked.config, 'proxy')
        const ups = routesTls(checked.config)
        prepareRotation(checked.config, { admin: adminTls && admin }, metrics)()
        recordListenerExpiry(metrics, 'proxy', proxyTls)
        for (const r of running.routes) if (!checked.config.routes.some((n) => n.name === r.name)) recordUpstreamExpiry(metrics, r.name, undefined)
        presented(checked.config, ups)
      } catch (e) {
        if (e instanceof TlsFilesError) return refuseReload(configFile, metrics, log, 'a TLS file cannot be used', e.problems.map((p) => `${p.path}: ${p.message}`))
        throw e
      }
      running = checked.config
      adminFetch = adminApp(running).fetch
      log.setLevel?.(running.log.level)
      metrics.configReloads.inc({ result: 'applied' })
      for (const w of alive) if (!w.isDead()) w.process.kill('SIGHUP')
      log.info('config reloaded; SIGHUP sent on to the workers', { file: configFile, routes: running.routes.length, workers: alive.size })
      return { applied: true, routes: running.routes.length }
    }

    // a worker that dies is replaced (after a pause, so a crash loop does not spin)
    cluster.on('exit', (worker, code, signal) => {
      alive.delete(worker)
      serving.delete(worker)
      workerMetrics.exited(worker)
      if (!accepting) return
      const reason = exitReason(code, signal)
      restarts.inc({ reason })
      log.error('worker exited; starting a new one', { pid: worker.process.pid, code, signal, reason, serving: serving.size })
      setTimeout(() => { if (accepting) start().catch((e) => log.error('worker did not start', { error: (e as Error).message })) }, 1000).unref()
    })

    let closing: Promise<void> | undefined
    const close = () => (closing ??= (async () => {
      accepting = false
      const grace = config.shutdown.grace + 2000
      await Promise.all([...alive].map((w) => new Promise<void>((resolve) => {
        if (w.isDead()) return resolve()
        const kill = setTimeout(() => w.process.kill('SIGKILL'), grace)
        w.once('exit', () => { clearTimeout(kill); resolve() })
        w.process.kill('SIGTERM')
      })))
      admin!.closeAllConnections()
      await new Promise<void>((r) => admin!.close(() => r()))
      watch.stop()
      await store.close().catch(() => {})
    })())
    // a store that did not answer at start-up: its settings are read once it does, as a lone gateway's are
    opened.checkWhenConnected(async (e) => {
      log.error(`the store's settings refuse this gateway, which stops: ${e.message}`, { store: config.store.kind, refused: e.findings.map((f) => f.id).join(', ') })
      await close()
      onRefused?.(e)
    })
    // the workers log the attempts; the primary's queue is there for the Running interface
    return { url: urls[0], adminUrl, metrics, audit: new AuditQueue(store.audit), close, reload }
  } catch (e) {
    accepting = false
    for (const w of alive) w.process.kill('SIGKILL')
    admin?.close()
    watch.stop()
    await store.close().catch(() => {})
    throw e
  }
}

/**
 * Forks one worker, in `alive` from now and in `serving` once it listens; resolves with its proxy
 * URL then, rejects when it exits first.
 */
function fork(alive: Set<Worker>, serving: Set<Worker>, metrics: ClusterMetrics): Promise<string> {
  const worker = cluster.fork()
  alive.add(worker)
  metrics.watch(worker)
  // a write to a dead worker's channel (EPIPE) is that worker's exit, seen through 'exit'
  worker.on('error', () => {})
  return new Promise((resolve, reject) => {
    const onMessage = (m: { type?: string; url?: string }) => {
      if (m?.type !== LISTENING) return
      worker.off('exit', onExit)
      worker.off('message', onMessage)
      serving.add(worker)
      resolve(m.url!)
    }
    const onExit = (code: number | null) => {
      worker.off('message', onMessage)
      reject(Object.assign(new Error(`a worker exited with code ${code} before it listened`), { exitCode: code }))
    }
    worker.on('message', onMessage)
    worker.once('exit', onExit)
  })
}
