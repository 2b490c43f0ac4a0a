/**
 * Every response the gateway makes itself is an RFC 9457 problem (application/problem+json)
 * with the contract's `type` URNs, from one table (`PROBLEMS`) and written by one serializer
 * (`Problem.body`, `Problem.responseHeaders`). On the proxy listener every one is written by
 * ./refuse.ts — the front door's, the routes', admission's; on the admin listener by its error
 * handler (./admin.ts, `toResponse`).
 */

import type { ServerResponse } from 'node:http'
import type { Outcome } from './outcomes.js'
import { TracelessError } from './traceless-error.js'

interface ProblemKind { status: number; title: string; outcome: Outcome }

/** Problem types by the last part of their URN (`urn:fencegate:problem:<name>`). */
export const PROBLEMS = {
  'fencing-token-required': { status: 428, title: 'Fencing token required', outcome: 'token_missing' },
  'fencing-token-malformed': { status: 400, title: 'Fencing token malformed', outcome: 'token_malformed' },
  'fencing-resource-missing': { status: 400, title: 'Fencing resource cannot be determined', outcome: 'token_malformed' },
  'stale-fencing-token': { status: 412, title: 'Stale fencing token', outcome: 'stale' },
  'idempotency-key-required': { status: 400, title: 'Idempotency key required', outcome: 'key_missing' },
  'idempotency-key-malformed': { status: 400, title: 'Idempotency key malformed', outcome: 'key_malformed' },
  'idempotency-key-reused': { status: 422, title: 'Idempotency key reused with another request', outcome: 'key_reused' },
  'request-in-flight': { status: 409, title: 'A request with this idempotency key is in flight', outcome: 'in_flight' },
  'outcome-unknown': { status: 409, title: 'Outcome of the first attempt unknown', outcome: 'outcome_unknown' },
  'response-not-stored': { status: 409, title: 'Response of the first attempt was not stored', outcome: 'replayed' },
  'no-route': { status: 404, title: 'No route', outcome: 'no_route' },
  // the front door's (./front-door.ts): answered on the listener, never counted as requests
  'request-malformed': { status: 400, title: 'Bad Request', outcome: 'bad_request' },
  'request-timeout': { status: 408, title: 'Request timeout', outcome: 'bad_request' },
  'request-headers-too-large': { status: 431, title: 'Request headers too large', outcome: 'bad_request' },
  'http-version-not-supported': { status: 505, title: 'HTTP version not supported', outcome: 'bad_request' },
  'bad-path': { status: 400, title: 'Path not accepted', outcome: 'bad_request' },
  'body-too-large': { status: 413, title: 'Request body too large', outcome: 'bad_request' },
  'upstream-unavailable': { status: 502, title: 'Upstream unavailable', outcome: 'upstream_error' },
  'upstream-timeout': { status: 504, title: 'Upstream timeout', outcome: 'outcome_unknown' },
  'gateway-error': { status: 500, title: 'Gateway error', outcome: 'gateway_error' },
  'store-state-lost': { status: 503, title: 'Store lost its state', outcome: 'store_error' },
  'store-unavailable': { status: 503, title: 'Store unavailable', outcome: 'store_error' },
  'serialize-timeout': { status: 503, title: 'Older writes to this resource still in flight', outcome: 'serialize_timeout' },
  // the lease service (contract §3a, src/leases/): not request outcomes, never counted in fencegate_requests_total
  'lease-held': { status: 409, title: 'Another holder\'s lease on this resource is live', outcome: 'bad_request' },
  'lease-request-invalid': { status: 400, title: 'Lease request not accepted', outcome: 'bad_request' },
  'lease-not-found': { status: 404, title: 'No live lease on this resource', outcome: 'bad_request' },
  'lease-token-required': { status: 401, title: 'Lease service token required', outcome: 'bad_request' },
  'method-not-allowed': { status: 405, title: 'Method not allowed', outcome: 'bad_request' },
  'unauthorized': { status: 401, title: 'Admin token required', outcome: 'bad_request' },
  'forbidden': { status: 403, title: 'Admin write action not allowed', outcome: 'bad_request' },
  // admin API (audit, resolve): not request outcomes, never counted in fencegate_requests_total
  'bad-request': { status: 400, title: 'Bad admin request', outcome: 'bad_request' },
  'record-not-found': { status: 404, title: 'No idempotency record under this key', outcome: 'bad_request' },
  'not-resolvable': { status: 409, title: 'The record\'s outcome is not unknown', outcome: 'bad_request' },
} as const satisfies Record<string, ProblemKind>

export type ProblemName = keyof typeof PROBLEMS

const IDEMPOTENCY_ERRORS: ReadonlySet<ProblemName> = new Set(['idempotency-key-reused', 'request-in-flight', 'outcome-unknown', 'response-not-stored'])

/** Stripe's error types: `idempotency_error`, `invalid_request_error` (4xx), `api_error` (5xx). */
const errorType = (name: ProblemName, status: number): string =>
  IDEMPOTENCY_ERRORS.has(name) ? 'idempotency_error' : status >= 500 ? 'api_error' : 'invalid_request_error'

/** A gateway-made error response; `extra` members are added to the problem body. */
export class Problem extends TracelessError {
  readonly status: number
  readonly type: string
  readonly title: string
  outcome: Outcome
  constructor(
    readonly name_: ProblemName,
    readonly detail: string,
    readonly extra: Record<string, string | number> = {},
    /** response headers, e.g. Retry-After (seconds) */
    readonly headers: Record<string, string> = {},
  ) {
    super(detail)
    this.name = 'Problem'
    const kind: ProblemKind = PROBLEMS[name_]
    this.status = kind.status
    this.title = kind.title
    this.type = `urn:fencegate:problem:${name_}`
    this.outcome = kind.outcome
  }

  /**
   * The RFC 9457 body, serialised; `instance` (RFC 9457 §3.1.5) holds the request id. Also a
   * Stripe-style `error` member ({type, code, message}), for clients that detect failure by it.
   */
  body(requestId?: string, more: Record<string, string> = {}): string {
    const error = { type: errorType(this.name_, this.status), code: this.name_, message: this.detail }
    return JSON.stringify({ type: this.type, title: this.title, status: this.status, detail: this.detail, ...(requestId ? { instance: requestId } : {}), ...this.extra, ...more, error })
  }

  /**
   * @param requestId the request's id: the body's `instance`, and echoed in `idHeader`
   * @param idHeader the request id header's name (lower case); default x-request-id
   * @param more members for this response only, e.g. `timeline` (the audit view's address)
   */
  toResponse(requestId?: string, idHeader = 'x-request-id', more?: Record<string, string>): Response {
    return new Response(this.body(requestId, more), { status: this.status, headers: this.responseHeaders(requestId, idHeader) })
  }

  /**
   * Writes the problem as the response to a request of the proxy listener.
   * @param requestId the request's id: the body's `instance`, and echoed in `idHeader`
   * @param idHeader the request id header's name (lower case)
   * @param more members for this response only, e.g. `timeline` (the audit view's address)
   */
  respond(outgoing: ServerResponse, requestId: string, idHeader: string, more?: Record<string, string>): void {
    const body = this.body(requestId, more)
    const headers: Record<string, string | number> = this.responseHeaders(requestId, idHeader)
    headers['content-length'] = Buffer.byteLength(body)
    outgoing.writeHead(this.status, headers)
    outgoing.end(body)
  }

  /** The response's header fields: the problem's media type, no caching, its own (Retry-After), the request id. */
  responseHeaders(requestId?: string, idHeader = 'x-request-id'): Record<string, string> {
    const headers: Record<string, string> = { 'content-type': 'application/problem+json', 'cache-control': 'no-store', ...this.headers }
    if (requestId) headers[idHeader] = requestId
    return headers
  }
}

/**
 * What the 503 reads of the store's error: a full store's (StoreFull, src/store/contract/errors.ts) limit,
 * its size and when room comes. Read by shape, so that this module imports nothing of the store.
 */
export interface StoreRefusal {
  readonly name: string
  readonly limit?: string
  readonly max?: number
  /** epoch ms */
  readonly until?: number
}

/** What a full store's 503 says: which limit, and that nothing was forgotten to make room. */
const FULL: Record<string, (max: number) => string> = {
  max_records: (max) => `The store holds its limit of ${max} unexpired idempotency records (store.maxRecords) and forgets none before its ttl, so this request's new key cannot be recorded; nothing was forwarded. Raise store.maxRecords, shorten idempotency.ttl, or use a store on disk.`,
  max_resources: (max) => `The store holds its limit of ${max} fencing resources (store.maxResources) and never forgets a high-water mark, so this request's new resource cannot be fenced; nothing was forwarded. Raise store.maxResources, or use a store on disk.`,
  max_attempts: (max) => `The store's attempt log holds its limit of ${max} entries (store.maxAttempts); nothing was forwarded.`,
  disk: () => 'The store\'s disk refuses writes (full, or read-only), so this request\'s new state cannot be recorded; nothing was forwarded. Replays of stored keys and refusals of stale tokens are still answered.',
}

/** Whole seconds until `at` (epoch ms), at least 1: a Retry-After (RFC 9110 §10.2.3). */
export const secondsUntil = (at: number, now = Date.now()): string => String(Math.max(1, Math.ceil((at - now) / 1000)))

/**
 * The 503 a request gets when the store cannot answer (contract §4: fail closed, nothing
 * forwarded). Every StoreError becomes it in one place per listener (./refuse.ts, ./admin.ts); a full
 * store (StoreFull) is named with its limit, and Retry-After is when room comes at the earliest.
 */
export function storeUnavailable(e?: StoreRefusal): Problem {
  const { name, limit, max, until } = e ?? {}
  if (name === 'StoreFull' && limit !== undefined && max !== undefined && FULL[limit]) {
    const wait = limit === 'disk' ? '5' : until === undefined ? '60' : secondsUntil(until)
    return new Problem('store-unavailable', FULL[limit](max), { limit, max }, { 'retry-after': wait })
  }
  return new Problem('store-unavailable', 'The gateway cannot reach its store, so it cannot check this request; nothing was forwarded.', {}, { 'retry-after': '1' })
}

/**
 * The 503 of a fenced or idempotent request while the store's state is lost (contract §3): the
 * epoch marker changed, or the store went back in time (src/store/state-loss/sequence.ts).
 */
export const stateLost = (): Problem =>
  new Problem('store-state-lost', 'The store has lost its state (high-water marks and idempotency records may be gone), so this request cannot be checked; nothing was forwarded. An operator must run `fencegate store accept-loss`.', {}, { 'retry-after': '5' })
