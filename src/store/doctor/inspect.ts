/**
 * The store's real durability settings — not what the config hopes for — and what each means for
 * fencegate's guarantees, one finding each, `ok` or `risk` (or `unknown` when the setting cannot
 * be read), with the consequence in one sentence. Each engine's probe sits with its engine
 * (<engine>/settings.ts); this module picks one, bounds it in time, and runs the start-up check.
 * `fencegate doctor` and its formatter are with the other commands (src/audit/cli.ts):
 *   redis     appendonly / appendfsync / save, maxmemory-policy, role and replication (against
 *             store.replicas), cluster mode — on every master of a cluster, with one `shard`
 *             finding per master: its slots, replicas and what a failover would cost;
 *   postgres  synchronous_commit, fsync, synchronous standbys, whether it is a standby;
 *   sqlite    journal_mode and synchronous of the gateway's own connection, and the filesystem
 *             the file is on (tmpfs, a network filesystem, a container's writable layer);
 *   memory    not durable, not shared, and how long store.maxRecords holds at the observed
 *             rate (../memory/settings.ts).
 * A loss note a gateway left in the store (../state-loss/note.ts) is one more finding, `state-loss`, a
 * risk, until `fencegate store accept-loss` deletes it.
 * The findings also go into the audit report's `claim.assumptions` (claimSentences,
 * src/audit/guarantees.ts), so the claim names the store it actually runs on.
 *
 * A risk that breaks a guarantee outright while the store runs normally — an evicting Redis
 * `maxmemory-policy`, which forgets high-water marks or records when memory fills — is
 * `blocking`: the gateway refuses to start unless `store.acceptRisks` names it.
 */
import { tlsFinding } from './tls.js'
import type { Config } from '../../config/schema.js'
import type { Logger } from '../../log.js'
import type { Store } from '../contract/store.js'
import { RiskRefused, type DoctorReport, type Finding } from './findings.js'
import { redisFindings } from '../redis/settings.js'
import { postgresFindings } from '../postgres/settings.js'
import { sqliteFindings } from '../sqlite/settings.js'
import { memoryFindings } from '../memory/settings.js'
import { clockFinding } from './clock.js'
import { lossFinding } from './loss.js'

export { RiskRefused, type DoctorReport, type Finding, type FindingStatus } from './findings.js'

/** How long reading the settings may take before they count as unknown, ms. */
const READ_TIMEOUT_MS = 5000

const withTimeout = <T>(p: Promise<T>, ms: number, what: string): Promise<T> => {
  let t: NodeJS.Timeout
  const late = new Promise<never>((_, reject) => { t = setTimeout(() => reject(new Error(`${what} did not answer within ${ms} ms`)), ms) })
  return Promise.race([p, late]).finally(() => clearTimeout(t))
}

/**
 * Reads the settings of the configured store and what they mean.
 * @param store the opened store, when there is one (sqlite: its own connection's pragmas)
 * @throws Error when the store cannot be reached at all
 */
export async function inspectStore(config: Config['store'], store?: Store): Promise<DoctorReport> {
  let target: string
  let findings: Finding[]
  switch (config.kind) {
    case 'memory':
      target = 'this process'
      findings = memoryFindings(config, store)
      break
    case 'sqlite':
      target = config.path
      findings = sqliteFindings(config, store)
      break
    case 'redis':
      target = config.sentinels ? `${config.sentinelName} via Sentinel ${config.sentinels.join(',')}` : config.url!.split(',').map((u) => { try { return new URL(u.trim()).host } catch { return u } }).join(',')
      findings = await withTimeout(redisFindings(config), READ_TIMEOUT_MS * 2, 'Redis')
      break
    case 'postgres': {
      const u = new URL(config.url!)
      target = `${u.host}${u.pathname}`
      findings = await withTimeout(postgresFindings(config), READ_TIMEOUT_MS, 'PostgreSQL')
      break
    }
  }
  const tls = tlsFinding(config)
  if (tls) findings.push(tls)
  // the running gateway's own measurement; `fencegate doctor` measures once itself
  findings.push(await clockFinding(config, store, READ_TIMEOUT_MS))
  // redis and postgres: the probe read the loss note on its own connection
  if (store && (config.kind === 'sqlite' || config.kind === 'memory')) {
    const note = await withTimeout(store.markers(), READ_TIMEOUT_MS, 'the store').then((m) => m.note, () => undefined)
    if (note) findings.push(lossFinding(note))
  }
  const accepted = new Set<string>(config.acceptRisks ?? [])
  return { store: config.kind, target, findings, refused: findings.filter((f) => f.blocking && !accepted.has(f.id)) }
}

// ------------------------------------------------------------------ start-up

/**
 * At start-up: reads the settings, logs one line, and refuses to start on a blocking risk that
 * `store.acceptRisks` does not name. A store that cannot be read (down: the gateway starts
 * without it) is logged and left for `fencegate doctor`.
 * @returns the report, or undefined when the settings could not be read
 * @throws RiskRefused
 */
export async function checkAtStart(config: Config, log: Logger, store?: Store): Promise<DoctorReport | undefined> {
  let report: DoctorReport
  try {
    report = await inspectStore(config.store, store)
  } catch (e) {
    log.warn('store settings could not be read; run `fencegate doctor` once the store answers', { store: config.store.kind, error: (e as Error).message })
    return undefined
  }
  logReport(report, log)
  if (report.refused.length) throw new RiskRefused(report.refused)
  return report
}

/** The start-up line: every finding, risks first; warn when there is a risk. */
export function logReport(report: DoctorReport, log: Logger): void {
  const risks = report.findings.filter((f) => f.status !== 'ok')
  const fields = {
    store: report.store, target: report.target,
    risks: risks.map((f) => `${f.status} ${f.id} (${f.setting}): ${f.consequence}`).join(' | ') || undefined,
    ok: report.findings.filter((f) => f.status === 'ok').map((f) => `${f.id} (${f.setting})`).join('; ') || undefined,
    refused: report.refused.map((f) => f.id).join(', ') || undefined,
  }
  if (risks.length) log.warn(`store settings: ${risks.length} risk${risks.length === 1 ? '' : 's'} to the guarantees (fencegate doctor explains)`, fields)
  else log.info('store settings: ok', fields)
}

/**
 * The settings as a running gateway reports them (the audit report's claim): read at most once
 * per `maxAgeMs`, starting from the start-up report; undefined while the store cannot be read.
 */
export function settingsReader(config: Config['store'], store: Store | undefined, first: DoctorReport | undefined, maxAgeMs = 60_000): () => Promise<DoctorReport | undefined> {
  // memory: the store is this process, read at no cost, and its fill rate changes by the minute
  if (config.kind === 'memory') maxAgeMs = 0
  let last = first
  let at = first ? Date.now() : 0
  let reading: Promise<DoctorReport | undefined> | undefined
  return () => {
    if (last && Date.now() - at < maxAgeMs) return Promise.resolve(last)
    reading ??= inspectStore(config, store).then((r) => { last = r; at = Date.now(); return r }, () => last).finally(() => { reading = undefined })
    return reading
  }
}
