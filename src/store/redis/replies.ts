/**
 * The Redis scripts' answers (./lua.ts): their shapes, and each turned into the text fields that
 * ../replies.ts decodes into the `Store` results, once for Redis and PostgreSQL.
 */
import { claimResult, fenceResult, releaseResult } from '../shared/replies.js'
import type { ClaimResult, FenceResult, ReleaseResult } from '../contract/store.js'

/** A sequenced script's answer: the store's sequence after it, and the script's own answer. */
export type SequencedReply<T> = [number | string | Buffer, T]

/** A cluster's slot-sequenced script's answer: the slot's sequence after it, the node id of the master that ran it, the script's own answer. */
export type SlotSequencedReply<T> = [number | string | Buffer, string | Buffer, T]

/** FENCE's answer (ADMIT's first four fields): accepted 0|1, highest, since ('' when unknown), raised 0|1. */
export type FenceReply = [number, string | Buffer, string | Buffer, number]

/** FENCE's answer as a `FenceResult`. */
export const fenceOf = (r: FenceReply): FenceResult =>
  fenceResult({ accepted: Number(r[0]) === 1, highest: r[1].toString(), since: r[2].toString(), raised: Number(r[3]) === 1 })

/**
 * CLAIM's answer (ADMIT's from its fifth field), read as Buffers (a stored body is bytes): kind,
 * after, abandoned, status, headers, body, leaseUntil, reason; '' where the kind has none.
 */
export type ClaimReply = Buffer[]

/** CLAIM's answer as a `ClaimResult`. @throws Error on a kind this version does not know */
export const claimOf = (r: ClaimReply): ClaimResult => {
  const [kind, after, abandoned, status, headers, body, leaseUntil, reason] = r
  return claimResult({
    kind: kind.toString(), after: after.toString(), abandoned: abandoned.length > 0, status: status.toString(),
    headers: headers.length ? headers.toString() : null, body, leaseUntil: leaseUntil.toString(), reason: reason.toString(),
  })
}

/** RELEASE's answer: kind, and '1' when it undid a lapsed lease. */
export type ReleaseReply = (string | Buffer)[]

/** RELEASE's answer as a `ReleaseResult`. @throws Error on a kind this version does not know */
export const releaseOf = (r: ReleaseReply): ReleaseResult => releaseResult(r[0].toString(), r[1]?.toString() === '1')

/** ADMIT's answer: FENCE's fields, then CLAIM's when the fence accepted. */
export type AdmitReply = [...FenceReply, ...ClaimReply]
