/**
 * What a worker does with each answer to a fenced, idempotent write (docs/requests.md, "What a
 * client should do"): one decision per answer, in one table. The client (./send.ts,
 * ./with-lease.ts), the examples and the docs' table all read it from here.
 *
 * The decisions:
 *   done         the job's effect happened exactly once: ack it
 *   stop         the token is no longer good: stop this work, never retry with the same token;
 *                do not ack (the broker redelivers the job under a newer generation, or the next
 *                holder takes a new lease)
 *   retry-after  someone else is busy with this key or lease: ask again after Retry-After, with
 *                the same key and token
 *   backoff      nothing was done, or the gateway holds the key's outcome: wait Retry-After (or
 *                a growing backoff), then retry with the same key
 *   surface      the effect may or may not have happened: do not requeue blindly; dead-letter it
 *                with the key hash for an operator (`fencegate resolve --key-hash`), or wait for
 *                the gateway to settle it and ask again
 *   dead-letter  the request itself is wrong (a bug): retrying it cannot succeed
 *
 * Problem types are the contract's (§3, §3a, §4, §5): `urn:fencegate:problem:<name>`.
 */

/** What a worker does with an answer. */
export type Action = 'done' | 'stop' | 'retry-after' | 'backoff' | 'surface' | 'dead-letter'

/** The URN prefix of every problem the gateway answers with itself (contract §5). */
export const PROBLEM_PREFIX = 'urn:fencegate:problem:'

/** One row of the table: which answers it covers, what to do, and why. */
export interface Rule {
  /** the case's stable name, e.g. `replayed`, `request-in-flight`, `upstream-4xx` */
  case: string
  /** the statuses it covers: exact ones, or a class `2xx` … `5xx`; 0 is "no answer" */
  status: readonly (number | '1xx' | '2xx' | '3xx' | '4xx' | '5xx')[]
  /** the fencegate problem names it covers; absent: any body (the first matching row wins) */
  problems?: readonly string[]
  /** only answers with (true) or without (false) `Idempotent-Replayed: true` */
  replayed?: boolean
  action: Action
  /** one sentence: why this is the right thing to do */
  reason: string
}

/**
 * The table, in match order: the first row whose status, problem and replay flag fit decides.
 * Status 0 stands for "no answer" (the connection failed, the request timed out on the client).
 */
export const DECISIONS: readonly Rule[] = [
  { case: 'replayed', status: ['2xx'], replayed: true, action: 'done',
    reason: 'an earlier attempt with this key took effect and this is its stored response: ack, the effect is not applied again' },
  { case: 'applied', status: ['2xx'], action: 'done',
    reason: 'the write took effect: ack the job' },
  { case: 'response-not-stored', status: [409], problems: ['response-not-stored'], action: 'done',
    reason: 'the first attempt completed (its response was too large to keep, or an operator settled the key as completed): ack, nothing is applied again' },
  { case: 'request-in-flight', status: [409], problems: ['request-in-flight'], action: 'retry-after',
    reason: 'an attempt with this key is at the upstream now: ask again after Retry-After with the same key and token, and get its response replayed' },
  { case: 'outcome-unknown', status: [409], problems: ['outcome-unknown'], action: 'surface',
    reason: 'an attempt was sent and no complete answer came back, so it may have taken effect: requeueing only loops; dead-letter with the key hash for an operator (fencegate resolve --key-hash), or wait for the settling probe and ask again' },
  { case: 'lease-held', status: [409], problems: ['lease-held'], action: 'retry-after',
    reason: 'another holder\'s lease on the resource is live: ask again after Retry-After, up to a bound' },
  { case: 'stale-fencing-token', status: [412], action: 'stop',
    reason: 'the lease is gone, a newer token has written: stop, never retry with this token, do not ack; the broker redelivers with a newer generation (or the next lease has a newer token)' },
  { case: 'idempotency-key-reused', status: [422], problems: ['idempotency-key-reused'], action: 'dead-letter',
    reason: 'the key was used before for a different request: a bug in the caller (one key names one request); no retry can succeed' },
  { case: 'malformed', status: [400], problems: ['fencing-token-malformed', 'fencing-resource-missing', 'idempotency-key-required', 'idempotency-key-malformed', 'bad-path', 'lease-request-invalid'], action: 'dead-letter',
    reason: 'the token, key, resource, path or lease request (holder, ttl) is malformed or missing: a bug; the same request always gets this answer' },
  { case: 'fencing-token-required', status: [428], problems: ['fencing-token-required'], action: 'dead-letter',
    reason: 'the route needs a Fencing-Token and none was sent: a bug; the same request always gets this answer' },
  { case: 'lease-token-required', status: [401], problems: ['lease-token-required'], action: 'dead-letter',
    reason: 'the lease service wants its Bearer token (leases.token) and none or a wrong one was sent: a mistake in the worker\'s config' },
  { case: 'store-unavailable', status: [503], problems: ['store-unavailable', 'store-state-lost', 'serialize-timeout'], action: 'backoff',
    reason: 'nothing was forwarded: back off by Retry-After, then retry with the same key and token' },
  { case: 'upstream-unavailable', status: [429, 502, 503, 504], action: 'backoff',
    reason: 'the upstream did not do it, or did not answer in time; the gateway keeps the key\'s outcome: back off (by Retry-After when given), then retry with the same key, whose answer decides (a replay, outcome-unknown, or the effect)' },
  { case: 'no-answer', status: [0], action: 'backoff',
    reason: 'no answer reached the worker (connection refused or reset, a client timeout); the gateway keeps the key\'s outcome: back off, then retry with the same key' },
  { case: 'no-route', status: [404, 413], problems: ['no-route', 'body-too-large'], action: 'dead-letter',
    reason: 'no route takes this request, or its body is over the route\'s limit: a bug in the caller or the config' },
  { case: 'upstream-4xx', status: ['4xx'], action: 'dead-letter',
    reason: 'the upstream refused the request itself, and the answer is kept for the key: fix the job, a retry gets the same answer' },
  { case: 'gateway-error', status: [500], problems: ['gateway-error'], action: 'surface',
    reason: 'a bug on the gateway\'s request path (logged with the request id): whether the write went out is not known here, so surface it' },
  { case: 'upstream-5xx', status: ['5xx'], action: 'surface',
    reason: 'the upstream failed after it got the request (the answer is kept for the key and replayed): it may have had effects, so surface it rather than retry' },
  { case: 'unexpected', status: ['1xx', '3xx'], action: 'dead-letter',
    reason: 'an answer a write should not get (a redirect is passed through, not followed): the effect did not happen here' },
]

/** An answer as the client reads it: status, headers (a `Headers` or a plain object) and the body. */
export interface Answer {
  /** the HTTP status; 0 when no answer came */
  status: number
  headers?: Headers | Record<string, string | string[] | undefined>
  /** the body: parsed JSON (a problem) or text; only a problem's `type` is read */
  body?: unknown
}

/** A decision about one answer. */
export interface Decision {
  action: Action
  /** the rule's case name */
  case: string
  reason: string
  status: number
  /** the fencegate problem name of the answer (`stale-fencing-token`), when it is one of the gateway's */
  problem?: string
  /** Retry-After in ms, when the answer gave it (whole seconds, contract §5) */
  retryAfterMs?: number
}

const header = (h: Answer['headers'], name: string): string | undefined => {
  if (!h) return undefined
  if (typeof (h as Headers).get === 'function') return (h as Headers).get(name) ?? undefined
  const v = (h as Record<string, string | string[] | undefined>)[name] ?? Object.entries(h).find(([k]) => k.toLowerCase() === name)?.[1]
  return Array.isArray(v) ? v[0] : v
}

/** The fencegate problem name of a body (`{"type": "urn:fencegate:problem:NAME"}`), or undefined. */
export function problemName(body: unknown): string | undefined {
  const type = body && typeof body === 'object' ? (body as { type?: unknown }).type : undefined
  return typeof type === 'string' && type.startsWith(PROBLEM_PREFIX) ? type.slice(PROBLEM_PREFIX.length) : undefined
}

/** Retry-After as ms: delay-seconds (contract §5) or an HTTP date; undefined when absent or unreadable. */
export function retryAfterMs(value: string | undefined, now = Date.now()): number | undefined {
  if (value === undefined || value.trim() === '') return undefined
  if (/^\d+$/.test(value.trim())) return Number(value.trim()) * 1000
  const at = Date.parse(value)
  return Number.isNaN(at) ? undefined : Math.max(0, at - now)
}

const fits = (status: number, s: Rule['status'][number]): boolean =>
  typeof s === 'number' ? s === status : status >= Number(s[0]) * 100 && status < Number(s[0]) * 100 + 100

/**
 * The decision for one answer: the first row of DECISIONS that fits.
 * @param answer status (0: no answer), headers and body of the response
 * @returns the decision, with the answer's problem name and Retry-After (ms) when it has them
 */
export function decide(answer: Answer): Decision {
  const problem = problemName(answer.body)
  const replayed = header(answer.headers, 'idempotent-replayed') === 'true'
  const rule = DECISIONS.find((r) => r.status.some((s) => fits(answer.status, s))
    && (r.problems === undefined || (problem !== undefined && r.problems.includes(problem)))
    && (r.replayed === undefined || r.replayed === replayed)) ?? DECISIONS[DECISIONS.length - 1]
  const wait = retryAfterMs(header(answer.headers, 'retry-after'))
  return {
    action: rule.action,
    case: rule.case,
    reason: rule.reason,
    status: answer.status,
    ...(problem !== undefined && { problem }),
    ...(wait !== undefined && { retryAfterMs: wait }),
  }
}

/** Whether a decision means "ask again with the same key" (retry-after, backoff). */
export const isRetry = (d: Pick<Decision, 'action'>): boolean => d.action === 'retry-after' || d.action === 'backoff'
