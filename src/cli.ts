#!/usr/bin/env node
/**
 * fencegate [start] [--config PATH] [--with-sample] [--workers N]   run the gateway (N processes on one port)
 * fencegate check-config [--config PATH]              validate a config: exit 0, or 2 with one line per problem
 * fencegate migrate [--config PATH]                   create or update the store's schema (postgres)
 * fencegate audit [--config PATH] [--since 1h] [--route NAME] [--json]   the exactly-once report (contract §8)
 * fencegate audit [--config PATH] (--key-hash H | --key K [--scope S] --route NAME | --resource R)   one key's or resource's timeline
 * fencegate resolve [--config PATH] --route NAME (--key KEY [--scope S] | --key-hash H) --as completed|failed   settle an unknown outcome
 * fencegate unknown [--config PATH] [--route NAME] [--json]   list the unknown outcomes to settle
 * fencegate store accept-loss [--config PATH]         accept that the store lost its state; gateways serve again
 *
 * The config comes from --config, else $FENCEGATE_CONFIG, else ./config/fencegate.yaml.
 * Exit codes: 0 ok, 1 runtime failure, 2 bad config or usage.
 */
// first: starts tracing when OTEL_* asks for it, before the gateway serves anything
import { tracing } from './telemetry/bootstrap.js'
import { parseArgs } from 'node:util'
import { existsSync } from 'node:fs'
import { loadConfig, ConfigError, type ConfigProblem, formatProblem } from './config/load.js'
import { StoreError } from './store/types.js'
import { startGateway } from './server.js'
import cluster from 'node:cluster'
import { startPrimary, startWorker, workersRefusal } from './cluster.js'
import { migrateStore, openStore } from './store/index.js'
import { createLogger } from './log.js'
import { VERSION } from './version.js'
import { auditCommand, resolveCommand, unknownCommand } from './audit/cli.js'

const USAGE = `usage: fencegate [start] [--config PATH] [--with-sample] [--workers N]
       fencegate check-config [--config PATH]
       fencegate migrate [--config PATH]
       fencegate audit [--config PATH] [--since 1h] [--route NAME] [--json]
       fencegate audit [--config PATH] (--key-hash H | --key K [--scope S] --route NAME | --resource R) [--since 7d] [--json]
       fencegate resolve [--config PATH] --route NAME (--key KEY [--scope S] | --key-hash H) --as completed|failed
       fencegate unknown [--config PATH] [--route NAME] [--json]
       fencegate store accept-loss [--config PATH]
       fencegate --version`

function fail(code: number, lines: string[]): never {
  for (const l of lines) process.stderr.write(`${l}\n`)
  process.exit(code)
}

async function main(argv: string[]): Promise<void> {
  let parsed
  try {
    parsed = parseArgs({ args: argv, allowPositionals: true, options: {
      config: { type: 'string', short: 'c' },
      'with-sample': { type: 'boolean' },
      workers: { type: 'string', short: 'w' },
      version: { type: 'boolean' },
      help: { type: 'boolean', short: 'h' },
      since: { type: 'string' },
      route: { type: 'string' },
      json: { type: 'boolean' },
      key: { type: 'string' },
      scope: { type: 'string' },
      as: { type: 'string' },
      'key-hash': { type: 'string' },
      resource: { type: 'string' },
    } })
  } catch (e) {
    fail(2, [(e as Error).message, USAGE])
  }
  const { values, positionals } = parsed
  if (values.version) { process.stdout.write(`fencegate ${VERSION}\n`); return }
  if (values.help) { process.stdout.write(`${USAGE}\n`); return }
  const command = positionals[0] === 'store' && positionals[1] === 'accept-loss' ? 'accept-loss' : positionals[0] ?? 'start'
  const words = command === 'accept-loss' ? 2 : 1
  if (positionals.length > words || !['start', 'check-config', 'migrate', 'audit', 'resolve', 'unknown', 'accept-loss'].includes(command)) fail(2, [`unknown command: ${positionals.join(' ')}`, USAGE])
  const file = values.config ?? process.env.FENCEGATE_CONFIG ?? (existsSync('config/fencegate.yaml') ? 'config/fencegate.yaml' : undefined)
  if (!file) fail(2, ['no config: pass --config PATH or set FENCEGATE_CONFIG', USAGE])

  let config
  try {
    config = loadConfig(file)
  } catch (e) {
    if (e instanceof ConfigError) fail(2, e.problems.map((p) => formatProblem(file, p)))
    throw e
  }
  if (command === 'check-config') { process.stdout.write(`${file}: ok (${config.routes.length} route${config.routes.length === 1 ? '' : 's'})\n`); return }
  if (command === 'audit' || command === 'resolve' || command === 'unknown') {
    const r = await (command === 'audit' ? auditCommand : command === 'resolve' ? resolveCommand : unknownCommand)(config, values)
    if (r.stdout) process.stdout.write(r.stdout)
    if (r.code !== 0) fail(r.code, r.stderr ?? [])
    return
  }
  if (command === 'accept-loss') {
    try {
      const store = await openStore(config.store)
      const epoch = await store.acceptLoss()
      await store.close()
      process.stdout.write(`${file}: store state accepted as it is now (epoch ${epoch}); running gateways serve again within a second\n`)
    } catch (e) {
      fail(e instanceof StoreError ? 2 : 1, [formatProblem(file, { path: 'store', message: (e as Error).message })])
    }
    return
  }
  if (command === 'migrate') {
    try {
      process.stdout.write(`${file}: ${await migrateStore(config.store)}\n`)
    } catch (e) {
      fail(e instanceof StoreError ? 2 : 1, [formatProblem(file, { path: 'store', message: (e as Error).message })])
    }
    return
  }
  const workers = Number(values.workers ?? 1)
  if (!/^\d+$/.test(values.workers ?? '1') || workers < 1 || workers > 1024) fail(2, ['--workers must be a whole number from 1 to 1024', USAGE])
  const refusal = workersRefusal(config, workers)
  if (refusal) fail(2, [formatProblem(file, { path: 'store.kind', message: refusal })])

  const log = createLogger()
  let sample: { url: string; close(): Promise<void> } | undefined
  if (values['with-sample'] && !cluster.isWorker) {
    const { startPayments } = await import('../examples/payments/server.js')
    const up = new URL(config.routes[0].upstream.url)
    try {
      sample = await startPayments(Number(up.port || 80), up.hostname)
    } catch (e) {
      fail(2, [`${file}: routes[0].upstream.url: cannot start the sample payments service on ${up.host} (${(e as NodeJS.ErrnoException).code ?? (e as Error).message})`])
    }
  }
  let running
  try {
    running = await (cluster.isWorker ? startWorker(config, log) : workers > 1 ? startPrimary(config, workers, log) : startGateway(config, log))
  } catch (e) {
    await sample?.close()
    const storeProblem: ConfigProblem = { path: 'store', message: `store unreachable at start-up: ${(e as Error).message}` }
    if (e instanceof StoreError) fail(2, [formatProblem(file, storeProblem)])
    const err = e as NodeJS.ErrnoException
    if (err.code === 'EADDRINUSE' || err.code === 'EADDRNOTAVAIL' || err.code === 'EACCES') fail(2, [`${file}: listen: cannot listen (${err.code}): ${err.message}`])
    const workerExit = (e as { exitCode?: number }).exitCode // a worker that could not start said why on stderr
    if (workerExit !== undefined) fail(workerExit || 1, [`fencegate: ${err.message}`])
    throw e
  }
  if (sample) process.stdout.write(`sample payments service on ${sample.url}\n`)
  if (!cluster.isWorker) process.stdout.write(`fencegate ${VERSION} on ${running.url} (admin ${running.adminUrl}, store ${config.store.kind}${workers > 1 ? `, ${workers} workers` : ''})\n`)
  log.info('started', { url: running.url, admin: running.adminUrl, store: config.store.kind, routes: config.routes.length, ...(workers > 1 ? { workers, worker: cluster.worker?.id ?? 'primary' } : {}) })
  const stop = (signal: string) => {
    log.info('stopping', { signal })
    running.close().then(() => sample?.close()).then(() => tracing?.shutdown()).then(() => process.exit(0), () => process.exit(1))
  }
  process.once('SIGTERM', () => stop('SIGTERM'))
  process.once('SIGINT', () => stop('SIGINT'))
}

main(process.argv.slice(2)).catch((e) => fail(1, [`fencegate: ${(e as Error).message}`]))
