/**
 * The contract's admission precedence (contract §3, §4) as one pure function over what was read
 * from the request and what the store answered. No I/O, no clock, no metrics: the caller
 * (./index.ts) makes the store calls and carries out the one decision returned.
 *
 *   1. fencing's own refusals: 428 fencing-token-required, 400 fencing-token-malformed or
 *      fencing-resource-missing (no store call was made);
 *   2. a stale token: 412 stale-fencing-token, even when its key has a stored response; then the
 *      check-to-apply window's refusals (`fencing.serialize`): 503 serialize-timeout;
 *   3. the key's own problem: 400 idempotency-key-required or -malformed, 413 body-too-large;
 *   4. the claim's result: replay (completed), 409 response-not-stored, 422
 *      idempotency-key-reused, 409 outcome-unknown, 409 request-in-flight (or wait, with
 *      `inFlight: wait` and time left); else forward.
 */
import type { ClaimResult, FenceRequest, StoredResponse } from '../store/index.js'
import type { FencingReason, IdempotencyResult } from '../outcomes.js'
import { Problem } from '../problems.js'
import type { FenceInput } from '../fencing/read.js'
import type { FenceAnswer } from '../fencing/request-window.js'
import type { ClaimInput, ClaimRefusal } from '../idempotency/read.js'
import { retryAfterSeconds } from '../idempotency/retry-after.js'

/** What idempotency read: nothing to claim (undefined), a claim to make, or the client's mistake. */
export type KeyInput = ClaimInput | ClaimRefusal | undefined

/** What the store (and the check-to-apply window) said about the token (src/fencing/request-window.ts). */
export type { FenceAnswer }

/**
 * What the claim found. `mayWait`: `idempotency.inFlight: wait` with time left; `now`, epoch ms;
 * `expectedMs`: the route's p90 effect duration, when observed (a 409's Retry-After).
 */
export interface ClaimAnswer {
  result: ClaimResult
  mayWait: boolean
  now: number
  expectedMs?: number
  /** the route has `idempotency.settle`: an unknown outcome is being probed (contract §4a) */
  settling?: boolean
}

/**
 * - `refuse`: answer `problem`; `fencing`: the rejection to count; `result`: the idempotency
 *   result to count; `lateMs`: a stale writer's lateness; `clientLeft`: nobody to answer (499);
 * - `replay`: answer the stored response;
 * - `wait`: the key is in flight: claim again after a pause;
 * - `forward`: send it upstream.
 */
export type Decision =
  | { kind: 'refuse'; problem: Problem; fencing?: FencingReason; result?: IdempotencyResult; lateMs?: number; clientLeft?: true }
  | { kind: 'replay'; response: StoredResponse; result: 'replayed' }
  | { kind: 'wait' }
  | { kind: 'forward' }

const FORWARD: Decision = { kind: 'forward' }
const WAIT: Decision = { kind: 'wait' }

/**
 * @param fence fencing's reading of the request (undefined: the route or request has no token)
 * @param key idempotency's reading (undefined: no claim to make)
 * @param fenceAnswer the store's answer for the token; undefined before any was asked
 * @param claimAnswer the claim's answer; undefined before it was made
 */
export function decide(fence: FenceInput | undefined, key: KeyInput, fenceAnswer?: FenceAnswer, claimAnswer?: ClaimAnswer): Decision {
  // 1. fencing's own refusals
  if (fence !== undefined && 'refused' in fence) return { kind: 'refuse', problem: fence.refused, fencing: fence.reason }
  // 2. the token against the mark, and the window's wait
  if (fenceAnswer !== undefined && fenceAnswer.kind !== 'current') return fenceRefusal(fence!, fenceAnswer)
  // 3. the key's own problem
  if (key !== undefined && 'refused' in key) return { kind: 'refuse', problem: key.refused }
  // 4. the claim's result
  return claimAnswer === undefined ? FORWARD : claimDecision(claimAnswer)
}

function fenceRefusal(fence: FenceRequest, a: Exclude<FenceAnswer, { kind: 'current' }>): Decision {
  switch (a.kind) {
    case 'stale': return stale(fence, a)
    case 'held': return {
      kind: 'refuse',
      problem: new Problem('serialize-timeout', a.where === 'store'
        ? `An older fencing token's request for this resource was still registered in the store (in flight through some gateway, or its outcome unknown) after ${a.waitedMs} ms; this request was not forwarded, so that a newer write never reaches the upstream before an older one. Retry later.`
        : `An older fencing token's request for this resource was still in flight (or its outcome unknown) after ${a.waitedMs} ms; this request was not forwarded, so that a newer write never reaches the upstream before an older one. Retry later.`,
      { token: String(fence.token) }, { 'retry-after': String(a.retryAfter) }),
    }
    case 'left': return {
      kind: 'refuse',
      clientLeft: true,
      problem: new Problem('serialize-timeout', 'The client closed the connection while the request waited for older fencing tokens; it was not forwarded.', { token: String(fence.token) }),
    }
  }
}

/**
 * The 412. `since` to `at` is how late the stale writer came (`supersededForMs`,
 * fencegate_fencing_stale_lateness_seconds, the attempt entry's lateMs).
 */
function stale(fence: FenceRequest, a: { highest: bigint; since?: number; at: number }): Decision {
  const extra: Record<string, string | number> = { resource: fence.resource, token: String(fence.token), highestToken: String(a.highest) }
  let when = ''
  let lateMs: number | undefined
  if (a.since !== undefined) {
    lateMs = Math.max(0, a.at - a.since)
    extra.supersededForMs = lateMs
    when = ` (token ${a.highest} took over ${lateMs >= 1000 ? `${(lateMs / 1000).toFixed(1)} s` : `${lateMs} ms`} before this request)`
  }
  const problem = new Problem('stale-fencing-token', `Fencing token ${fence.token} is older than ${a.highest}, the highest accepted for this resource: a newer lease holder has written since${when}.`, extra)
  return { kind: 'refuse', problem, fencing: 'stale', lateMs }
}

function claimDecision(a: ClaimAnswer): Decision {
  const r = a.result
  switch (r.kind) {
    case 'claimed':
      return FORWARD
    case 'completed':
      return { kind: 'replay', response: r.response, result: 'replayed' }
    case 'not_stored':
      // status 0: an operator declared the unknown outcome completed (`fencegate resolve --as completed`)
      return { kind: 'refuse', problem: r.status === 0
        ? new Problem('response-not-stored', 'An operator recorded that the first request with this key took effect (fencegate resolve --as completed) after its outcome was unknown; there is no response to replay, and it is not applied again.', { resolvedBy: 'operator' })
        : new Problem('response-not-stored', `The first request with this key completed with status ${r.status}, but its response was larger than this route stores (idempotency.maxResponseBytes); it was not applied again.`, { originalStatus: r.status }) }
    case 'mismatch':
      return { kind: 'refuse', result: 'key_reused', problem: new Problem('idempotency-key-reused', 'This idempotency key was already used with a different request (method, path, content type or body).') }
    case 'unknown':
      return { kind: 'refuse', problem: new Problem('outcome-unknown', `The first request with this key was sent upstream and no complete response came back (${r.reason}); it may or may not have taken effect. It is not sent again (unknownOutcome: reject) until ${a.settling ? 'the resource answers the gateway\'s probe (idempotency.settle), ' : ''}an operator resolves it or the key expires.`, { reason: r.reason }) }
    case 'in_flight':
      if (a.mayWait) return WAIT
      return { kind: 'refuse', result: 'in_flight', problem: new Problem('request-in-flight', 'A request with this idempotency key is being processed; retry after it completes.', {}, { 'retry-after': String(retryAfterSeconds(r.leaseUntil, a.now, a.expectedMs)) }) }
  }
}
