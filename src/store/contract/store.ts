/**
 * The store interface: the only place fencegate keeps state. Four implementations — memory
 * (../memory/), sqlite (../sqlite/), redis (../redis/, one server or a Redis Cluster) and
 * postgres (../postgres/) — each pass the one conformance suite, test/store/conformance.ts, run by
 * test/store/{memory,sqlite,redis,redis-cluster,redis-replicas,postgres}.test.ts. What this file
 * promises the suite checks, unless a sentence says it is not checked there (and where it is).
 *
 * Atomicity promises, which the request path relies on:
 * - `fence` is a single check-and-set: no two calls for one resource interleave between the
 *   comparison and the write, across every gateway process sharing the store (suite: 100
 *   shuffled tokens at once, and split between two clients where the store can be shared;
 *   sqlite.test.ts also runs two OS processes on one file).
 * - `claim` is a single check-and-set on the record key: of N concurrent claims of one key at
 *   most one returns `claimed` (suite: 100 at once, from one client and from two).
 * - `register` reads the resource's mark and writes the registration with no `fence` of that
 *   resource in between, from any process (`fencing.serialize: store`, src/fencing/window.ts;
 *   suite: 60 writes racing from two clients, so only on the stores that can be shared).
 * - `finish`, `renew` and `release` act only while the record is in flight under the claim that
 *   names it (`claimId`) — `release` also on the unknown outcome that claim's own expired lease
 *   left, which nobody took over — so a claim taken over after its lease ended cannot be
 *   overwritten, extended or deleted by the holder that lost it.
 * Durability: a high-water mark is never evicted or expired — not checked by the suite (no test
 * waits forever); memory.test.ts checks that a full memory store refuses a new resource rather
 * than forget a mark, redis.test.ts that a mark's key has no ttl. Idempotency records live for
 * their `ttlMs`; an in-flight record whose lease passed is an unknown outcome (reason `crash`),
 * reported as `abandoned` by the one claim that finds it first.
 * Errors: any method may reject with `StoreError`; callers treat it as "the store cannot answer"
 * and fail closed (503). The suite checks it after `close()` and for a half-failed `admit`; a
 * store that is down or goes away is tested in each store's own test file and in
 * test/store-faults.test.ts.
 */

import type { AuditLog } from '../attempt-log/types.js'
import type { StoreClock } from '../shared/clock.js'
import type { UnknownReason } from '../../outcomes.js'
import type { WriteSequence } from '../state-loss/sequence.js'
import type { LossNote } from '../state-loss/note.js'

import type { AdmitResult, FenceMark, FenceRequest, FenceResult, OlderWrites, Registration } from './fences.js'
import type { ClaimRequest, ClaimResult, Completion, RecordKey, ReleaseResult, Resolution, ResolveResult, SettleStore, UnknownRecord } from './records.js'
import type { StoreKind } from './kind.js'
import type { LeaseStore } from './leases.js'

// the shapes the interface speaks in, one module per side, imported from here
export type { AdmitResult, FenceMark, FenceRequest, FenceResult, OlderWrites, Registration } from './fences.js'
export type { ClaimRequest, ClaimResult, Completion, ProbeTake, RecordKey, SettleStore, ReleaseResult, Resolution, ResolveResult, Settlement, SettleResult, StoredResponse, UnknownRecord } from './records.js'
export { StoreError, StoreFull, type StoreLimit } from './errors.js'
/** Why the outcome of a forwarded request is unknown (contract §6 `reason`), shared with the request's facts. */
export type { UnknownReason }

export type { StoreKind }
export type { Lease, LeaseChange, LeaseGrant } from './leases.js'

export interface Store extends SettleStore, LeaseStore {
  readonly kind: StoreKind
  /**
   * True only for the memory store (MemoryStore sets it; SqliteStore and the stand-in of ../runtime/late.ts
   * set false, redis and postgres leave it out): every call settles in the turn of the event loop
   * it was made in, so no timer can fire before it. guardStore (../runtime/guard.ts) reads it: the calls of
   * such a store are not raced against `store.timeout`, so none times out and no late claim is
   * left to give back. sqlite is not one: it waits for another process's lock on timers (up to its
   * own busyTimeoutMs), so it is raced like the network stores. Not checked by the suite;
   * test/store/guard.test.ts checks guardStore with a store that is not in process.
   */
  readonly inProcess?: boolean
  /**
   * Only where the store itself drops entries before their time because the operator accepted it
   * (the memory store with `store.acceptRisks: [maxRecords]` / `[maxAttempts]`): `record` is called
   * with the route of each completed record dropped before its ttl, `attempt` for each attempt log
   * entry dropped within the retention. guardStore (../runtime/guard.ts) counts them.
   */
  watchEvictions?(record: (route: string) => void, attempt?: () => void): void
  /**
   * Redis and PostgreSQL: their clock against this process's (../shared/clock.ts). They take every
   * instant a guarantee depends on from it, inside the script or function — a claim's lease and
   * expiry, a renewal, a finish's expiry, a registration's deadline, a mark's `since` — so the
   * `now` a caller passes only carries durations (a deadline is `now` + how long); the instants
   * they answer to the request path (`leaseUntil`, `since`, `until`) are moved onto this process's
   * clock by the measured offset; `unknowns` lists its times on the store's clock, so every
   * gateway lists the same. Absent for memory and sqlite, whose callers share one host's clock
   * and whose `now` is the instant itself. Not checked by the suite beyond one claim whose `now`
   * is far from the store's clock (the suite drives time through `now`: those stores are opened
   * with `clock: 'caller'`); test/production/clock-skew.test.ts runs replicas under faketime.
   */
  readonly clock?: StoreClock
  /**
   * Fencing check-and-set (contract §3): accept iff `token >= highest`, and then set
   * `highest := token`, atomically. A resource seen for the first time accepts any token.
   * When it raises the mark (or sets the first), `now` is kept with it as `since`, atomically;
   * an equal token keeps the `since` there was.
   * @param resource the filled resource template
   * @param token 0 ≤ token ≤ 2^63−1, compared exactly (the caller has validated it: src/fencing/token.ts)
   * @param now epoch ms, the `since` of a mark this call raises; default Date.now()
   */
  fence(resource: string, token: bigint, now?: number): Promise<FenceResult>
  /**
   * `fence`, and — only when it accepts — `claim`, as one call. A stale token answers the
   * refusal with no `claim` and leaves the key untouched, as when the two calls are made one
   * after the other. `now` is the claim's clock and the `since` of a mark the fence raises.
   * One round trip where the store allows it: memory runs both in one synchronous section, sqlite
   * as one operation of its group commit, postgres as one function, redis on one server as one
   * script; on a Redis Cluster the mark and the record are in two slots, so it is FENCE and then
   * CLAIM, and a newer token may be fenced between them (as it could be just after; the request
   * is forwarded either way). Round trips and what may run between the steps are not checked by
   * the suite.
   *
   * Half failure: admit is fence, then claim. When the engine refuses the claim step itself while
   * the store answers (a write refused by a trigger or a constraint, a script error, a memory
   * store at capacity), admit rejects with StoreError, no claim is held, and the fence's decision
   * stands: the mark is left as a lone `fence` would have left it (raised to the token, with `now`
   * as its `since`, when it was below); a retry of the same admit with a new claimId is admitted.
   * Nothing undoes a raised mark: on a Redis Cluster the fence is on another slot, and lowering a
   * mark could let an older token in after a newer one was forwarded.
   * When the failure takes the whole call down instead, the mark may be left as it was: the store
   * unreachable or too slow, a full disk or an I/O error (SQLite and PostgreSQL roll the whole
   * transaction back; PostgreSQL does not re-fence after classes 08, 53 and 57, where a second
   * statement would only wait or fail the same way). On a Redis Cluster whose record master alone
   * fails, the fence on the other master is written. In every case: no claim of this call is
   * held, the mark is never above the token, and the retry is admitted. (A claim whose answer was
   * lost on the way — the store wrote it but the connection dropped, or it answered after the
   * timeout — is given back by guardStore in ../runtime/guard.ts, by its id, as soon as the store answers
   * again, also after its lease ended (`release`): test/hostile/lost-reply.test.ts.) The suite
   * checks the engine-refused case with each store's fault injector (`ConformanceOptions.failClaims`): the rejection, the raised mark, a
   * stale token still answered, and the retry; test/store/postgres.test.ts checks a statement
   * timeout leaving the mark as it was. The other whole-call failures are not checked by a test.
   * @throws StoreError when either step fails (as above), or after `close()`
   */
  admit(fence: FenceRequest, key: RecordKey, req: ClaimRequest, now: number): Promise<AdmitResult>
  /** Read the high-water mark of a resource, or undefined when none was accepted yet. */
  highest(resource: string): Promise<bigint | undefined>
  /**
   * Read the high-water mark and its `since`, or undefined when none was accepted yet. Reading
   * never writes (suite: a resource only read still takes its first token as a new mark).
   */
  mark(resource: string): Promise<FenceMark | undefined>
  /**
   * Claim an idempotency key atomically (draft-ietf-httpapi-idempotency-key-header §2.6).
   * An in-flight record past its lease counts as an attempt whose outcome is unknown
   * (reason `crash`): with `retryUnknown` it is taken over, else reported as `unknown`.
   */
  claim(key: RecordKey, req: ClaimRequest, now: number): Promise<ClaimResult>
  /**
   * Record how the attempt `claimId` ended; keeps the record for `ttlMs` from `now`.
   * A no-op when the claim is no longer held (finished, released, or taken over after its lease).
   */
  finish(key: RecordKey, claimId: string, done: Completion, ttlMs: number, now: number): Promise<void>
  /**
   * Extend the lease of the in-flight attempt `claimId` to `now + leaseMs`, while its exchange is
   * alive (the gateway renews its own claims: src/idempotency/lease.ts).
   * @returns true when the record is still in flight under `claimId` (renewed); false when it
   *   was finished, released or taken over (nothing written). A record past its ttl that no
   *   claim has replaced yet may still be renewed (true): its ttl is far longer than any lease, and
   *   the next claim of the key decides by ttl whatever the lease says.
   */
  renew(key: RecordKey, claimId: string, leaseMs: number, now: number): Promise<boolean>
  /**
   * Give the claim `claimId` back, atomically with reading the record: for when nothing was done
   * upstream — the request was never sent (also a claim whose answer was lost or came too late:
   * guardStore in ../runtime/guard.ts), or the upstream answered a status of `idempotency.releaseStatuses`
   * (default 429, 502, 503, 504). The record reads again as it did before the claim: deleted (the
   * key is claimable as new), or — when the claim took over an unknown outcome (`after`) — that
   * unknown outcome again, with its reason and the claim's expiry; the store keeps `after` on
   * the in-flight record for this, so the caller need not know it.
   * Held, besides in flight under `claimId`: an unknown outcome (reason `crash`) that only this
   * claim's lease running out made — found by a claim that did not take it over, so no request
   * was forwarded since, and not settled by an operator since. The gateway knows its own claim
   * was never used and undoes the crash (`lapsed`). Anything else — finished, taken over (even
   * if the new holder gave it back too), settled, released already, expired — is left alone.
   * @returns what was done (see ReleaseResult)
   */
  release(key: RecordKey, claimId: string): Promise<ReleaseResult>
  /**
   * An operator settles an attempt whose outcome is unknown, atomically with reading it:
   * `failed` deletes the record (the key may be forwarded again); `completed` keeps it for
   * `ttlMs` from `now` as completed without a stored response — a `not_stored` record with
   * status 0, which later claims report as `not_stored` (409 response-not-stored).
   */
  resolve(key: RecordKey, as: Resolution, ttlMs: number, now: number): Promise<ResolveResult>
  /**
   * Every record now in the unknown state (see `UnknownRecord`), at most `limit` (default 1000;
   * the default is not checked by the suite), only `route`'s when given; in no particular order.
   * Off the request path: `fencegate unknown`, admin `GET /unknown` and the
   * `fencegate_unknown_outcomes_unresolved` gauge read it.
   */
  unknowns(now: number, options?: { route?: string; limit?: number }): Promise<UnknownRecord[]>
  /**
   * The record of `key` when it is in the unknown state (as `unknowns` would list it), else
   * undefined: one read of one record, for a retry of a key on a route with
   * `idempotency.settle` (src/admission/settle.ts). Reading never writes.
   */
  unknownRecord(key: RecordKey, now: number): Promise<UnknownRecord | undefined>
  /**
   * `fencing.serialize: store` (src/fencing/window.ts): registers the forwarded fenced write `id`
   * with `token` on `resource` until `deadline` (epoch ms) — atomically with reading the
   * resource's high-water mark: when `token` is below it nothing is written and the answer is
   * `registered: false` (a newer token was accepted since this one's fence). Registering an `id`
   * again replaces its token and deadline. Answers, as `olderRegistered` would right after the
   * write, the registrations of the resource with a lower token still live at `now`.
   */
  register(resource: string, token: bigint, id: string, deadline: number, now: number): Promise<Registration>
  /**
   * The registrations of `resource` with a token below `token` still live at `now` (deadline >
   * now). Reading never writes (not checked by the suite).
   */
  olderRegistered(resource: string, token: bigint, now: number): Promise<OlderWrites>
  /**
   * Ends the registration `id` of `resource`: deletes it, or — with `until` > 0 — keeps it until
   * `until` (epoch ms) whatever its deadline was (an unknown outcome the upstream may still
   * apply; a request that must stay registered longer). A no-op when it is gone.
   */
  unregister(resource: string, id: string, until?: number): Promise<void>
  /**
   * The attempt log kept by this store (contract §8); its methods reject with StoreError after
   * `close()`, like the store's. guardStore passes it through without the timeout race: the
   * audit queue (src/audit/queue.ts) bounds, counts and logs its own failures.
   */
  readonly audit: AuditLog
  /**
   * The state markers (contract §3): `epoch` is written when the store is first initialised
   * and never changes while its data lives; a different or missing epoch means the data was
   * lost (a Redis restarted without persistence, a replaced SQLite file, a recreated schema).
   * `accepted` is the epoch an operator accepted after such a loss; `note`, what a gateway saw
   * when it retired the epoch. Memory: the epoch is made with the store and accepted until it is
   * retired (a process's memory is not lost behind its back).
   * Reading never writes. The suite checks that the epoch is there and stays; the loss, and that
   * a lost epoch stays lost until accept-loss, are checked in test/state-loss.test.ts.
   */
  markers(): Promise<StateMarkers>
  /**
   * An operator's `fencegate store accept-loss`: writes a new epoch when none is left (on a Redis
   * Cluster also when a copy of it is missing or differs), deletes the loss note, and marks the
   * current epoch accepted so running gateways carry on with it. The suite checks the answer and the markers after it; the
   * new epoch after a loss is checked in test/state-loss.test.ts.
   * @returns the accepted epoch
   */
  acceptLoss(): Promise<string>
  /**
   * The write sequence (../state-loss/sequence.ts): every write of the request path — fence, claim, admit,
   * finish, release, resolve, register, unregister — advances the store's sequence in the same
   * script, function or transaction and answers it; this gateway's highest is handed to each, and
   * a store below it refuses before changing anything (StoreWentBack). Not on a Redis Cluster (a
   * script reaches one slot only): there the epoch's copies and the replication ids stand alone.
   * The suite checks the refusal and that it changed nothing.
   */
  readonly sequence?: WriteSequence
  /**
   * A gateway that saw the store go back in time writes `note` (../state-loss/note.ts) and then a new
   * epoch, so that every gateway sharing the store sees the loss through the epoch marker, and
   * one started later through the note (../state-loss/watch.ts), until an operator accepts it;
   * `markers()` answers the note until `acceptLoss()` deletes it. The suite checks both;
   * test/state-loss.test.ts and test/production/ check gateways sharing a store.
   */
  retireEpoch(note: LossNote): Promise<void>
  /**
   * The last write the store's own disk refused (SQLite: SQLITE_FULL on a full disk,
   * SQLITE_READONLY, SQLITE_IOERR_*) when it came within the last minute, else undefined; absent
   * on stores without a disk of their own. Read by `/readyz` and `fencegate doctor`; checked in
   * test/disk-full.test.ts.
   */
  writeRefused?(): WriteRefusal | undefined
  /**
   * Redis Cluster with store.replicas N: one sentence per shard whose master had fewer than N
   * replicas connected at the last look (every state poll), naming its master and slots — its
   * writes are refused (503) — else []. Absent elsewhere. Read by `/readyz` and `fencegate doctor`.
   */
  replicaShortfalls?(): string[]
  /**
   * Answers when the store can serve requests; rejects with StoreError when not. The suite checks
   * an open store and a closed one; a store that is down, test/store-faults.test.ts.
   */
  ping(): Promise<void>
  /**
   * Close connections or files (sqlite first commits the writes already asked for; not checked
   * by the suite). Every later call rejects with StoreError whose `op` names it — `markers`,
   * `acceptLoss` (`accept_loss`), `unknownRecord` (`unknown_record`) and the attempt log's (`audit_append`, `audit_query`,
   * `audit_timeline`, `audit_fenced`) included.
   */
  close(): Promise<void>
}

/** See `Store.writeRefused`: SQLite's code (`SQLITE_FULL`, …), its message, and when, epoch ms. */
export interface WriteRefusal {
  code: string
  message: string
  at: number
}

/** See `Store.markers`. */
export interface StateMarkers {
  epoch?: string
  accepted?: string
  /** what a gateway saw when it retired the epoch (`Store.retireEpoch`); gone after accept-loss */
  note?: LossNote
}
