/**
 * The PostgreSQL store's writes of a claimed record outside the group commit (./batches.ts
 * carries finish and release): renew, rare (a quarter lease apart), resolve, an operator's, and
 * `idempotency.settle`'s probe take and settlement, off the request path but for a retry's probe.
 */
import type pg from 'pg'
import type { ProbeTake, RecordKey, Resolution, ResolveResult, Settlement, SettleResult } from '../contract/store.js'
import { probeTakeResult, resolveResult, settleResult } from '../shared/replies.js'
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

/** `Store.takeProbe`, one sequenced statement. @param now as for `renew` */
export async function takeProbe(write: SequencedQuery, q: Queries, key: RecordKey, p: { seen: number; afterMs: number; nextInMs: number }, now: number | null): Promise<ProbeTake> {
  const { rows } = await write<{ o_kind: string; o_probe: string | null; o_probes: number | null; o_reason: string | null; o_abandoned: boolean | null }>(q.takeProbe,
    [key.route, key.scope, key.key, p.seen, Math.max(0, Math.round(p.afterMs)), Math.max(0, Math.round(p.nextInMs)), now])
  const r = rows[0]
  return probeTakeResult(r.o_kind, r.o_probe, r.o_probes, r.o_reason, r.o_abandoned === true)
}

/** `Store.settle`, one sequenced statement. @param now as for `renew` */
export async function settle(write: SequencedQuery, q: Queries, key: RecordKey, probes: number, as: Settlement, ttlMs: number, now: number | null): Promise<SettleResult> {
  const r = as.kind === 'applied' ? as.response : undefined
  const { rows } = await write<{ o_kind: string; o_reason: string | null }>(q.settleUnknown,
    [key.route, key.scope, key.key, probes, as.kind, Math.max(1, Math.round(ttlMs)), r?.status ?? null, r ? JSON.stringify(r.headers) : null, r?.body ?? null, now])
  return settleResult(rows[0].o_kind, rows[0].o_reason)
}
