/**
 * The PostgreSQL store's writes of a claimed record outside the group commit (./batches.ts
 * carries finish and release): renew, rare (a quarter lease apart), and resolve, an operator's.
 */
import type pg from 'pg'
import type { RecordKey, Resolution, ResolveResult } from '../contract/store.js'
import { resolveResult } from '../shared/replies.js'
import type { Queries } from './queries.js'
import type { SequencedQuery } from './sequence.js'

/**
 * One guarded UPDATE: the lease moved to `leaseMs` from now while `claimId` holds the record.
 * @param now the caller's epoch ms with `clock: 'caller'`, else null (the server's clock)
 */
export async function renew(pool: pg.Pool, q: Queries, key: RecordKey, claimId: string, leaseMs: number, now: number | null): Promise<boolean> {
  const { rowCount } = await pool.query({ ...q.renew, values: [Math.round(leaseMs), key.route, key.scope, key.key, claimId, now] })
  return (rowCount ?? 0) > 0
}

/** `Store.resolve`, one sequenced statement. @param now as for `renew` */
export async function resolve(write: SequencedQuery, q: Queries, key: RecordKey, as: Resolution, ttlMs: number, now: number | null): Promise<ResolveResult> {
  const { rows } = await write<{ o_kind: string; o_reason: string | null; o_state: string | null }>(q.resolve, [key.route, key.scope, key.key, as, now, Math.round(ttlMs)])
  const r = rows[0]
  return resolveResult(r.o_kind, r.o_kind === 'refused' ? r.o_state : r.o_reason)
}
