/**
 * The attempt log as an SQL table, shared by the SQLite and PostgreSQL stores: the columns, the
 * row mapping and the one aggregate query of `AuditLog.query` (the rules of `aggregate` in
 * ./types.ts, as SQL).
 */
import { emptyCounts, OPERATOR_KINDS, type AuditCounts, type AuditEntry, type TimelineFilter } from './types.js'

/** Columns in insert order. Flags are 0/1 integers in both engines, so they can be summed. */
export const AUDIT_COLUMNS = [
  'time', 'kind', 'replica', 'route', 'method', 'resource', 'token', 'key_hash', 'fingerprint', 'outcome',
  'result', 'unknown', 'abandoned', 'duplicate', 'overtaken', 'status', 'upstream_status', 'duration_ms',
  'trace_id', 'resolution', 'request_id', 'reason', 'actor', 'upstream_ms', 'late_ms', 'highest_token', 'lease_until',
] as const

/** The row of an entry, values in AUDIT_COLUMNS order. */
export const auditRow = (e: AuditEntry): (string | number | null)[] => [
  e.time, e.kind, e.replica, e.route, e.method ?? null, e.resource ?? null, e.token ?? null, e.keyHash ?? null,
  e.fingerprint ?? null, e.outcome ?? null, e.result ?? null, e.unknown ?? null, e.abandoned ? 1 : 0,
  e.duplicate ? 1 : 0, e.overtaken ? 1 : 0, e.status ?? null, e.upstreamStatus ?? null,
  e.durationMs ?? null, e.traceId ?? null, e.resolution ?? null, e.requestId ?? null, e.reason ?? null, e.by ?? null,
  e.upstreamMs ?? null, e.lateMs ?? null, e.highestToken ?? null, e.leaseUntil ?? null,
]

/**
 * The aggregate query; `p(n)` writes the n-th (1-based) placeholder: 1 since, 2 until, 3 route
 * (NULL for every route). One row per route.
 */
export function auditQuerySql(table: string, p: (n: number) => string): string {
  const unknowns = '((CASE WHEN a.unknown IS NOT NULL THEN 1 ELSE 0 END) + a.abandoned)'
  const count = (cond: string) => `sum(CASE WHEN ${cond} THEN 1 ELSE 0 END)`
  return `SELECT a.route AS route, count(*) AS attempts, count(DISTINCT a.key_hash) AS keys,
    ${count("a.outcome = 'forwarded'")} AS forwarded,
    ${count("a.outcome = 'replayed'")} AS replayed,
    ${count("a.outcome = 'stale'")} AS stale,
    ${count("a.outcome = 'token_missing'")} AS token_missing,
    ${count("a.outcome = 'in_flight'")} AS in_flight,
    ${count("a.outcome = 'key_reused'")} AS key_reused,
    ${count("a.result = 'released'")} AS released,
    sum(a.duplicate) AS duplicate_forwards,
    sum(a.overtaken) AS overtaken,
    sum(${unknowns}) AS unknown_total,
    sum(CASE WHEN ${unknowns} > 0 AND a.key_hash IS NOT NULL AND EXISTS (
      SELECT 1 FROM ${table} r WHERE r.kind = 'resolve' AND r.route = a.route AND r.key_hash = a.key_hash
        AND r.time >= a.time AND r.time < ${p(2)}) THEN ${unknowns} ELSE 0 END) AS unknown_resolved
  FROM ${table} a
  WHERE a.kind = 'attempt' AND a.time >= ${p(1)} AND a.time < ${p(2)} AND (CAST(${p(3)} AS TEXT) IS NULL OR a.route = ${p(3)})
  GROUP BY a.route`
}

/**
 * A timeline's query and its values; `p(n)` writes the n-th placeholder. Key hashes and the
 * resource are matched with the (route, key_hash, time) index or a scan of the window.
 */
export function timelineSql(table: string, p: (n: number) => string, f: TimelineFilter, since: number, limit: number): { text: string; values: (string | number)[] } {
  const values: (string | number)[] = [since]
  const or: string[] = []
  for (const h of f.keyHashes ?? []) { values.push(h); or.push(`key_hash = ${p(values.length)}`) }
  if (f.resource !== undefined) { values.push(f.resource); or.push(`resource = ${p(values.length)}`) }
  if (f.operator) or.push(`kind IN (${OPERATOR_KINDS.map((k) => `'${k}'`).join(', ')})`)
  if (f.all) or.push('TRUE')
  let where = `time >= ${p(1)} AND (${or.length ? or.join(' OR ') : 'FALSE'})`
  if (f.until !== undefined) { values.push(f.until); where += ` AND time < ${p(values.length)}` }
  if (f.route !== undefined) { values.push(f.route); where += ` AND route = ${p(values.length)}` }
  values.push(limit)
  return {
    text: `SELECT * FROM (SELECT ${AUDIT_COLUMNS.join(', ')} FROM ${table} WHERE ${where} ORDER BY time DESC LIMIT ${p(values.length)}) t ORDER BY time`,
    values,
  }
}

/** The columns `fencegate leases` reads. */
const LEASE_COLUMNS = ['time', 'kind', 'replica', 'route', 'method', 'resource', 'token', 'outcome', 'unknown', 'status', 'upstream_status', 'upstream_ms', 'late_ms', 'highest_token']

/**
 * `AuditLog.fenced` as a query and its values; `p(n)` writes the n-th placeholder. The newest
 * `limit` rows of the window, oldest first (by the time index).
 */
export function fencedSql(table: string, p: (n: number) => string, since: number, until: number, route: string | undefined, limit: number): { text: string; values: (string | number)[] } {
  const values: (string | number)[] = [since, until]
  let where = `kind = 'attempt' AND resource IS NOT NULL AND time >= ${p(1)} AND time < ${p(2)}`
  if (route !== undefined) { values.push(route); where += ` AND route = ${p(values.length)}` }
  values.push(limit)
  return {
    text: `SELECT * FROM (SELECT ${LEASE_COLUMNS.join(', ')} FROM ${table} WHERE ${where} ORDER BY time DESC LIMIT ${p(values.length)}) t ORDER BY time`,
    values,
  }
}

/** An attempt log row (either engine) as an entry; NULL columns and 0 flags are left out. */
export function entryFromRow(r: Record<string, unknown>): AuditEntry {
  const e: AuditEntry = { time: Number(r.time), kind: r.kind as AuditEntry['kind'], replica: String(r.replica), route: String(r.route) }
  const str = (c: string) => (r[c] === null || r[c] === undefined ? undefined : String(r[c]))
  const num = (c: string) => (r[c] === null || r[c] === undefined ? undefined : Number(r[c]))
  const set = <K extends keyof AuditEntry>(k: K, v: AuditEntry[K] | undefined) => { if (v !== undefined) e[k] = v }
  set('method', str('method'))
  set('resource', str('resource'))
  set('token', str('token'))
  set('keyHash', str('key_hash'))
  set('fingerprint', str('fingerprint'))
  set('outcome', str('outcome') as AuditEntry['outcome'])
  set('result', str('result'))
  set('unknown', str('unknown') as AuditEntry['unknown'])
  if (num('abandoned')) e.abandoned = true
  if (num('duplicate')) e.duplicate = true
  if (num('overtaken')) e.overtaken = true
  set('status', num('status'))
  set('upstreamStatus', num('upstream_status'))
  set('durationMs', num('duration_ms'))
  set('upstreamMs', num('upstream_ms'))
  set('lateMs', num('late_ms'))
  set('highestToken', str('highest_token'))
  set('traceId', str('trace_id'))
  set('resolution', str('resolution') as AuditEntry['resolution'])
  set('requestId', str('request_id'))
  set('reason', str('reason'))
  set('by', str('actor'))
  set('leaseUntil', num('lease_until'))
  return e
}

/** Turns the query's rows (numbers, or numeric strings from pg) into counts sorted by route. */
export function countsFromRows(rows: Record<string, unknown>[]): AuditCounts[] {
  const n = (v: unknown) => Number(v ?? 0)
  return rows.map((r) => {
    const resolved = n(r.unknown_resolved)
    return {
      ...emptyCounts(String(r.route)),
      attempts: n(r.attempts), keys: n(r.keys), forwarded: n(r.forwarded), replayed: n(r.replayed),
      stale: n(r.stale), tokenMissing: n(r.token_missing), inFlightConflicts: n(r.in_flight),
      keyReused: n(r.key_reused), released: n(r.released),
      unknownOutcomes: { resolved, unresolved: n(r.unknown_total) - resolved },
      duplicateForwards: n(r.duplicate_forwards), overtaken: n(r.overtaken),
    }
  }).sort((a, b) => (a.route < b.route ? -1 : a.route > b.route ? 1 : 0))
}
