/**
 * Group commit of the PostgreSQL store (./batcher.ts): the calls of one operation made in one
 * event-loop turn, or while earlier batches of it run, go as one call of a `*_many` function —
 * one round trip and one transaction for all of them — whose rows answer each call as its
 * single-call form would (./sql.ts). Rows are decoded by ../shared/replies.ts, shared with Redis.
 *
 * Every batch runs with the write sequence around it (./sequence.ts).
 *
 * When the server refuses a batch (one call it cannot store: the whole statement rolled back),
 * each call is made again alone, so only the calls that fail on their own fail.
 */
import type pg from 'pg'
import { batcher, type BatchOptions } from './batcher.js'
import { claimResult, fenceResult, releaseResult, type ClaimFields, type FenceFields } from '../shared/replies.js'
import type { AdmitResult, ClaimRequest, ClaimResult, Completion, FenceRequest, FenceResult, RecordKey, Registration, ReleaseResult } from '../contract/store.js'
import { refusedAndRolledBack } from './errors.js'
import { arrayLiteral } from './arrays.js'
import type { Named, Queries } from './queries.js'
import type { SequencedQuery } from './sequence.js'

// `now` null: the server's clock (fg_now_ms_v1); a number only for tests that drive time (./sql.ts)
export interface ClaimCall { key: RecordKey; req: ClaimRequest; now: number | null }
export interface FenceCall extends FenceRequest { now: number | null }
export interface AdmitCall extends ClaimCall { fence: FenceRequest }
/** finish (with `done`, kept `ttlMs` from now) or release (without) */
export interface SettleCall { key: RecordKey; claimId: string; done?: Completion; ttlMs?: number; now: number | null }
/** registered for `holdMs` from now */
export interface RegisterCall { resource: string; token: bigint; id: string; holdMs: number; now: number | null }
/** deleted (`holdMs` null), or kept `holdMs` from now */
export interface UnregisterCall { resource: string; id: string; holdMs: number | null; now: number | null }

/** The batched operations of one store; each resolves with its own call's answer, or rejects with the engine's error. */
export interface GroupCommit {
  fence(call: FenceCall): Promise<FenceResult>
  claim(call: ClaimCall): Promise<ClaimResult>
  /** fence and, when it accepts, claim: in one transaction */
  admit(call: AdmitCall): Promise<AdmitResult>
  /** a release answers what it did; a finish undefined */
  settle(call: SettleCall): Promise<ReleaseResult | undefined>
  register(call: RegisterCall): Promise<Registration>
  unregister(call: UnregisterCall): Promise<void>
}

/** A fence's columns in the v2 batches' rows. */
interface FenceRow { o_accepted: boolean; o_highest: string; o_since: string | null; o_raised: boolean | null }
/** A claim's columns in the claim and admit batches' rows; o_lease is BIGINT, so text. */
interface ClaimRow {
  o_kind: string
  o_after: string | null
  o_abandoned: boolean | null
  o_lease: string | null
  o_status: number | null
  o_headers: string | null
  o_body: Buffer | null
  o_reason: string | null
}
/** A settle batch's row: what a release did (fg_release_v1), NULL for a finish. */
interface SettleRow { o_kind: string | null; o_lapsed: boolean | null }
interface RegisterRow { o_registered: boolean; o_highest: string | null; o_oldest: string | null; o_until: string }

const fenceFields = (r: FenceRow): FenceFields => ({ accepted: r.o_accepted === true, highest: r.o_highest, since: r.o_since, raised: r.o_raised })
const claimFields = (r: ClaimRow): ClaimFields => ({
  kind: r.o_kind, after: r.o_after, abandoned: r.o_abandoned, status: r.o_status,
  headers: r.o_headers, body: r.o_body, leaseUntil: r.o_lease, reason: r.o_reason,
})

const registration = (r: RegisterRow): Registration => !r.o_registered
  ? { registered: false, highest: BigInt(r.o_highest!) }
  : r.o_oldest === null ? { registered: true, until: 0 } : { registered: true, oldest: BigInt(r.o_oldest), until: Number(r.o_until) }

/**
 * The batchers of one store on `pool`. At most a quarter of the pool's connections run batches
 * of one operation at once: the attempt log and the markers need connections too.
 */
export function groupCommit(pool: pg.Pool, q: Queries, write: SequencedQuery): GroupCommit {
  const options: BatchOptions = { maxInFlight: Math.max(1, Math.floor((pool.options.max ?? 10) / 4)), isolate: refusedAndRolledBack }

  /** Runs a batch function whose rows carry `o_i`, the 1-based index of the call they answer. */
  async function many<R, O>(n: number, query: Named, values: unknown[], map: (row: R) => O): Promise<O[]> {
    const { rows } = await write<R & { o_i: number }>(query, values.map((v) => (Array.isArray(v) ? arrayLiteral(v) : v)))
    const out = new Array<O>(n)
    for (const r of rows) out[r.o_i - 1] = map(r)
    if (rows.length !== n) throw new Error(`batch of ${n} answered ${rows.length} rows`)
    return out
  }

  /** the claim arrays, parameters 3–12 of the admit batch and 1–10 of the claim batch */
  const claimColumns = (calls: readonly ClaimCall[]): unknown[][] => [
    calls.map((c) => c.key.route), calls.map((c) => c.key.scope), calls.map((c) => c.key.key),
    calls.map((c) => c.req.fingerprint), calls.map((c) => c.req.claimId),
    calls.map((c) => Math.round(c.req.leaseMs)), calls.map((c) => Math.round(c.req.ttlMs)),
    calls.map((c) => c.req.retryUnknown), calls.map((c) => c.now), calls.map((c) => c.req.probe ?? null),
  ]

  const fence = batcher((calls: readonly FenceCall[]) => many(calls.length, q.fenceMany,
    [calls.map((c) => c.resource), calls.map((c) => c.token.toString()), calls.map((c) => c.now)],
    (r: FenceRow) => fenceResult(fenceFields(r))), options)

  const claim = batcher((calls: readonly ClaimCall[]) => many(calls.length, q.claimMany, claimColumns(calls),
    (r: ClaimRow) => claimResult(claimFields(r))), options)

  const admit = batcher((calls: readonly AdmitCall[]) => many(calls.length, q.admitMany,
    [calls.map((c) => c.fence.resource), calls.map((c) => c.fence.token.toString()), ...claimColumns(calls)],
    (r: FenceRow & ClaimRow): AdmitResult => {
      const f = fenceResult(fenceFields(r))
      return f.accepted ? { fence: f, claim: claimResult(claimFields(r)) } : { fence: f }
    }), options)

  const settle = batcher(async (calls: readonly SettleCall[]) => {
    const cols: unknown[][] = Array.from({ length: 12 }, () => [])
    for (const c of calls) {
      const d = c.done
      const row = [
        c.key.route, c.key.scope, c.key.key, c.claimId, d?.kind ?? null, Math.round(c.ttlMs ?? 0),
        d?.kind === 'completed' ? d.response.status : d?.kind === 'not_stored' ? d.status : null,
        d?.kind === 'completed' ? JSON.stringify(d.response.headers) : null,
        d?.kind === 'completed' ? d.response.body : null,
        d?.kind === 'unknown' ? d.reason : null,
        c.now,
        d?.kind === 'unknown' && d.probeInMs !== undefined ? Math.max(0, Math.round(d.probeInMs)) : null,
      ]
      row.forEach((v, i) => cols[i].push(v))
    }
    return many(calls.length, q.settleMany, cols, (r: SettleRow) => r.o_kind === null ? undefined : releaseResult(r.o_kind, r.o_lapsed))
  }, options)

  const register = batcher((calls: readonly RegisterCall[]) => many(calls.length, q.registerMany,
    [calls.map((c) => c.resource), calls.map((c) => c.token.toString()), calls.map((c) => c.id), calls.map((c) => Math.round(c.holdMs)), calls.map((c) => c.now)],
    registration), options)

  const unregister = batcher(async (calls: readonly UnregisterCall[]) => {
    await write(q.unregisterMany, [calls.map((c) => c.resource), calls.map((c) => c.id), calls.map((c) => c.holdMs), calls.map((c) => c.now)].map(arrayLiteral))
    return calls.map(() => undefined)
  }, options)

  return { fence, claim, admit, settle, register, unregister }
}
