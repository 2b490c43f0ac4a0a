/**
 * The store interface: the only place fencegate keeps state. Every implementation (memory,
 * sqlite, and later redis, postgres) passes the one conformance suite in test/store/.
 *
 * Atomicity promises, which the request path relies on:
 * - `fence` is a single check-and-set: no two calls for one resource interleave between the
 *   comparison and the write, across every gateway process sharing the store.
 * - `claim` is a single check-and-set on the record key: of N concurrent claims of one key at
 *   most one returns `claimed`.
 * - `register` reads the resource's mark and writes the registration with no `fence` of that
 *   resource in between, from any process (`fencing.serialize: store`, src/fencing/window.ts).
 * - `complete`, `release` and `markUnknown` act only when the record is still held by the
 *   claim that names it (`claimId`): a claim taken over after its lease ended cannot be
 *   overwritten by the holder that lost it.
 * Durability: a high-water mark is never evicted or expired. Idempotency records live for
 * their `ttlMs`; an in-flight record whose lease passed is reported as abandoned.
 * Errors: any method may reject with `StoreError`; callers treat it as "the store cannot
 * answer" and fail closed.
 */

import type { AuditLog } from './attempt-log/types.js'
import type { UnknownReason } from '../outcomes.js'

/** Store kinds from the config (contract §2); also the `store` label in metrics. */
export type StoreKind = 'memory' | 'sqlite' | 'redis' | 'postgres'

/** A resource's high-water mark as the store keeps it. */
export interface FenceMark {
  highest: bigint
  /**
   * epoch ms (the clock of the gateway that raised the mark) when `highest` was first accepted:
   * when the lease generation it names took over. Undefined for a mark written before fencegate
   * kept it (or, on redis, by an older gateway sharing the store).
   */
  since?: number
}

/**
 * Result of a fencing check-and-set. `highest` is the high-water mark after the call and `since`
 * when it was first accepted — on a refusal, how long ago the stale writer was superseded.
 */
export interface FenceResult extends FenceMark {
  accepted: boolean
  /** set when this call raised the mark (or set the first one): a new lease generation began */
  raised?: true
}

/** A fencing check: the filled resource template and the request's token. */
export interface FenceRequest {
  resource: string
  token: bigint
}

/** What `admit` found: the fence's answer, and the claim's when the fence accepted. */
export interface AdmitResult {
  fence: FenceResult
  claim?: ClaimResult
}

/** Identifies one idempotency record: (route, hash of scope, idempotency key). */
export interface RecordKey {
  route: string
  /** hex SHA-256 of the filled scope template */
  scope: string
  /** the idempotency key, unquoted (1–255 visible ASCII characters) */
  key: string
}

/** A response as stored for replay: status, end-to-end header lines, body bytes. */
export interface StoredResponse {
  status: number
  /** header lines in order, lower-case names; several Set-Cookie lines stay several */
  headers: [string, string][]
  body: Buffer
}

/** Why the outcome of a forwarded request is unknown (contract §6 `reason`), shared with the request's facts. */
export type { UnknownReason }

export interface ClaimRequest {
  fingerprint: string
  /** unique id of this attempt; later calls must name it */
  claimId: string
  /** how long the in-flight record holds the key before it counts as abandoned, ms */
  leaseMs: number
  /** how long the record lives in all, ms (contract `idempotency.ttl`) */
  ttlMs: number
  /** `retry`: a record whose outcome is unknown may be claimed again (at-least-once) */
  retryUnknown: boolean
}

/**
 * What `claim` found:
 * - `claimed`: the key is ours; forward the request. `after` says what came before when
 *   this claim replaced an earlier attempt whose outcome is unknown (a possible duplicate
 *   effect), absent for a fresh key.
 * - `completed`: replay `response`.
 * - `not_stored`: the first attempt completed with `status` but its response was too large to keep.
 * - `in_flight`: another attempt holds the key until `leaseUntil` (epoch ms).
 * - `unknown`: the first attempt's outcome is unknown and the route is at-most-once.
 * - `mismatch`: the key was used with another fingerprint.
 * `abandoned` is set on the one call that found an in-flight record past its lease (its holder
 * crashed or hung): the moment the outcome became unknown, counted once.
 */
export type ClaimResult =
  | { kind: 'claimed'; after?: UnknownReason; abandoned?: true }
  | { kind: 'completed'; response: StoredResponse }
  | { kind: 'not_stored'; status: number }
  | { kind: 'in_flight'; leaseUntil: number }
  | { kind: 'unknown'; reason: UnknownReason; abandoned?: true }
  | { kind: 'mismatch' }

/**
 * A record whose outcome is unknown, as `Store.unknowns` lists it: finished as unknown by its
 * gateway, or still in flight past its lease (its gateway stopped), which counts as reason `crash`.
 */
export interface UnknownRecord {
  key: RecordKey
  reason: UnknownReason
  /** when the lease ran out, epoch ms, for a crashed holder; 0 when the attempt itself finished as unknown */
  leaseUntil: number
  /** when the record is forgotten and the key usable as new, epoch ms */
  expiresAt: number
}

/** What an operator declares about an attempt whose outcome is unknown (`fencegate resolve`). */
export type Resolution = 'completed' | 'failed'

/**
 * What `resolve` did:
 * - `resolved`: the record was unknown (`reason`), or in flight past its lease (reason `crash`),
 *   and now is released (`failed`) or completed without a stored response (`completed`);
 * - `not_found`: no record under the key (never used, expired, or released);
 * - `refused`: the record is in another `state` and was left alone: an attempt still inside
 *   its lease, or one whose outcome is known.
 */
export type ResolveResult =
  | { kind: 'resolved'; reason: UnknownReason }
  | { kind: 'not_found' }
  | { kind: 'refused'; state: 'in_flight' | 'completed' | 'not_stored' }

/** How an attempt ended, written with `finish`. */
export type Completion =
  | { kind: 'completed'; response: StoredResponse }
  | { kind: 'not_stored'; status: number }
  | { kind: 'unknown'; reason: UnknownReason }

export interface Store {
  readonly kind: StoreKind
  /**
   * True when every call completes synchronously in this process (memory): a timer could never
   * fire before it, so callers skip the timeout race. Not sqlite: it waits for another process's
   * lock on timers (bounded by its own busyTimeoutMs too), so it is raced like the network stores.
   */
  readonly inProcess?: boolean
  /**
   * Fencing check-and-set (contract §3): accept iff `token >= highest`, and then set
   * `highest := token`, atomically. A resource seen for the first time accepts any token.
   * When it raises the mark (or sets the first), `now` is kept with it as `since`, atomically.
   * @param resource the filled resource template
   * @param token 0 ≤ token ≤ 2^63−1
   * @param now epoch ms, the `since` of a mark this call raises; default Date.now()
   */
  fence(resource: string, token: bigint, now?: number): Promise<FenceResult>
  /**
   * `fence`, and — only when it accepts — `claim`, as one call: one round trip where the store
   * allows it (postgres: one function; memory and sqlite: one atomic section). A stale token
   * leaves the key untouched, as when the two calls are made one after the other. `now` is also
   * the `since` of a mark the fence raises.
   */
  admit(fence: FenceRequest, key: RecordKey, req: ClaimRequest, now: number): Promise<AdmitResult>
  /** Read the high-water mark of a resource, or undefined when none was accepted yet. */
  highest(resource: string): Promise<bigint | undefined>
  /** Read the high-water mark and its `since`, or undefined when none was accepted yet. Reading never writes. */
  mark(resource: string): Promise<FenceMark | undefined>
  /**
   * Claim an idempotency key atomically (draft-ietf-httpapi-idempotency-key-header §2.6).
   * An in-flight record past its lease counts as an attempt whose outcome is unknown
   * (reason `crash`): with `retryUnknown` it is taken over, else reported as `unknown`.
   */
  claim(key: RecordKey, req: ClaimRequest, now: number): Promise<ClaimResult>
  /**
   * Record how the attempt `claimId` ended; keeps the record for `ttlMs` from `now`.
   * A no-op when the claim is no longer held (taken over after its lease).
   */
  finish(key: RecordKey, claimId: string, done: Completion, ttlMs: number, now: number): Promise<void>
  /**
   * Extend the lease of the in-flight attempt `claimId` to `now + leaseMs`, while its exchange is
   * alive (the gateway renews its own claims: src/idempotency/lease.ts).
   * @returns true when the record is still in flight under `claimId` (renewed); false when it
   *   was finished, released, expired or taken over (nothing written)
   */
  renew(key: RecordKey, claimId: string, leaseMs: number, now: number): Promise<boolean>
  /** Give the key up: nothing was done upstream (502/503/504/429 or a connect failure). */
  release(key: RecordKey, claimId: string): Promise<void>
  /**
   * An operator settles an attempt whose outcome is unknown, atomically with reading it:
   * `failed` deletes the record (the key may be forwarded again); `completed` keeps it for
   * `ttlMs` from `now` as completed without a stored response — a `not_stored` record with
   * status 0, which later claims report as `not_stored` (409 response-not-stored).
   */
  resolve(key: RecordKey, as: Resolution, ttlMs: number, now: number): Promise<ResolveResult>
  /**
   * Every record now in the unknown state (see `UnknownRecord`), at most `limit` (default 1000),
   * only `route`'s when given; in no particular order. Off the request path: `fencegate unknown`,
   * admin `GET /unknown` and the `fencegate_unknown_outcomes_unresolved` gauge read it.
   */
  unknowns(now: number, options?: { route?: string; limit?: number }): Promise<UnknownRecord[]>
  /**
   * `fencing.serialize: store` (src/fencing/window.ts): registers the forwarded fenced write `id`
   * with `token` on `resource` until `deadline` (epoch ms) — atomically with reading the
   * resource's high-water mark: when `token` is below it nothing is written and the answer is
   * `registered: false` (a newer token was accepted since this one's fence). Registering an `id`
   * again replaces its token and deadline. Answers, as `olderRegistered` would right after the
   * write, the registrations of the resource with a lower token still live at `now`.
   */
  register(resource: string, token: bigint, id: string, deadline: number, now: number): Promise<Registration>
  /** The registrations of `resource` with a token below `token` still live at `now` (deadline > now). Reading never writes. */
  olderRegistered(resource: string, token: bigint, now: number): Promise<OlderWrites>
  /**
   * Ends the registration `id` of `resource`: deletes it, or — with `until` > 0 — keeps it until
   * `until` (epoch ms) whatever its deadline was (an unknown outcome the upstream may still
   * apply; a request that must stay registered longer). A no-op when it is gone.
   */
  unregister(resource: string, id: string, until?: number): Promise<void>
  /** The attempt log kept by this store (contract §8). */
  readonly audit: AuditLog
  /**
   * The state markers (contract §3): `epoch` is written when the store is first initialised
   * and never changes while its data lives; a different or missing epoch means the data was
   * lost (a Redis restarted without persistence, a replaced SQLite file, a recreated schema).
   * `accepted` is the epoch an operator accepted after such a loss. Reading never writes.
   */
  markers(): Promise<StateMarkers>
  /**
   * An operator's `fencegate store accept-loss`: writes a new epoch when none is left, and
   * marks the current one accepted so running gateways carry on with it.
   * @returns the accepted epoch
   */
  acceptLoss(): Promise<string>
  /** Answers when the store can serve requests; rejects with StoreError when not. */
  ping(): Promise<void>
  /** Flush and close connections or files; further calls reject. */
  close(): Promise<void>
}

/**
 * Older fenced writes of a resource still registered (`Store.register`, `fencing.serialize: store`):
 * `oldest` is the lowest token below the asked one whose registration has not expired (undefined
 * when none), `until` the latest deadline among those registrations (epoch ms; 0 when none).
 */
export interface OlderWrites {
  oldest?: bigint
  until: number
}

/** What `Store.register` did: registered (and what older writes it found), or refused because the mark passed the token. */
export type Registration = ({ registered: true } & OlderWrites) | { registered: false; highest: bigint }

/** See `Store.markers`. */
export interface StateMarkers {
  epoch?: string
  accepted?: string
}

/** The store could not answer: down, too slow, or full. Callers fail closed (503). */
export class StoreError extends Error {
  constructor(
    message: string,
    /** the store operation that failed, the `op` label in metrics */
    readonly op: string,
    options?: { cause?: unknown },
  ) {
    super(message, options)
    this.name = 'StoreError'
  }
}
