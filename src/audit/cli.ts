/**
 * `fencegate audit` and `fencegate resolve`: open the configured store (the gateway may be
 * running or not), do one thing, close it.
 *   fencegate audit   --config PATH [--since 1h] [--route NAME] [--json]
 *   fencegate audit   --config PATH (--key-hash H | --key K [--scope S] --route NAME | --resource R) [--since 7d] [--json]
 *   fencegate resolve --config PATH --route NAME (--key KEY [--scope S] | --key-hash H) --as completed|failed [--reason TEXT]
 *   fencegate store accept-loss --config PATH [--reason TEXT]
 *   fencegate unknown --config PATH [--route NAME] [--json]
 *   fencegate leases  --config PATH [--since 24h] [--route NAME] [--json]
 *   fencegate doctor  --config PATH [--json]
 * Exit codes: 0 done; 1 the store refused or the record could not be resolved; 2 usage or config.
 */
import { existsSync } from 'node:fs'
import type { Config } from '../config/schema.js'
import { configWarnings, formatWarning } from '../config/warnings.js'
import { acceptedLossFinding, describeNote, inspectStore, openStore, runningReport, StoreError, type AuditEntry, type DoctorReport, type Finding, type Store } from '../store/index.js'
import { Problem } from '../problems.js'
import { buildReport, formatReport, parseSince, DEFAULT_SINCE } from './report.js'
import { acceptStoreLoss, cliActor, resolveKey, type Resolved } from './resolve.js'
import { resolveViaAdmin } from './resolve-via-admin.js'
import { listUnknown, UNKNOWN_LIMIT } from './unknown.js'
import { buildTimeline, formatTimeline } from './timeline.js'
import { buildLeases } from './leases.js'
import { formatLeases } from './leases-format.js'
import { claimSentences } from './guarantees.js'

export interface AuditArgs { since?: string; route?: string; json?: boolean; key?: string; scope?: string; as?: string; 'key-hash'?: string; resource?: string; reason?: string }

/** The outcome of a command: the exit code and the lines for stdout and stderr. */
export interface CommandResult { code: number; stdout?: string; stderr?: string[] }

async function withStore<T>(config: Config, fn: (store: Store) => Promise<T>): Promise<T> {
  const store = await openStore(config.store, config.audit)
  try {
    return await fn(store)
  } finally {
    await store.close().catch(() => {})
  }
}

const memoryRefusal = (command: string): CommandResult => ({
  code: 2,
  stderr: [`store.kind memory keeps its attempt log and records inside the gateway process, so \`fencegate ${command}\` cannot reach them: use the admin API of the running gateway (${command === 'audit' ? 'GET /audit' : command === 'unknown' ? 'GET /unknown' : command === 'leases' ? 'GET /leases' : 'POST /resolve'}).`],
})

export async function auditCommand(config: Config, args: AuditArgs): Promise<CommandResult> {
  if (config.store.kind === 'memory') return memoryRefusal('audit')
  const now = Date.now()
  const following = args.key !== undefined || args['key-hash'] !== undefined || args.resource !== undefined
  // a timeline reaches back over the whole retention unless asked otherwise
  const since = args.since === undefined && following ? now - config.audit.retention : parseSince(args.since ?? DEFAULT_SINCE, now)
  if (since === undefined) return { code: 2, stderr: [`--since must be a duration back from now (30m, 1h, 7d) or an RFC 3339 time, not ${JSON.stringify(args.since)}`] }
  if (args.route !== undefined && !config.routes.some((r) => r.name === args.route)) {
    return { code: 2, stderr: [`--route: no route named ${JSON.stringify(args.route)} in the config (routes: ${config.routes.map((r) => r.name).join(', ')})`] }
  }
  if (following) {
    try {
      const t = await withStore(config, (store) => buildTimeline(config, store.audit, { route: args.route, key: args.key, scope: args.scope, keyHash: args['key-hash'], resource: args.resource, since }))
      return { code: 0, stdout: args.json ? `${JSON.stringify(t, null, 2)}\n` : `${formatTimeline(t)}\n` }
    } catch (e) {
      if (e instanceof Problem) return { code: 2, stderr: [`fencegate audit: ${e.detail}`] }
      if (e instanceof StoreError) return { code: 1, stderr: [`fencegate audit: the store cannot answer: ${e.message}`] }
      throw e
    }
  }
  try {
    const report = await withStore(config, async (store) => {
      // the claim names the store's real settings when they can be read
      const settings = await inspectStore(config.store, store).catch(() => undefined)
      return buildReport(config, store.audit, since, now, args.route, settings && claimSentences(settings))
    })
    return { code: 0, stdout: args.json ? `${JSON.stringify(report, null, 2)}\n` : `${formatReport(report)}\n` }
  } catch (e) {
    if (e instanceof StoreError) return { code: 1, stderr: [`fencegate audit: the store cannot answer: ${e.message}`] }
    throw e
  }
}

export async function resolveCommand(config: Config, args: AuditArgs): Promise<CommandResult> {
  if (config.store.kind === 'memory') return memoryRefusal('resolve')
  const missing = (['route', 'as'] as const).filter((k) => args[k] === undefined)
  if (args.key === undefined && args['key-hash'] === undefined) missing.push('key or --key-hash' as never)
  if (missing.length) return { code: 2, stderr: [`fencegate resolve needs ${missing.map((m) => `--${m}`).join(', ')}`] }
  const request = { route: args.route!, key: args.key, keyHash: args['key-hash'], scope: args.scope, as: args.as as 'completed' | 'failed', reason: args.reason, by: cliActor() }
  const done = (r: Resolved, how: string) => ({ code: 0, stdout: args.json ? `${JSON.stringify(r)}\n` : `route ${r.route}, key hash ${r.keyHash}: outcome was unknown (${r.previousReason}); resolved as ${r.resolution}: ${r.effect}\n${how}\n` })
  const via = await resolveViaAdmin(config, request)
  if (via.kind === 'resolved') return done(via.resolved, `(through the gateway at ${via.at}: counted in fencegate_unknown_outcomes_settled_total{by="operator"})`)
  if (via.kind === 'refused') return { code: via.status === 400 ? 2 : 1, stderr: [`fencegate resolve: ${via.detail}`] }
  try {
    const r = await withStore(config, (store) => resolveKey(config, store, request))
    return done(r, `(in the store directly: ${via.why}; no gateway's fencegate_unknown_outcomes_settled_total counts it, its attempt-log entry is written)`)
  } catch (e) {
    if (e instanceof Problem) return { code: e.status === 400 ? 2 : 1, stderr: [`fencegate resolve: ${e.detail}`] }
    if (e instanceof StoreError) return { code: 1, stderr: [`fencegate resolve: the store cannot answer: ${e.message}`] }
    throw e
  }
}

/** `fencegate store accept-loss`: accepts the store's current state; who and why go to the attempt log. */
export async function acceptLossCommand(config: Config, args: AuditArgs): Promise<CommandResult> {
  if (config.store.kind === 'memory') {
    return { code: 2, stderr: ['store.kind memory lives inside the gateway process and never reports a lost state: there is nothing to accept from the command line.'] }
  }
  try {
    const r = await withStore(config, (store) => acceptStoreLoss(store, { reason: args.reason, by: cliActor() }))
    return {
      code: 0,
      stdout: args.json ? `${JSON.stringify(r)}\n` : `store state accepted as it is now (epoch ${r.epoch}); running gateways serve again within a second${r.cleared ? `\nloss note cleared: ${describeNote(r.cleared)}` : ''}\n`,
    }
  } catch (e) {
    if (e instanceof Problem) return { code: 2, stderr: [`fencegate store accept-loss: ${e.detail}`] }
    if (e instanceof StoreError) return { code: 1, stderr: [`fencegate store accept-loss: the store cannot answer: ${e.message}`] }
    throw e
  }
}

/** `fencegate unknown`: the records an operator must settle, oldest first. */
export async function unknownCommand(config: Config, args: AuditArgs): Promise<CommandResult> {
  if (config.store.kind === 'memory') return memoryRefusal('unknown')
  if (args.route !== undefined && !config.routes.some((r) => r.name === args.route)) {
    return { code: 2, stderr: [`--route: no route named ${JSON.stringify(args.route)} in the config (routes: ${config.routes.map((r) => r.name).join(', ')})`] }
  }
  try {
    const list = await withStore(config, (store) => listUnknown(config, store, Date.now(), args.route))
    if (args.json) return { code: 0, stdout: `${JSON.stringify(list, null, 2)}\n` }
    const u = list.unknown
    if (!u.length) return { code: 0, stdout: `no unknown outcomes${args.route ? ` on route ${args.route}` : ''}: nothing to resolve\n` }
    const lines = u.map((x) => `${x.since}  ${x.route}  ${x.keyHash}  ${x.reason}${x.resource ? `  resource ${x.resource}` : ''}${x.replica ? `  replica ${x.replica}` : ''}${x.requestId ? `  request ${x.requestId}` : ''}${x.traceId ? `  trace ${x.traceId}` : ''}${x.probes !== undefined ? `  probes ${x.probes}, ${x.nextProbe ? `next ${x.nextProbe}` : 'probing ended: resolve it'}` : ''}`)
    const more = u.length >= UNKNOWN_LIMIT ? [`(the first ${UNKNOWN_LIMIT}; resolve these, then list again)`] : []
    return {
      code: 0,
      stdout: [`${u.length} unknown outcome${u.length === 1 ? '' : 's'} (since, route, key hash, reason): each answers 409 outcome-unknown until resolved or expired`, ...lines, ...more,
        'settle one: fencegate resolve --config PATH --route ROUTE --key-hash HASH --as failed|completed'].join('\n') + '\n',
    }
  } catch (e) {
    if (e instanceof StoreError) return { code: 1, stderr: [`fencegate unknown: the store cannot answer: ${e.message}`] }
    throw e
  }
}

/** `fencegate leases`: effect durations, generations, stale writers' lateness and lease advice per fenced route. */
export async function leasesCommand(config: Config, args: AuditArgs): Promise<CommandResult> {
  if (config.store.kind === 'memory') return memoryRefusal('leases')
  const now = Date.now()
  const since = parseSince(args.since ?? DEFAULT_SINCE, now)
  if (since === undefined) return { code: 2, stderr: [`--since must be a duration back from now (30m, 1h, 7d) or an RFC 3339 time, not ${JSON.stringify(args.since)}`] }
  try {
    const report = await withStore(config, (store) => buildLeases(config, store.audit, since, now, args.route))
    return { code: 0, stdout: args.json ? `${JSON.stringify(report, null, 2)}\n` : `${formatLeases(report, config)}\n` }
  } catch (e) {
    if (e instanceof Problem) return { code: 2, stderr: [`--route: ${e.detail}`] }
    if (e instanceof StoreError) return { code: 1, stderr: [`fencegate leases: the store cannot answer: ${e.message}`] }
    throw e
  }
}

/**
 * `fencegate doctor --config PATH [--json]`. Exit 0: the settings were read and none refuses
 * start-up (risks are reported, not failed on); 1: the store cannot be read, a blocking risk
 * not named in store.acceptRisks would stop the gateway from starting, or the store holds a loss
 * note (finding `state-loss`: the gateways refuse fenced and idempotent requests until accept-loss).
 * The config's own warnings (../config/warnings.ts) come first: they name what the store's
 * settings cannot show; `warnings` holds their lines for stderr whatever the exit, and --json's
 * report has them as `warnings` ({path, message}), as check-config's does.
 * @param file the config file, for the warnings' lines
 */
export async function doctorCommand(config: Config, args: { json?: boolean }, file: string): Promise<{ code: number; stdout?: string; stderr?: string[]; warnings: string[] }> {
  const found = configWarnings(config)
  const warnings = found.map((w) => formatWarning(file, w))
  let store: Store | undefined
  try {
    // sqlite: the pragmas of a connection opened as the gateway opens it (a file not made yet is not created)
    if (config.store.kind === 'sqlite' && config.store.path !== ':memory:' && existsSync(config.store.path)) store = await openStore(config.store, config.audit)
    // memory: the records are the running gateway's; ask it, else say what the config implies
    const report = (config.store.kind === 'memory' ? await runningReport(config) : undefined) ?? await inspectStore(config.store, store)
    const lost = report.findings.some((f) => f.id === 'state-loss')
    if (!lost && config.store.kind !== 'memory') {
      const accepted = await lastAcceptedLoss(config, store)
      if (accepted) report.findings.push(acceptedLossFinding(accepted))
    }
    const stderr = [
      ...report.refused.length ? [`fencegate doctor: the gateway would refuse to start: ${report.refused.map((f) => f.id).join(', ')} (see above; store.acceptRisks)`] : [],
      ...lost ? ['fencegate doctor: the store lost acknowledged state (state-loss, see above): every gateway sharing it refuses fenced and idempotent requests until `fencegate store accept-loss`'] : [],
    ]
    const out = args.json ? `${JSON.stringify(found.length ? { ...report, warnings: found } : report, null, 2)}\n` : `${formatDoctor(report)}\n`
    return { code: stderr.length ? 1 : 0, stdout: out, stderr: stderr.length ? stderr : undefined, warnings }
  } catch (e) {
    return { code: 1, stderr: [`fencegate doctor: cannot read the ${config.store.kind} store's settings: ${(e as Error).message}`], warnings }
  } finally {
    await store?.close().catch(() => {})
  }
}

/**
 * The newest `accept-loss` entry within the attempt log's retention, from `store` or a store
 * opened for it; undefined when there is none or the log cannot be read in time (the settings
 * are the doctor's business, this is context).
 */
async function lastAcceptedLoss(config: Config, open?: Store): Promise<AuditEntry | undefined> {
  const read = async (store: Store) => (await store.audit.timeline({ operator: true, route: '*' }, Date.now() - config.audit.retention, ACCEPTED_LIMIT))
    .filter((e) => e.kind === 'accept-loss').at(-1)
  let timer: NodeJS.Timeout | undefined
  const late = new Promise<undefined>((resolve) => { timer = setTimeout(() => resolve(undefined), ACCEPTED_READ_MS) })
  try {
    if (open) return await Promise.race([read(open), late])
    if (config.store.kind === 'sqlite') return undefined // no file: nothing was ever accepted in it
    return await Promise.race([withStore(config, read), late])
  } catch {
    return undefined
  } finally {
    clearTimeout(timer)
  }
}
const ACCEPTED_LIMIT = 1000
const ACCEPTED_READ_MS = 5000

/** The report for people. */
export function formatDoctor(r: DoctorReport): string {
  const out = [`fencegate doctor: ${r.store} store at ${r.target}`, '']
  for (const f of [...r.findings].sort((a, b) => rank(a) - rank(b))) {
    out.push(`  ${f.status.toUpperCase().padEnd(7)} ${f.id}: ${f.setting}${f.nodes && f.nodes.length > 1 ? `  (${f.nodes.length} nodes)` : f.nodes ? `  (${f.nodes[0]})` : ''}`)
    out.push(`          ${f.consequence}`)
  }
  out.push('')
  if (r.findings.some((f) => f.id === 'state-loss')) out.push('The store lost acknowledged state (state-loss above): check what was lost, then run `fencegate store accept-loss --config PATH --reason TEXT`, which clears the note.')
  const risks = r.findings.filter((f) => f.status === 'risk').length
  out.push(r.refused.length
    ? `The gateway refuses to start with this store: ${r.refused.map((f) => f.id).join(', ')} ${r.refused.length === 1 ? 'breaks' : 'break'} a guarantee outright. Fix the setting, or name it in store.acceptRisks.`
    : risks ? `${risks} risk${risks === 1 ? '' : 's'}: the guarantees hold only as far as the sentences above allow (the audit report's claim lists them too).` : 'No risk found in the settings fencegate reads.')
  return out.join('\n')
}

const rank = (f: Finding) => (f.id === 'state-loss' || f.blocking ? 0 : f.status === 'risk' ? 1 : f.status === 'unknown' ? 2 : 3)
