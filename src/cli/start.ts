/**
 * `fencegate start`: one gateway process, a --workers primary, or (forked by one) a worker;
 * with --with-sample the sample service beside it. SIGHUP reloads, SIGTERM and SIGINT stop.
 */
import { tracing } from '../telemetry/bootstrap.js'
import { resolve } from 'node:path'
import { pathToFileURL } from 'node:url'
import cluster from 'node:cluster'
import { formatProblem } from '../config/load.js'
import type { Config } from '../config/schema.js'
import { RiskRefused, StoreError } from '../store/index.js'
import { startGateway, type Running } from '../server.js'
import { startPrimary, startWorker, workersRefusal } from '../cluster.js'
import { TlsFilesError } from '../tls/material.js'
import { createLogger } from '../log.js'
import { VERSION } from '../version.js'
import { COMMANDS, type Values } from './commands.js'
import { Exit, usageError } from './exit.js'

/** What `--with-sample MODULE` must export: starts the sample service, resolves once it listens. */
type StartSample = (port: number, host: string) => Promise<{ url: string; close(): Promise<void> }>

/**
 * Loads the sample service `--with-sample` names: the gateway imports no example itself.
 * @param path a JS module, relative to the working directory
 * @throws Exit 2 (usage) when the module cannot be loaded or does not export startPayments
 */
async function loadSample(path: string): Promise<StartSample> {
  const hint = `usage: ${COMMANDS.start.usage[0]}\n(the bundled sample: --with-sample dist/examples/payments/server.js)`
  let mod: { startPayments?: unknown }
  try {
    mod = await import(pathToFileURL(resolve(path)).href)
  } catch (e) {
    throw usageError(`--with-sample: cannot load ${path}: ${(e as Error).message}`, hint)
  }
  if (typeof mod.startPayments !== 'function') throw usageError(`--with-sample: ${path} does not export a function startPayments(port, host)`, hint)
  return mod.startPayments as StartSample
}

/**
 * Starts the gateway as `values` ask and prints where it listens; resolves once it serves.
 * @throws Exit 2 (usage or config) for a bad --workers or --with-sample, a store whose settings
 *   or path refuse it, a port that cannot be had; Exit (runtime) when a worker could not start
 */
export async function start(config: Config, file: string, values: Values): Promise<void> {
  const workers = Number(values.workers ?? 1)
  if (!/^\d+$/.test(values.workers ?? '1') || workers < 1 || workers > 1024) throw usageError('--workers must be a whole number from 1 to 1024', `usage: ${COMMANDS.start.usage[0]}`)
  const refusal = workersRefusal(config, workers)
  if (refusal) throw new Exit(2, 'config', [formatProblem(file, { path: 'store.kind', message: refusal })])

  const log = createLogger(process.stderr, config.log.level)
  // SIGHUP from here on reloads (its default would end the process); one that comes while
  // starting is applied once started
  let running: Running | undefined
  let hupWhileStarting = false
  const hup = () => {
    if (!running) { hupWhileStarting = true; return }
    log.info('SIGHUP: reloading the config file', { file })
    running.reload().catch((e) => log.error('config reload failed', { error: (e as Error).message }))
  }
  process.on('SIGHUP', hup)

  let sample: { url: string; close(): Promise<void> } | undefined
  if (values['with-sample'] !== undefined && !cluster.isWorker) {
    const startPayments = await loadSample(values['with-sample'])
    const up = new URL(config.routes[0].upstream.url)
    try {
      sample = await startPayments(Number(up.port || 80), up.hostname)
    } catch (e) {
      throw new Exit(2, 'config', [`${file}: routes[0].upstream.url: cannot start the sample payments service on ${up.host} (${(e as NodeJS.ErrnoException).code ?? (e as Error).message})`])
    }
  }
  try {
    // a store that answers only after start-up and then refuses: the gateway has closed itself
    // Promise.resolve: without a sample there is nothing to close, and the exit must still come
    const onRefused = () => { Promise.resolve(sample?.close()).finally(() => process.exit(2)) }
    running = await (cluster.isWorker ? startWorker(config, log, file) : workers > 1 ? startPrimary(config, workers, log, file, onRefused) : startGateway(config, log, { configFile: file, onRefused }))
  } catch (e) {
    await sample?.close()
    if (e instanceof RiskRefused) throw new Exit(2, 'config', [formatProblem(file, { path: 'store', message: `the ${config.store.kind} store's own settings break a guarantee outright, so the gateway does not start: ${e.message} (fencegate doctor --config ${file} lists every finding)` })])
    // memory and sqlite: a store that cannot be opened is a path or setting in the config
    // a TLS file changed between the config's check and the listener's read
    if (e instanceof TlsFilesError) throw new Exit(2, 'config', e.problems.map((p) => formatProblem(file, { path: p.path, message: p.message })))
    if (e instanceof StoreError) throw new Exit(2, 'config', [formatProblem(file, { path: config.store.kind === 'sqlite' ? 'store.path' : 'store', message: `the ${config.store.kind} store cannot be opened: ${e.message}` })])
    const err = e as NodeJS.ErrnoException
    if (err.code === 'EADDRINUSE' || err.code === 'EADDRNOTAVAIL' || err.code === 'EACCES') throw new Exit(2, 'config', [`${file}: listen: cannot listen (${err.code}): ${err.message}`])
    const workerExit = (e as { exitCode?: number }).exitCode // a worker that could not start said why on stderr
    if (workerExit !== undefined) throw new Exit(workerExit || 1, 'runtime', [`fencegate: ${err.message}`])
    throw e
  }
  if (sample) process.stdout.write(`sample payments service on ${sample.url}\n`)
  if (!cluster.isWorker) process.stdout.write(`fencegate ${VERSION} on ${running.url} (admin ${running.adminUrl}, store ${config.store.kind}${workers > 1 ? `, ${workers} workers` : ''})\n`)
  log.info('started', { url: running.url, admin: running.adminUrl, store: config.store.kind, routes: config.routes.length, ...(workers > 1 ? { workers, worker: cluster.worker?.id ?? 'primary' } : {}) })
  if (hupWhileStarting) hup()
  const r = running
  const stop = (signal: string) => {
    log.info('stopping', { signal })
    r.close().then(() => sample?.close()).then(() => tracing?.shutdown()).then(() => process.exit(0), () => process.exit(1))
  }
  process.once('SIGTERM', () => stop('SIGTERM'))
  process.once('SIGINT', () => stop('SIGINT'))
}
