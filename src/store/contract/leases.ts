/**
 * The lease side of the Store interface (contract §3a): the lease service issues fencing tokens
 * where the fence checks them. One lease per resource, kept beside its high-water mark (on Redis
 * in the mark's hash slot, so a Redis Cluster runs each operation as one script).
 *
 * Promises, which the conformance suite (test/store/conformance-leases.ts) checks on every engine:
 * - `acquireLease` is one check-and-set on the resource: of N concurrent acquisitions at most one
 *   is granted while a lease is live, across every gateway sharing the store. The token granted
 *   is max(every token issued for the resource, its high-water mark) + 1, and the grant raises
 *   the high-water mark to it (with `now` as its `since`), so the previous holder's writes are
 *   refused (412) from the takeover on. Tokens of one resource strictly rise, also across a
 *   restart of the gateway (the store is reopened) and while the store's state lives.
 * - Instants — a lease's end, whether it has passed — are on the store's clock (Redis `TIME`,
 *   PostgreSQL `clock_timestamp()`, the caller's `now` on memory and sqlite, as claims are), and
 *   answered on this process's clock (`StoreClock.toLocal`); the caller passes durations.
 * - `renewLease` and `releaseLease` act only on the resource's lease under exactly that token,
 *   and only while no newer token was accepted by the fence: a lease taken over, released, or
 *   passed by a token fenced from elsewhere is stale. A lease past its end that nobody took over
 *   yet is still the resource's lease and may be renewed or released.
 * - A lease is never evicted; a released one keeps its token (the next grant is above it).
 */

/** The largest fencing token (contract §3: 2^63−1), a lease's too. */
export const MAX_LEASE_TOKEN = 9223372036854775807n

/**
 * What every store's refusal of a grant says when the resource's newest token (its high-water
 * mark or its last lease's) is already MAX_LEASE_TOKEN: a StoreError of op `lease_acquire`,
 * nothing written. Plain ASCII without quotes: the Lua script and the plpgsql function raise it
 * as it is.
 */
export const LEASE_TOKENS_EXHAUSTED = 'the resource has token 9223372036854775807, the largest fencing token, so no lease can be granted above it; nothing was written'

/** A resource's lease as the store keeps it. */
export interface Lease {
  resource: string
  /** the fencing token of this lease, 1 ≤ token ≤ 2^63−1 */
  token: bigint
  /** who holds it, as the holder named itself (1–200 characters) */
  holder: string
  /** when it ends unless renewed, epoch ms on this process's clock */
  expiresAt: number
  /** its length, ms: each renewal extends it by this much from the renewal */
  ttlMs: number
}

/**
 * What `acquireLease` did: granted (with the lease it ended, when one was there, and that lease's
 * end on this process's clock: `expired` when it had passed it, else it was the same holder's own), or held by another holder's live
 * lease (nothing written).
 */
export type LeaseGrant =
  | { granted: true; lease: Lease; previous?: { token: bigint; holder: string; expiresAt: number; expired: boolean } }
  | { granted: false; held: Lease }

/**
 * What `renewLease` and `releaseLease` did: done (the lease after it), or stale — the token is not
 * the resource's lease — with the resource's newest token (the lease's or the mark's, the higher;
 * undefined when the resource has neither). Nothing is written when stale.
 */
export type LeaseChange = { done: true; lease: Lease } | { done: false; highest?: bigint }

export interface LeaseStore {
  /**
   * Grants `holder` the lease on `resource` for `ttlMs` when no other holder's lease is live at
   * `now` (a live lease of the same holder is replaced by a new one: a holder that lost the answer
   * asks again, and the token it never saw is refused from then on).
   * @param ttlMs 1000 ≤ ttlMs (the service bounds it by `leases.maxTtl`)
   * @throws StoreError when the store cannot answer (nothing granted), or after `close()`
   */
  acquireLease(resource: string, holder: string, ttlMs: number, now: number): Promise<LeaseGrant>
  /**
   * Extends the lease under `token` to `now` + its ttl (see the interface's promises).
   * @throws StoreError when the store cannot answer, or after `close()`
   */
  renewLease(resource: string, token: bigint, now: number): Promise<LeaseChange>
  /**
   * Ends the lease under `token` at once; its token stays the resource's newest issued. `lease` in
   * the answer is the lease as it was.
   * @throws StoreError when the store cannot answer, or after `close()`
   */
  releaseLease(resource: string, token: bigint, now: number): Promise<LeaseChange>
  /**
   * The resource's live lease at `now`, or undefined (none, released, or past its end). Reading
   * never writes.
   * @throws StoreError when the store cannot answer, or after `close()`
   */
  readLease(resource: string, now: number): Promise<Lease | undefined>
}
