/**
 * Every command of `fencegate`: its flags, its usage lines and its help text. The parser
 * (args.ts) admits a command's flags from here; `fencegate help` prints from here.
 */
import type { ParseArgsConfig } from 'node:util'
import { VERSION } from '../version.js'

export type Options = NonNullable<ParseArgsConfig['options']>

/** Every flag of every command; each command admits some of them. */
export const FLAGS = {
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

export type Flag = keyof typeof FLAGS
/** The flags as parsed: a string flag's value, or true for a boolean one. */
export type Values = { [K in Flag]?: (typeof FLAGS)[K]['type'] extends 'string' ? string : boolean }

interface Command {
  summary: string
  usage: string[]
  flags: Flag[]
  /** what the flags mean and what it prints, for `help COMMAND` */
  details: string[]
}

const CONFIG_LINE = '--config PATH, -c   the config file (default: $FENCEGATE_CONFIG, else ./config/fencegate.yaml)'
const JSON_LINE = '--json              print the result, and any error, as JSON on stdout'

export const COMMANDS: Record<string, Command> = {
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
      'primary; sqlite: journal_mode, synchronous, the filesystem and its free space) and prints each',
      'as ok or risk, with its consequence. A loss note a gateway left in the store (it found the store',
      'gone back in time) is the risk state-loss: what was seen, when, by which gateway; `fencegate',
      'store accept-loss` clears it.',
      'Exit 1 when the store cannot be read, when a risk store.acceptRisks does not name would stop the',
      'gateway from starting (an evicting maxmemory-policy), or when the store holds a loss note.',
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
/** The words after `fencegate store` (accept-loss). */
export const STORE_SUBCOMMANDS = Object.keys(COMMANDS).filter((c) => c.startsWith('store ')).map((c) => c.slice(6))

const EXIT_CODES = 'exit codes: 0 ok; 1 runtime failure (the store cannot answer, a record cannot be resolved); 2 usage or config mistake'

/** `fencegate help`: every command with its summary. */
export function overview(): string {
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

/** `fencegate help COMMAND`: its usage lines, what its flags mean, the exit codes. */
export function commandHelp(name: string): string {
  const c = COMMANDS[name]
  return [`fencegate ${name}: ${c.summary}`, '', ...c.usage.map((u, i) => `${i ? '       ' : 'usage: '}${u}`), ...(c.details.length ? ['', ...c.details] : []), '', EXIT_CODES].join('\n')
}

/** `fencegate store`: the commands on the store itself. */
export const storeOverview = (): string =>
  `fencegate store: commands on the store itself\n\n${STORE_SUBCOMMANDS.map((s) => `  fencegate store ${s.padEnd(12)} ${COMMANDS[`store ${s}`].summary}`).join('\n')}\n\nfencegate help store COMMAND for its flags.`
