/**
 * What one request was and what the gateway decided about it: one object per request, created
 * by `observe` (src/gateway.ts), filled along the path, and read once at the end for the
 * metrics, the SERVER span, the attempt log entry and the access line. Plain data: telemetry and
 * audit read it without knowing the router or the request path. Who writes each field:
 *
 *   requestId, method                   src/gateway.ts (`observe`)
 *   route, pattern                      src/request-path.ts
 *   resource, token, highest, lateMs,   src/admission/
 *     keyHash, fingerprint
 *   result, abandoned, duplicate        src/idempotency/ (counted as admission and the record step find them)
 *   overtaken                           src/fencing/request-window.ts (the window's end)
 *   upstreamStatus, upstreamMs, unknown src/forward/send.ts
 *   outcome                             src/refuse.ts (every refusal, every request nobody is left to
 *                                       answer); src/forward/ (forwarded, a replay, an answer that
 *                                       broke off: outcome unknown)
 *   code                                src/refuse.ts `unanswered` (499); src/forward/send.ts
 *                                       `brokenOff` (499 the client left mid-answer, 0 no status line)
 */
import type { IdempotencyResult, Outcome, UnknownReason } from './outcomes.js'

export interface RequestFacts {
  /** the client's X-Request-Id when sane, else a new one */
  requestId: string
  method: string
  /** the route's name and path pattern, once routed */
  route?: string
  pattern?: string
  /** contract §6 outcome; `forwarded` when nothing else was decided */
  outcome?: Outcome
  /** the status to count when it is not the one written: 499 the client left, 0 no status line */
  code?: number
  /** fencing: the filled resource, the token, the mark after the check */
  resource?: string
  token?: bigint
  highest?: bigint
  /** ended after a newer token of its resource was sent upstream */
  overtaken?: boolean
  /** the attempt log's key hash (hex SHA-256 of scope hash and key), computed once */
  keyHash?: string
  fingerprint?: string
  result?: IdempotencyResult
  /** this request's own outcome is unknown */
  unknown?: UnknownReason
  /** this request found an earlier attempt of its key abandoned past its lease */
  abandoned?: boolean
  /** forwarded again after an unknown outcome (unknownOutcome: retry) */
  duplicate?: boolean
  upstreamStatus?: number
  /** ms from sending upstream to its response headers (the effect's duration), when it answered */
  upstreamMs?: number
  /** a stale write: ms since the token that superseded it was first accepted (`supersededForMs`) */
  lateMs?: number
}

/**
 * A request's facts with every field present from the start (undefined until set): one hidden
 * class for the whole request path, so the many places that read and fill it stay monomorphic
 * instead of seeing a new shape after each field added.
 */
export function newFacts(requestId: string, method: string): RequestFacts {
  return {
    requestId, method, route: undefined, pattern: undefined, outcome: undefined, code: undefined,
    resource: undefined, token: undefined, highest: undefined, overtaken: undefined, keyHash: undefined,
    fingerprint: undefined, result: undefined, unknown: undefined, abandoned: undefined, duplicate: undefined,
    upstreamStatus: undefined, upstreamMs: undefined, lateMs: undefined,
  }
}
