/**
 * The PostgreSQL store's reads that change nothing: a resource's mark (its highest token, and
 * since when) and the records whose outcome is unknown.
 */
import type pg from 'pg'
import type { StoreClock } from '../shared/clock.js'
import type { FenceMark, RecordKey, UnknownReason, UnknownRecord } from '../contract/store.js'
import type { Queries } from './queries.js'

export async function readHighest(pool: pg.Pool, q: Queries, resource: string): Promise<bigint | undefined> {
  const { rows } = await pool.query({ ...q.highest, values: [resource] })
  return rows.length ? BigInt(rows[0].highest) : undefined
}

/** `since` on this process's clock. */
export async function readMark(pool: pg.Pool, q: Queries, clock: StoreClock, resource: string): Promise<FenceMark | undefined> {
  const { rows } = await pool.query({ ...q.mark, values: [resource] })
  if (!rows.length) return undefined
  return rows[0].since === null ? { highest: BigInt(rows[0].highest) } : { highest: BigInt(rows[0].highest), since: clock.toLocal(Number(rows[0].since)) }
}

/** A row of fg_unknowns_v3 and fg_unknown_record_v1 (./queries.ts). */
interface UnknownRow {
  route: string; scope: string; key: string; state: string; reason: UnknownReason | null; lease_until: string; expires_at: string
  probe: string | null; probes: number | null; next_probe: string | null
}

/** The unknown outcomes (`Store.unknowns`): at most `limit`, only `route`'s when given; `now` null: the server's clock. */
export async function readUnknowns(pool: pg.Pool, q: Queries, now: number | null, route: string | undefined, limit: number): Promise<UnknownRecord[]> {
  const { rows } = await pool.query<UnknownRow>({ ...q.unknowns, values: [now, route ?? null, limit] })
  return rows.map(unknownOfRow)
}

/** The record of `key` when it is in the unknown state (`Store.unknownRecord`): one indexed read. */
export async function readUnknownRecord(pool: pg.Pool, q: Queries, now: number | null, key: RecordKey): Promise<UnknownRecord | undefined> {
  const { rows } = await pool.query<UnknownRow>({ ...q.unknownRecord, values: [now, key.route, key.scope, key.key] })
  return rows.length ? unknownOfRow(rows[0]) : undefined
}

function unknownOfRow(r: UnknownRow): UnknownRecord {
  const u: UnknownRecord = {
    key: { route: r.route, scope: r.scope, key: r.key },
    reason: r.state === 'in_flight' ? 'crash' : r.reason ?? 'crash',
    leaseUntil: Number(r.lease_until),
    expiresAt: Number(r.expires_at),
  }
  // idempotency.settle's fields, only where the record holds them
  if (r.probe !== null) u.probe = r.probe
  if (r.probes !== null) u.probes = Number(r.probes)
  if (r.next_probe !== null) u.nextProbe = Number(r.next_probe)
  return u
}
