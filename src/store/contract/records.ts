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
}

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

/** How an attempt ended, written with `finish`. */
export type Completion =
  | { kind: 'completed'; response: StoredResponse }
  | { kind: 'not_stored'; status: number }
  | { kind: 'unknown'; reason: UnknownReason }
