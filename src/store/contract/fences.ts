/**
 * The fencing side of the Store interface (./store.ts, where each promise is stated): a
 * resource's high-water mark, what a fence and an `admit` answer, and the registrations of
 * `fencing.serialize: store`.
 */
import type { ClaimResult } from './records.js'

/** A resource's high-water mark as the store keeps it. */
export interface FenceMark {
  highest: bigint
  /**
   * When `highest` was first accepted, epoch ms: when the lease generation it names took over.
   * The clock is the `now` of the call that raised the mark (the gateway's), except on postgres
   * for a mark raised by an older gateway through the v1 functions (the database's clock).
   * Undefined for a mark written before fencegate kept it (or, on redis, raised by an older
   * gateway sharing the store). The suite checks the `now` kept; the older layouts are checked
   * in sqlite.test.ts, redis.test.ts and postgres.test.ts.
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

/**
 * `f` with `since` replaced: an object literal, not a spread (a spread of a result with a
 * number and a bigint field goes through V8's generic clone, microseconds on every fenced request).
 */
export function withSince(f: FenceResult, since: number): FenceResult {
  const out: FenceResult = { accepted: f.accepted, highest: f.highest, since }
  if (f.raised) out.raised = true
  return out
}
