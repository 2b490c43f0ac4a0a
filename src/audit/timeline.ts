/**
 * A key's or a resource's timeline: every attempt-log entry about one idempotency key (by key
 * hash, or the key and scope) or one fencing resource, oldest first — `fencegate audit --key-hash
 * H | --key K | --resource R` and admin `GET /audit/timeline` (contract §8). What an operator
 * reads between the alert and `fencegate resolve`.
 */
import type { Config } from '../config/schema.js'
import { Problem } from '../problems.js'
import { parseIdempotencyKey } from '../idempotency/key.js'
import { recordKeyOf } from '../idempotency/record-key.js'
import type { AuditEntry, AuditLog, TimelineFilter } from '../store/index.js'
import { human } from './leases.js'

/** At most this many entries (the newest). */
export const TIMELINE_LIMIT = 1000

export interface TimelineQuery {
  route?: string
  keyHash?: string
  /** the key as the client sent it; needs `route` (and `scope` when the route has one) */
  key?: string
  scope?: string
  resource?: string
  /** epoch ms */
  since: number
  /** epoch ms: only entries before it (the next older page) */
  until?: number
  /** at most this many entries, the newest; default and most TIMELINE_LIMIT */
  limit?: number
}

export interface Timeline {
  /** what was asked, as the attempt log knows it */
  route?: string
  keyHash?: string
  resource?: string
  /** RFC 3339 */
  since: string
  entries: (Omit<AuditEntry, 'time'> & { time: string })[]
  /**
   * present when older entries in the window were left out (the page was full): ask again with
   * `until` = this page's first entry's time (RFC 3339)
   */
  more?: true
}

/**
 * @throws Problem 400 bad-request (none or several of key, keyHash, resource; an unknown route;
 *   a bad key or scope); StoreError when the store cannot answer
 */
export async function buildTimeline(config: Config, log: AuditLog, q: TimelineQuery): Promise<Timeline> {
  const asked = [q.keyHash, q.key, q.resource].filter((x) => x !== undefined).length
  if (asked !== 1) throw new Problem('bad-request', 'Name one thing to follow: a key hash, a key (with its route), or a fencing resource.')
  const rc = q.route === undefined ? undefined : config.routes.find((r) => r.name === q.route)
  if (q.route !== undefined && !rc) throw new Problem('bad-request', `No route named ${JSON.stringify(q.route)} in the config (routes: ${config.routes.map((r) => r.name).join(', ')}).`)
  const limit = Math.min(TIMELINE_LIMIT, Math.max(1, Math.floor(q.limit ?? TIMELINE_LIMIT)))
  const filter: TimelineFilter = { route: q.route, until: q.until }
  if (q.keyHash !== undefined) {
    if (!/^[0-9a-f]{64}$/.test(q.keyHash)) throw new Problem('bad-request', 'A key hash is 64 lower-case hex digits, as the attempt log, `fencegate unknown` and the spans show it.')
    filter.keyHashes = [q.keyHash]
  } else if (q.key !== undefined) {
    if (!rc?.idempotency) throw new Problem('bad-request', 'Following a key needs its route (one with idempotency): its scope is part of the key hash.')
    const key = parseIdempotencyKey(q.key)
    if (key === undefined) throw new Problem('bad-request', 'The key must be an idempotency key: 1 to 255 visible ASCII characters, bare or as a quoted sf-string.')
    if (rc.idempotency.scope !== '' && q.scope === undefined) throw new Problem('bad-request', `Route ${rc.name} scopes its keys by "${rc.idempotency.scope}": give the scope too.`)
    filter.keyHashes = [recordKeyOf(rc.name, rc.idempotency.scope === '' ? undefined : q.scope, key).keyHash]
  } else {
    filter.resource = q.resource
  }
  const entries = await log.timeline(filter, q.since, limit)
  const t: Timeline = {
    route: q.route,
    keyHash: filter.keyHashes?.[0],
    resource: filter.resource,
    since: new Date(q.since).toISOString(),
    entries: entries.map((e) => ({ ...e, time: new Date(e.time).toISOString() })),
  }
  if (entries.length === limit) t.more = true
  return t
}

/** One key or resource that had attempts lately, as `recentKeys` lists it. */
export interface RecentKey {
  route: string
  /** the key hash, or undefined for a fenced attempt without a key */
  keyHash?: string
  resource?: string
  /** RFC 3339: its newest attempt */
  last: string
  /** its attempts among those read */
  attempts: number
  /** the newest attempt's outcome */
  outcome?: string
}

/**
 * The keys (else resources) of the newest `read` attempts, newest first, at most `limit`: what the
 * audit view's overview offers to follow.
 * @throws StoreError when the store cannot answer
 */
export async function recentKeys(log: AuditLog, since: number, limit = 20, read = 500): Promise<{ keys: RecentKey[] }> {
  const entries = await log.timeline({ all: true }, since, read)
  const byId = new Map<string, RecentKey>()
  for (let i = entries.length - 1; i >= 0; i--) {
    const e = entries[i]
    if (e.kind !== 'attempt' || (e.keyHash === undefined && e.resource === undefined)) continue
    const id = `${e.route}\n${e.keyHash ?? `resource ${e.resource}`}`
    const k = byId.get(id)
    if (k) { k.attempts++; continue }
    if (byId.size >= limit) continue
    const r: RecentKey = { route: e.route, last: new Date(e.time).toISOString(), attempts: 1 }
    if (e.keyHash !== undefined) r.keyHash = e.keyHash
    if (e.resource !== undefined) r.resource = e.resource
    if (e.outcome !== undefined) r.outcome = e.outcome
    byId.set(id, r)
  }
  return { keys: [...byId.values()] }
}

/** One line per entry, for people. */
export function formatTimeline(t: Timeline): string {
  const what = t.resource !== undefined ? `resource ${t.resource}` : `key hash ${t.keyHash}`
  if (!t.entries.length) return `no attempts on ${what} since ${t.since}`
  /** per resource, the highest token accepted so far in the timeline: who a stale writer was late for */
  const accepted = new Map<string, bigint>()
  const lines = t.entries.map((e) => {
    if (e.kind === 'resolve') return `${e.time}  ${e.route}  ${e.by === 'probe' ? 'settled' : 'resolved'} as ${e.resolution} by ${e.by ?? e.replica}${e.reason ? `  reason: ${e.reason}` : ''}${e.by === 'probe' ? `  replica ${e.replica}` : ''}`
    if (e.kind === 'lease') return [e.time, 'lease', e.method, e.status, e.result, e.token !== undefined ? `token ${e.token}` : '', e.by ? `holder ${e.by}` : '', e.leaseUntil !== undefined ? `${e.result === 'released' || e.result === 'expired' ? 'ended' : 'until'} ${new Date(e.leaseUntil).toISOString()}` : '', e.result === 'stale' && e.highestToken ? `token ${e.highestToken} holds it` : '', e.requestId ? `request ${e.requestId}` : '', `replica ${e.replica}`].filter((x) => x !== undefined && x !== '').join('  ')
    if (e.kind === 'probe') return [e.time, e.route, `probe ${e.method ?? ''}`.trim(), e.upstreamStatus, `answer ${e.result}`, e.upstreamMs !== undefined ? human(e.upstreamMs) : '', e.reason, e.requestId ? `settles request ${e.requestId}` : '', `replica ${e.replica}`].filter((x) => x !== undefined && x !== '').join('  ')
    const flags = [e.unknown && `unknown(${e.unknown})`, e.abandoned && 'found-abandoned', e.duplicate && 'duplicate', e.overtaken && 'overtaken'].filter(Boolean).join(' ')
    let late = ''
    if (e.resource !== undefined && e.token !== undefined && /^\d+$/.test(e.token)) {
      const prior = accepted.get(e.resource)
      if (e.outcome === 'stale') {
        const newer = e.highestToken ?? (prior !== undefined && prior > BigInt(e.token) ? String(prior) : undefined)
        if (e.lateMs !== undefined) late = `refused ${human(e.lateMs)} after ${newer !== undefined ? `token ${newer}` : 'a newer token'} took over`
      } else if (e.outcome !== 'token_missing' && e.outcome !== 'token_malformed' && (prior === undefined || BigInt(e.token) > prior)) {
        accepted.set(e.resource, BigInt(e.token))
      }
    }
    return [e.time, e.route, e.method, e.status, e.outcome, e.result, e.token !== undefined ? `token ${e.token}` : '', late,
      t.resource === undefined && e.resource ? `resource ${e.resource}` : '', t.keyHash === undefined && e.keyHash ? `key ${e.keyHash.slice(0, 12)}` : '',
      flags, e.durationMs !== undefined ? `${human(e.durationMs)}${e.upstreamMs !== undefined ? ` (upstream ${human(e.upstreamMs)})` : ''}` : '',
      e.requestId ? `request ${e.requestId}` : '', e.traceId ? `trace ${e.traceId}` : '', `replica ${e.replica}`]
      .filter((x) => x !== undefined && x !== '').join('  ')
  })
  return [`${t.entries.length} attempt${t.entries.length === 1 ? '' : 's'} on ${what} since ${t.since}, oldest first:`, ...lines].join('\n')
}
