#!/usr/bin/env node
/**
 * The `fencegate` command. Every command's usage is in COMMANDS below (`fencegate help
 * COMMAND`, `fencegate COMMAND --help`); the config comes from --config, else
 * $FENCEGATE_CONFIG, else ./config/fencegate.yaml.
 *
 * Exit codes, the same for every command: 0 ok; 1 runtime failure (the store cannot answer, a
 * record cannot be resolved, an unexpected error); 2 usage or config mistake (a misspelt
 * command or flag, a config that does not validate, a port that cannot be had, a SQLite path
 * that cannot be opened). With --json, an error is printed as one JSON object on stdout:
 * {"error": {"type": "usage" | "config" | "runtime", "message", "problems"?}}.
 */
// first: starts tracing when OTEL_* asks for it, before the gateway serves anything
import { tracing } from './telemetry/bootstrap.js'
import { parseArgs, type ParseArgsConfig } from 'node:util'
import { existsSync } from 'node:fs'
import { resolve } from 'node:path'
import { pathToFileURL } from 'node:url'
import cluster from 'node:cluster'
import { loadConfig, ConfigError, type ConfigProblem, formatProblem } from './config/load.js'
import type { Config } from './config/schema.js'
import { StoreError } from './store/types.js'
import { startGateway, type Running } from './server.js'
import { startPrimary, startWorker, workersRefusal } from './cluster.js'
import { migrateStore, openStore } from './store/index.js'
import { createLogger } from './log.js'
import { VERSION } from './version.js'
import { acceptLossCommand, auditCommand, doctorCommand, leasesCommand, resolveCommand, unknownCommand, type CommandResult } from './audit/cli.js'
import { RiskRefused } from './store/doctor.js'
import { didYouMean } from './suggest.js'

type Options = NonNullable<ParseArgsConfig['options']>

/** Every flag of every command; each command admits some of them. */
const FLAGS = {
  config: { type: 'string', short: 'c' },
  'with-sample': { type: 'string' },
  workers: { type: 'string', short: 'w' },
  connect: { type: 'boolean' },
  since: { type: 'string' },
  route: { type: 'string' },
  json: { type: 'boolean' },
  key: { type: 'string' },
  scope: { type: 'string' },
  as: { type: 'string' },
  'key-hash': { type: 'string' },
  resource: { type: 'string' },
  reason: { type: 'string' },
  help: { type: 'boolean', short: 'h' },
  version: { type: 'boolean', short: 'v' },
} as const satisfies Options

type Flag = keyof typeof FLAGS
type Values = { [K in Flag]?: (typeof FLAGS)[K]['type'] extends 'string' ? string : boolean }

interface Command {
  summary: string
  usage: string[]
  flags: Flag[]
  /** what the flags mean and what it prints, for `help COMMAND` */
  details: string[]
}

const CONFIG_LINE = '--config PATH, -c   the config file (default: $FENCEGATE_CONFIG, else ./config/fencegate.yaml)'
const JSON_LINE = '--json              print the result, and any error, as JSON on stdout'

const COMMANDS: Record<string, Command> = {
  start: {
    summary: 'run the gateway (the default command)',
    usage: ['fencegate [start] [--config PATH] [--with-sample MODULE] [--workers N]'],
    flags: ['config', 'with-sample', 'workers'],
    details: [
      CONFIG_LINE,
      '--with-sample MODULE  also start the sample service MODULE exports as startPayments(port, host) on',
      '                      the first route\'s upstream address; npm start passes the bundled one,',
      '                      dist/examples/payments/server.js',
      '--workers N, -w N   N worker processes (1-1024) sharing the proxy port; not with store.kind memory',
      '',
      'Signals: SIGTERM or SIGINT stop gracefully (requests in flight finish, up to shutdown.grace);',
      'SIGHUP reloads the config file (requests in flight finish under the config they started with;',
      'a file that does not validate, or changes listen, admin.listen, store, audit or server, is refused',
      'and the running config kept). A redis or postgres store that does not answer at start-up does not',
      'stop the start: /readyz answers 503 and routes with fencing or idempotency 503 until it answers.',
    ],
  },
  'check-config': {
    summary: 'validate a config: exit 0, or 2 with one line per problem',
    usage: ['fencegate check-config [--config PATH] [--connect] [--json]'],
    flags: ['config', 'connect', 'json'],
    details: [
      CONFIG_LINE,
      '--connect           also open the store the way start-up does and say whether it answers (exit 1 if not)',
      JSON_LINE,
      '',
      'Every problem is reported in one pass, one line each: FILE:LINE: YAML.PATH: what is wrong.',
    ],
  },
  migrate: {
    summary: 'create or update the store\'s schema (postgres)',
    usage: ['fencegate migrate [--config PATH]'],
    flags: ['config'],
    details: [CONFIG_LINE, '', 'The other stores create their layout when opened; for them this only checks that the store opens.'],
  },
  audit: {
    summary: 'the exactly-once report, or one key\'s or resource\'s timeline',
    usage: [
      'fencegate audit [--config PATH] [--since 1h] [--route NAME] [--json]',
      'fencegate audit [--config PATH] (--key-hash H | --key K [--scope S] --route NAME | --resource R) [--since 7d] [--json]',
    ],
    flags: ['config', 'since', 'route', 'json', 'key', 'scope', 'key-hash', 'resource'],
    details: [
      CONFIG_LINE,
      '--since D           a duration back from now (30m, 24h, 7d) or an RFC 3339 time (default 24h; a timeline: the retention)',
      '--route NAME        only this route',
      '--key-hash H, --key K [--scope S], --resource R   follow one key or fencing resource: every attempt, oldest first',
      JSON_LINE,
    ],
  },
  resolve: {
    summary: 'settle an unknown outcome',
    usage: ['fencegate resolve [--config PATH] --route NAME (--key KEY [--scope S] | --key-hash H) --as completed|failed [--reason TEXT] [--json]'],
    flags: ['config', 'route', 'key', 'scope', 'key-hash', 'as', 'reason', 'json'],
    details: [
      CONFIG_LINE,
      '--as failed         the effect did not happen: the key is released and the next request is forwarded',
      '--as completed      the effect happened: later requests with the key get 409 response-not-stored',
      '--reason TEXT       why, kept in the attempt log with who ran it (the audit report lists it)',
      JSON_LINE,
    ],
  },
  unknown: {
    summary: 'list the unknown outcomes to settle',
    usage: ['fencegate unknown [--config PATH] [--route NAME] [--json]'],
    flags: ['config', 'route', 'json'],
    details: [CONFIG_LINE, '--route NAME        only this route', JSON_LINE],
  },
  leases: {
    summary: 'effect durations, stale writers\' lateness and lease advice per fenced route',
    usage: ['fencegate leases [--config PATH] [--since 24h] [--route NAME] [--json]'],
    flags: ['config', 'since', 'route', 'json'],
    details: [
      CONFIG_LINE,
      '--since D           a duration back from now (30m, 24h, 7d) or an RFC 3339 time (default 24h)',
      '--route NAME        only this route',
      JSON_LINE,
      '',
      'From the attempt log: how long the upstream took to apply each fenced write (p50, p99, p99.9, max),',
      'how often leases changed hands, how late each stale write came after its successor took over, and',
      'a minimum lease and renewal interval with the numbers behind them (docs/operate.md, "Sizing leases").',
    ],
  },
  doctor: {
    summary: 'the store\'s real durability settings and what they mean for the guarantees',
    usage: ['fencegate doctor [--config PATH] [--json]'],
    flags: ['config', 'json'],
    details: [
      CONFIG_LINE,
      JSON_LINE,
      '',
      'Reads the settings from the store itself (redis: appendonly, appendfsync, save, maxmemory-policy,',
      'role and replicas, cluster; postgres: synchronous_commit, fsync, synchronous standbys, standby or',
      'primary; sqlite: journal_mode, synchronous, the filesystem) and prints each as ok or risk, with its',
      'consequence. Exit 1 when the store cannot be read, or when a risk store.acceptRisks does not name',
      'would stop the gateway from starting (an evicting maxmemory-policy).',
    ],
  },
  'store accept-loss': {
    summary: 'accept that the store lost its state; gateways serve again',
    usage: ['fencegate store accept-loss [--config PATH] [--reason TEXT] [--json]'],
    flags: ['config', 'reason', 'json'],
    details: [
      CONFIG_LINE,
      '--reason TEXT       why, kept in the attempt log with who ran it (the audit report lists it)',
      JSON_LINE,
    ],
  },
  help: {
    summary: 'print the usage of every command, or of one',
    usage: ['fencegate help [COMMAND]'],
    flags: [],
    details: [],
  },
}
const STORE_SUBCOMMANDS = Object.keys(COMMANDS).filter((c) => c.startsWith('store ')).map((c) => c.slice(6))

const EXIT_CODES = 'exit codes: 0 ok; 1 runtime failure (the store cannot answer, a record cannot be resolved); 2 usage or config mistake'

function overview(): string {
  const w = Math.max(...Object.keys(COMMANDS).map((c) => c.length))
  return [
    `fencegate ${VERSION}: a reverse proxy that enforces fencing tokens and idempotency keys`,
    '',
    'usage: fencegate COMMAND [flags]',
    '',
    'commands:',
    ...Object.entries(COMMANDS).map(([name, c]) => `  ${name.padEnd(w)}  ${c.summary}`),
    '',
    'fencegate help COMMAND, or fencegate COMMAND --help, for its flags. fencegate --version (-v).',
    EXIT_CODES,
  ].join('\n')
}

function commandHelp(name: string): string {
  const c = COMMANDS[name]
  return [`fencegate ${name}: ${c.summary}`, '', ...c.usage.map((u, i) => `${i ? '       ' : 'usage: '}${u}`), ...(c.details.length ? ['', ...c.details] : []), '', EXIT_CODES].join('\n')
}

/** An error the command ends with: its exit code and lines, printed as JSON with --json. */
class Exit extends Error {
  constructor(readonly code: number, readonly type: 'usage' | 'config' | 'runtime', readonly lines: string[], readonly problems?: ConfigProblem[], readonly file?: string) {
    super(lines[0] ?? '')
  }
}

const usageError = (message: string, hint: string) => new Exit(2, 'usage', [`fencegate: ${message}`, hint])

let jsonOutput = false

function finish(e: Exit): never {
  if (jsonOutput) {
    const error: Record<string, unknown> = { type: e.type, message: e.lines.filter(Boolean).join('\n').replace(/^fencegate: /, '') }
    if (e.problems) error.problems = e.problems.map((p) => ({ file: e.file, line: p.line, column: p.column, path: p.path, message: p.message }))
    process.stdout.write(`${JSON.stringify({ error, exitCode: e.code })}\n`)
  } else {
    for (const l of e.lines) if (l) process.stderr.write(`${l}\n`)
  }
  process.exit(e.code)
}

/** Splits argv into the command's name and the rest; throws Exit for an unknown command. */
function commandOf(argv: string[]): { name: string; rest: string[] } {
  // positionals as a loose parse sees them (so a flag's value is not taken for a command)
  const loose = parseArgs({ args: argv, options: FLAGS, strict: false, allowPositionals: true, tokens: true })
  const positionals = loose.tokens.filter((t) => t.kind === 'positional')
  const first = positionals[0]
  if (!first) return { name: 'start', rest: argv }
  // "--confg x.yaml": x.yaml is the value of a misspelt flag, not a command; the strict parse names the flag
  const before = loose.tokens.find((t) => t.index === first.index - 1)
  if (!COMMANDS[first.value] && first.value !== 'store' && before?.kind === 'option' && !(before.name in FLAGS) && before.inlineValue === undefined) return { name: 'start', rest: argv }
  const without = (...idx: number[]) => argv.filter((_, i) => !idx.includes(i))
  if (first.value === 'store') {
    const sub = positionals[1]
    if (!sub) return { name: 'store', rest: without(first.index) }
    if (!STORE_SUBCOMMANDS.includes(sub.value)) {
      throw usageError(`unknown store command "${sub.value}"${didYouMean(sub.value, STORE_SUBCOMMANDS)}`, `store commands: ${STORE_SUBCOMMANDS.join(', ')} (fencegate help store ${STORE_SUBCOMMANDS[0]})`)
    }
    return { name: `store ${sub.value}`, rest: without(first.index, sub.index) }
  }
  if (COMMANDS[first.value]) return { name: first.value, rest: without(first.index) }
  const names = Object.keys(COMMANDS).filter((c) => !c.includes(' ')).concat(['store'])
  throw usageError(`unknown command "${first.value}"${didYouMean(first.value, names)}`, 'fencegate help lists the commands')
}

/** Parses a command's flags strictly; a flag the command does not take is a usage error with a suggestion. */
function flagsOf(name: string, rest: string[]): { values: Values; positionals: string[] } {
  const allowed: Flag[] = [...COMMANDS[name].flags, 'help', 'version']
  const options = Object.fromEntries(allowed.map((f) => [f, FLAGS[f]])) as Options
  try {
    const r = parseArgs({ args: rest, options, allowPositionals: name === 'help', strict: true })
    return { values: r.values as Values, positionals: r.positionals }
  } catch (e) {
    const err = e as Error & { code?: string }
    const hint = `usage: ${COMMANDS[name].usage.join('\n       ')}\n(fencegate help ${name})`
    const unknown = /^Unknown option '(-{1,2})([^']+)'/.exec(err.message)
    if (unknown) {
      const flag = unknown[2]
      const near = didYouMean(flag, allowed, (s) => `--${s}`)
      const elsewhere = flag in FLAGS && !near ? `; --${flag} is a flag of ${Object.entries(COMMANDS).filter(([, c]) => c.flags.includes(flag as Flag)).map(([n]) => n).join(', ')}` : ''
      throw usageError(`${name} has no flag ${unknown[1]}${flag}${near}${elsewhere}`, hint)
    }
    const positional = /^Unexpected argument '([^']+)'/.exec(err.message)
    if (positional) throw usageError(`${name} takes no argument "${positional[1]}"`, hint)
    const missing = /^Option '(-\w, )?(--[\w-]+) <value>' argument missing/.exec(err.message)
    if (missing) throw usageError(`${missing[2]} needs ${valueOf(missing[2])}`, hint)
    const ambiguous = /^Option '(-\w, )?(--[\w-]+)' argument is ambiguous/.exec(err.message)
    if (ambiguous) throw usageError(`${ambiguous[2]} needs ${valueOf(ambiguous[2])}, and what follows it is another flag (a value that starts with "-" is written ${ambiguous[2]}=-VALUE)`, hint)
    throw usageError(err.message, hint)
  }
}

/** What a flag's value is, for the message when it is missing. */
const valueOf = (flag: string): string =>
  flag === '--with-sample' ? 'the sample\'s module (the bundled one: --with-sample dist/examples/payments/server.js)' : 'a value'

function configFile(values: Values): string {
  const file = values.config ?? process.env.FENCEGATE_CONFIG ?? (existsSync('config/fencegate.yaml') ? 'config/fencegate.yaml' : undefined)
  if (!file) throw new Exit(2, 'usage', ['fencegate: no config: pass --config PATH or set FENCEGATE_CONFIG'])
  return file
}

function readConfig(file: string): Config {
  try {
    return loadConfig(file)
  } catch (e) {
    if (e instanceof ConfigError) throw new Exit(2, 'config', e.problems.map((p) => formatProblem(file, p)), e.problems, file)
    throw e
  }
}

/** Prints a command's result, or ends with its exit code. */
function done(r: CommandResult): void {
  if (r.code !== 0) throw new Exit(r.code, r.code === 2 ? 'usage' : 'runtime', r.stderr ?? [])
  if (r.stdout) process.stdout.write(r.stdout)
}

/** `check-config --connect`: opens the store as start-up does, asks it for its markers, closes it. */
async function connectCheck(config: Config): Promise<{ store: string; epoch?: string }> {
  let store
  try {
    store = await openStore(config.store, config.audit)
  } catch (e) {
    throw new Exit(1, 'runtime', [`store: the ${config.store.kind} store cannot be opened: ${(e as Error).message}`])
  }
  try {
    await store.ping()
    const { epoch } = await store.markers()
    return { store: config.store.kind, epoch }
  } catch (e) {
    throw new Exit(1, 'runtime', [`store: the ${config.store.kind} store opened but does not answer: ${(e as Error).message}`])
  } finally {
    await store.close().catch(() => {})
  }
}

async function main(argv: string[]): Promise<void> {
  jsonOutput = argv.includes('--json')
  if (argv[0] === '-v' || argv[0] === '--version') { process.stdout.write(`fencegate ${VERSION}\n`); return }
  if (argv.length === 1 && (argv[0] === '-h' || argv[0] === '--help')) { process.stdout.write(`${overview()}\n`); return }
  const { name, rest } = commandOf(argv)
  if (name === 'store') {
    process.stdout.write(`fencegate store: commands on the store itself\n\n${STORE_SUBCOMMANDS.map((s) => `  fencegate store ${s.padEnd(12)} ${COMMANDS[`store ${s}`].summary}`).join('\n')}\n\nfencegate help store COMMAND for its flags.\n`)
    return
  }
  const { values, positionals } = flagsOf(name, rest)
  if (values.version) { process.stdout.write(`fencegate ${VERSION}\n`); return }
  if (name === 'help') {
    const topic = positionals.join(' ')
    if (!topic) { process.stdout.write(`${overview()}\n`); return }
    if (topic === 'store') return main(['store'])
    if (!COMMANDS[topic]) throw usageError(`no command "${topic}"${didYouMean(topic, Object.keys(COMMANDS))}`, 'fencegate help lists the commands')
    process.stdout.write(`${commandHelp(topic)}\n`)
    return
  }
  if (values.help) { process.stdout.write(`${commandHelp(name)}\n`); return }

  const file = configFile(values)
  const config = readConfig(file)
  switch (name) {
    case 'check-config': {
      const connected = values.connect ? await connectCheck(config) : undefined
      const routes = config.routes.length
      if (values.json) process.stdout.write(`${JSON.stringify({ file, ok: true, routes, ...(connected ? { store: { kind: connected.store, reachable: true, epoch: connected.epoch } } : {}) })}\n`)
      else process.stdout.write(`${file}: ok (${routes} route${routes === 1 ? '' : 's'}${connected ? `; the ${connected.store} store answers` : ''})\n`)
      return
    }
    case 'audit': return done(await auditCommand(config, values))
    case 'resolve': return done(await resolveCommand(config, values))
    case 'unknown': return done(await unknownCommand(config, values))
    case 'leases': return done(await leasesCommand(config, values))
    case 'doctor': {
      const r = await doctorCommand(config, values)
      if (r.stdout) process.stdout.write(r.stdout)
      if (r.code === 0) return
      // the report is out: a refusal says why on stderr (in --json the report's "refused" does)
      if (!r.stdout) throw new Exit(r.code, 'runtime', r.stderr ?? [])
      if (!values.json) for (const l of r.stderr ?? []) process.stderr.write(`${l}\n`)
      process.exitCode = r.code
      return
    }
    case 'store accept-loss': return done(await acceptLossCommand(config, values))
    case 'migrate': {
      try {
        process.stdout.write(`${file}: ${await migrateStore(config.store)}\n`)
      } catch (e) {
        throw new Exit(1, 'runtime', [formatProblem(file, { path: 'store', message: (e as Error).message })])
      }
      return
    }
    case 'start': return start(config, file, values)
  }
}

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

async function start(config: Config, file: string, values: Values): Promise<void> {
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

main(process.argv.slice(2)).catch((e) => {
  if (e instanceof Exit) finish(e)
  finish(new Exit(1, 'runtime', [`fencegate: ${(e as Error).message}`]))
})
