/**
 * The exactly-once report (contract §8): the attempt log's counts per route over a window, each
 * with the route's claim in words. The same object for `fencegate audit --json` and admin
 * `GET /audit`; `formatReport` renders it as a plain table per route for people.
 */
import type { Config } from '../config/schema.js'
import { parseDuration } from '../config/units.js'
import { claimFor, type Claim } from './guarantees.js'
import { emptyCounts, type AuditCounts, type AuditLog } from '../store/index.js'

export type RouteReport = AuditCounts & { claim: Claim }

export interface AuditReport {
  /** RFC 3339 */
  since: string
  until: string
  routes: RouteReport[]
  /**
   * What operators did in the window (`resolve`, `accept-loss`), oldest first, with who and why;
   * present only when there is something
   */
  operatorActions?: OperatorAction[]
}

/** An operator's action as the report lists it. */
export interface OperatorAction {
  /** RFC 3339 */
  time: string
  kind: 'resolve' | 'accept-loss'
  /** the route of a `resolve`; `*` for `accept-loss` (every route) */
  route: string
  keyHash?: string
  resolution?: 'completed' | 'failed'
  reason?: string
  by?: string
  replica: string
}

/** Most operator actions a report lists (the newest). */
const ACTIONS_LIMIT = 1000

/**
 * Reads `--since` / `?since=`: a duration back from `now` (1h, 30m, 7d) or an RFC 3339 time.
 * @returns epoch ms, or undefined when the text is neither
 */
export function parseSince(text: string, now: number): number | undefined {
  const ms = parseDuration(text)
  // beyond about 100 years it is a typo, and Date cannot hold it
  if (ms !== undefined) return ms <= 100 * 365 * 86_400_000 ? now - ms : undefined
  if (/^\d{4}-\d{2}-\d{2}T/.test(text)) {
    const t = Date.parse(text)
    if (!Number.isNaN(t)) return t
  }
  return undefined
}

/** The window when none is asked for. */
export const DEFAULT_SINCE = '24h'

/**
 * Builds the report of every configured route (or only `route`), in config order; a route that
 * is in the log but no longer in the config is listed after them, with a claim saying so.
 * `measured`: sentences about the store's real settings (fencegate doctor), added to each claim's
 * assumptions.
 * Requests that matched no route are not a route's and are left out.
 */
export async function buildReport(config: Config, log: AuditLog, since: number, until: number, route?: string, measured?: readonly string[]): Promise<AuditReport> {
  const counts = await log.query(since, until, route)
  const byRoute = new Map(counts.map((c) => [c.route, c]))
  const routes: RouteReport[] = []
  for (const rc of config.routes) {
    if (route !== undefined && rc.name !== route) continue
    routes.push({ ...(byRoute.get(rc.name) ?? emptyCounts(rc.name)), claim: claimFor(rc, config.store, measured) })
    byRoute.delete(rc.name)
  }
  for (const c of byRoute.values()) {
    if (c.route === 'none') continue
    routes.push({ ...c, claim: { guarantees: [], assumptions: [], notGuaranteed: [`Route ${c.route} is in the attempt log but not in the current config, so what it promised when these attempts were made cannot be told from here.`] } })
  }
  const report: AuditReport = { since: new Date(since).toISOString(), until: new Date(until).toISOString(), routes }
  const actions = (await log.timeline({ operator: true }, since, ACTIONS_LIMIT))
    .filter((e) => e.time < until && e.kind !== 'attempt' && e.kind !== 'lease' && (route === undefined || e.route === route || e.kind === 'accept-loss'))
  if (actions.length) {
    report.operatorActions = actions.map((e) => {
      const a: OperatorAction = { time: new Date(e.time).toISOString(), kind: e.kind as OperatorAction['kind'], route: e.route, replica: e.replica }
      if (e.keyHash) a.keyHash = e.keyHash
      if (e.resolution) a.resolution = e.resolution
      if (e.reason) a.reason = e.reason
      if (e.by) a.by = e.by
      return a
    })
  }
  return report
}

/** One line for an operator action, for people. */
export function formatAction(a: Pick<OperatorAction, 'time' | 'kind' | 'route' | 'keyHash' | 'resolution' | 'reason' | 'by' | 'replica'>): string {
  const what = a.kind === 'accept-loss'
    ? 'store state loss accepted'
    : `route ${a.route}, key hash ${a.keyHash ?? '?'}: resolved as ${a.resolution}`
  return `${a.time}  ${what}  by ${a.by ?? a.replica}${a.reason ? `  reason: ${a.reason}` : '  (no reason given)'}`
}

const ROWS: [string, (r: RouteReport) => number, string][] = [
  ['attempts', (r) => r.attempts, 'requests the gateway decided on'],
  ['keys', (r) => r.keys, 'distinct idempotency keys seen'],
  ['forwarded', (r) => r.forwarded, 'sent upstream and answered'],
  ['replayed', (r) => r.replayed, 'answered from a stored response, upstream not called'],
  ['stale', (r) => r.stale, 'refused: fencing token older than the highest (412)'],
  ['tokenMissing', (r) => r.tokenMissing, 'refused: no fencing token (428)'],
  ['inFlightConflicts', (r) => r.inFlightConflicts, 'refused: same key already in flight (409)'],
  ['keyReused', (r) => r.keyReused, 'refused: same key, different request (422)'],
  ['released', (r) => r.released, 'claims given up: upstream said not done, or unreachable'],
  ['unknownOutcomes.resolved', (r) => r.unknownOutcomes.resolved, 'sent, no complete answer; settled by fencegate resolve'],
  ['unknownOutcomes.unresolved', (r) => r.unknownOutcomes.unresolved, 'sent, no complete answer; still open'],
  ['duplicateForwards', (r) => r.duplicateForwards, 'keys forwarded again after an unknown outcome'],
  ['overtaken', (r) => r.overtaken, 'older-token requests that ended after a newer one was sent'],
]

/** The report as plain text: one table per route, then its claim. */
export function formatReport(report: AuditReport): string {
  const out: string[] = [`fencegate audit: ${report.since} to ${report.until}`, '']
  if (!report.routes.length) out.push('(no routes)', '')
  const w = Math.max(...ROWS.map(([name]) => name.length))
  const nw = Math.max(5, ...report.routes.flatMap((r) => ROWS.map(([, get]) => String(get(r)).length)))
  for (const r of report.routes) {
    out.push(`route ${r.route}`)
    for (const [name, get, meaning] of ROWS) out.push(`  ${name.padEnd(w)}  ${String(get(r)).padStart(nw)}  ${meaning}`)
    const section = (title: string, lines: string[]) => {
      if (!lines.length) return
      out.push(`  ${title}:`)
      for (const l of lines) out.push(`    - ${l}`)
    }
    section('guarantees', r.claim.guarantees)
    section('assumptions', r.claim.assumptions)
    section('not guaranteed', r.claim.notGuaranteed)
    out.push('')
  }
  if (report.operatorActions?.length) {
    out.push('operator actions')
    for (const a of report.operatorActions) out.push(`  ${formatAction(a)}`)
    out.push('')
  }
  return out.join('\n')
}
