/**
 * The idempotency side of the Store interface (./store.ts, where each promise is stated): the
 * record's key, a claim and what it finds, how an attempt ended, and the operator's view of
 * unknown outcomes (list, resolve).
 */
import type { UnknownReason } from '../../outcomes.js'

/** Identifies one idempotency record: (route, hash of scope, idempotency key). */
export interface RecordKey {
  /** the route's name */
  route: string
  /**
   * hex SHA-256 of the filled scope template, or "" when the route has none (src/idempotency/
   * read.ts); the stores keep it as an opaque string
   */
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

export interface ClaimRequest {
  fingerprint: string
  /** unique id of this attempt; `finish`, `renew` and `release` name it */
  claimId: string
  /** how long the in-flight record holds the key before it counts as abandoned, ms */
  leaseMs: number
  /** how long the record lives in all, ms (contract `idempotency.ttl`) */
  ttlMs: number
  /**
   * `unknownOutcome: retry` (at-least-once): a record whose outcome is unknown — finished as
   * unknown, or in flight past its lease — is taken over (`claimed` with `after`) instead of
   * reported as `unknown`
   */
  retryUnknown: boolean
  /**
   * `idempotency.settle` (contract §4a): the filled probe request, opaque text the gateway
   * writes and reads (it holds the key). Kept with the record while it is in flight or unknown,
   * dropped when it is completed, not stored, released, resolved or settled; absent on a route
   * without settle.
   */
  probe?: string
}

/**
 * What `claim` found:
 * - `claimed`: the key is ours; forward the request. `after` says what came before when
 *   this claim replaced an earlier attempt whose outcome is unknown (a possible duplicate
 *   effect), absent for a fresh key.
 * - `completed`: replay `response`.
 * - `not_stored`: the first attempt completed with `status` but its response was too large to
 *   keep; status 0 when an operator resolved an unknown outcome as completed (`resolve`).
 * - `in_flight`: another attempt holds the key until `leaseUntil` (epoch ms).
 * - `unknown`: the first attempt's outcome is unknown (`reason`) and the claim does not retry
 *   unknowns (`retryUnknown` false).
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
  /** when the lease ran out, epoch ms, for a crashed holder; 0 when the attempt was finished as unknown (`finish`) */
  leaseUntil: number
  /** when the record is forgotten and the key usable as new, epoch ms */
  expiresAt: number
  /** the filled probe request its claim carried (`ClaimRequest.probe`); absent without settle */
  probe?: string
  /** how many probes were taken (`Store.takeProbe`); absent before the first */
  probes?: number
  /**
   * when the next probe may be taken, epoch ms on the store's clock; absent before the first
   * probe of a crashed holder's record (then due `afterMs` past `leaseUntil`)
   */
  nextProbe?: number
}

/**
 * What `takeProbe` did:
 * - `taken`: this caller sends probe number `probes` (the new count) with the record's `probe`
 *   request; `abandoned` when the record was in flight past its lease and became unknown
 *   (reason `crash`) with this call, counted once as a claim finding it would be;
 * - `not_due`: nothing written — the record is not unknown (settled, resolved, taken over,
 *   expired, never claimed), holds no probe, its next probe is not due yet, or another caller
 *   took probe `seen + 1` first.
 */
export type ProbeTake =
  | { kind: 'taken'; probe: string; probes: number; reason: UnknownReason; abandoned?: true }
  | { kind: 'not_due' }

/** What a probe's answer says of the first attempt (contract §4a `applied` / `notApplied`). */
export type Settlement =
  | { kind: 'applied'; response: StoredResponse }
  | { kind: 'not_applied' }

/**
 * What `settle` did: `settled` — the record was unknown with the probe count given and is now
 * completed with the probe's response (`applied`) or deleted (`not_applied`); `moved` — left
 * alone: the record is no longer that unknown outcome (an operator resolved it, a retry took it
 * over, a later probe was taken, it expired).
 */
export type SettleResult = { kind: 'settled'; reason: UnknownReason } | { kind: 'moved' }

/** What an operator declares about an attempt whose outcome is unknown (`fencegate resolve`). */
export type Resolution = 'completed' | 'failed'

/**
 * What `resolve` did:
 * - `resolved`: the record was unknown (`reason`), or in flight past its lease (reason `crash`),
 *   and now is deleted (`failed`) or completed without a stored response (`completed`);
 * - `not_found`: no record under the key (never used, expired, released or resolved `failed`);
 * - `refused`: the record is in another `state` and was left alone: an attempt still inside
 *   its lease, or one whose outcome is known.
 */
export type ResolveResult =
  | { kind: 'resolved'; reason: UnknownReason }
  | { kind: 'not_found' }
  | { kind: 'refused'; state: 'in_flight' | 'completed' | 'not_stored' }

/**
 * What `release` did with the record of the claim it names:
 * - `released`: deleted it; the key is claimable as new;
 * - `restored`: put back the unknown outcome the claim had taken over (`ClaimResult.after`), as
 *   it read before that claim (same reason, same expiry), for an operator to settle;
 * - `not_held`: left it alone — the claim no longer holds it (finished, released, taken over by
 *   another claim, settled by an operator, expired), or never did.
 * `lapsed`: the record was not in flight any more but an unknown outcome (reason `crash`) that
 * only this claim's own lease running out had made (a claim that found it so, without taking it
 * over); the release undid that.
 */
export type ReleaseResult = { kind: 'released' | 'restored'; lapsed?: true } | { kind: 'not_held' }

/**
 * How an attempt ended, written with `finish`. `unknown.probeInMs` (`idempotency.settle`): the
 * record's first probe is due this long after `finish`, on the store's clock.
 */
export type Completion =
  | { kind: 'completed'; response: StoredResponse }
  | { kind: 'not_stored'; status: number }
  | { kind: 'unknown'; reason: UnknownReason; probeInMs?: number }

/** The store operations of `idempotency.settle` (contract §4a), part of `Store` (./store.ts). */
export interface SettleStore {
  /**
   * `idempotency.settle` (contract §4a): take the next probe of an unknown outcome, atomically
   * with reading the record. Taken when the record is unknown — finished as unknown, or in
   * flight past its lease (it becomes unknown, reason `crash`, as a claim finding it would make
   * it) — holds a probe, `seen` probes were taken so far, and the next is due: at `nextProbe`
   * when one was set (by `finish`'s `probeInMs` or an earlier take), else `afterMs` past the
   * lapsed lease. Then the count becomes `seen + 1` and the next probe is due `nextInMs` from
   * now on the store's clock: that is also this probe's own lease, so no other gateway probes
   * the key before it (choose it above the upstream timeout).
   * @returns see ProbeTake
   * @throws StoreError when the store cannot answer, or after `close()`
   */
  takeProbe(key: RecordKey, p: { seen: number; afterMs: number; nextInMs: number }, now: number): Promise<ProbeTake>
  /**
   * Settle an unknown outcome by the answer to probe number `probes`, atomically with reading
   * the record: only while it is still unknown with that probe count (an operator's `resolve`,
   * a retry's takeover or a later probe wins). `applied`: completed with the probe's response,
   * kept `ttlMs` from `now`, replayed as any completed record; `not_applied`: deleted, the key's
   * next attempt is a first attempt.
   * @throws StoreError when the store cannot answer, or after `close()`
   */
  settle(key: RecordKey, probes: number, as: Settlement, ttlMs: number, now: number): Promise<SettleResult>
}
