/**
 * A fetch-shaped function that adds a job's Fencing-Token and Idempotency-Key to every request
 * (contract §3, §4), and `send`: one write, asked again while the answer says so (retry-after,
 * backoff: same key, same token), decided by ./decisions.ts. Global `fetch` by default.
 */
import { hash } from 'node:crypto'
import { decide, isRetry, type Decision } from './decisions.js'

/** The shape of `fetch` the client uses and hands out. */
export type FetchLike = (input: string | URL, init?: RequestInit) => Promise<Response>

export interface FencedFetchOptions {
  /** the gateway's base URL; relative inputs (`/accounts/a/charges`) are resolved against it */
  gateway?: string
  /** the Fencing-Token: a canonical decimal integer (contract §3), or a function read per request */
  token: string | number | bigint | (() => string)
  /** the job's Idempotency-Key, sent unless the request sets its own */
  key?: string
  /** aborts every request made through the function (e.g. a lease's signal) */
  signal?: AbortSignal
  /** the fetch underneath; default the global one */
  fetch?: FetchLike
}

/**
 * A fetch that sends `Fencing-Token` and `Idempotency-Key` (unless the request has them), is
 * aborted by `signal` as well as by the request's own, and does not follow redirects.
 * @throws what the underlying fetch throws; after `signal` aborted, its reason
 */
export function fencedFetch(o: FencedFetchOptions): FetchLike {
  const base = o.fetch ?? globalThis.fetch
  return (input, init = {}) => {
    const headers = new Headers(init.headers)
    const token = typeof o.token === 'function' ? o.token() : String(o.token)
    headers.set('fencing-token', token)
    if (o.key !== undefined && !headers.has('idempotency-key')) headers.set('idempotency-key', o.key)
    const signals = [o.signal, init.signal ?? undefined].filter((s): s is AbortSignal => s !== undefined)
    const signal = signals.length > 1 ? AbortSignal.any(signals) : signals[0]
    const url = typeof input === 'string' && o.gateway && input.startsWith('/') ? `${o.gateway.replace(/\/+$/, '')}${input}` : input
    // a write's redirect is the answer, never followed (fetch would resend it, as a GET for a 302)
    return base(url, { redirect: 'manual', ...init, headers, ...(signal && { signal }) })
  }
}

/** What `send` ends with: the last answer and its decision, and every decision on the way. */
export interface Sent {
  decision: Decision
  /** 0 when no answer came */
  status: number
  headers: Headers
  /** the body parsed as JSON when it is JSON, else its text ('' without an answer) */
  body: unknown
  replayed: boolean
  /** one decision per request sent, in order (the last is `decision`) */
  attempts: Decision[]
  /** the error of the last request when no answer came */
  error?: unknown
}

export interface SendOptions {
  /** requests in all, the first included (default 5) */
  maxAttempts?: number
  /** the longest total wait between requests, ms (default 30 000); a longer Retry-After ends the loop */
  maxWaitMs?: number
  /** the first backoff when an answer gives no Retry-After, ms; it doubles per attempt (default 200) */
  backoffMs?: number
  /** the signal that aborts the requests (a lease's): ends the loop, and an abort is decided `stop` */
  signal?: AbortSignal
  /** sees every decision as it is made, with its answer */
  onAnswer?: (d: Decision, answer: { status: number; body: unknown; replayed: boolean }) => void
}

/** Waits `ms`, or until `signal` aborts (at once when it has); never rejects, leaves no listener behind. */
export const sleep = (ms: number, signal?: AbortSignal) => new Promise<void>((resolve) => {
  if (signal?.aborted) return resolve()
  const t = setTimeout(done, ms)
  function done() { clearTimeout(t); signal?.removeEventListener('abort', done); resolve() }
  signal?.addEventListener('abort', done, { once: true })
})

/**
 * An answer's body as the client reads it: the parsed JSON when its Content-Type says JSON
 * (application/json, application/problem+json: RFC 9457) and it parses, else its text.
 */
export const parseBody = (text: string, type: string | null): unknown => {
  if (!/json/i.test(type ?? '')) return text
  try { return JSON.parse(text) } catch { return text }
}

/**
 * Sends one write through `f` and asks again, with the same key and token, while the decision is
 * `retry-after` or `backoff` — after Retry-After, else a doubling backoff — up to `maxAttempts`
 * requests and `maxWaitMs` of waiting. Ends with the first other decision, or the last retry
 * decision when a bound is reached (the caller then requeues the job, key unchanged).
 * An abort of the request (a lost lease) ends it with `stop`; its reason is in `error`.
 * @throws nothing: a failed request is decided as "no answer" (status 0)
 */
export async function send(f: FetchLike, input: string | URL, init: RequestInit = {}, o: SendOptions = {}): Promise<Sent> {
  const maxAttempts = o.maxAttempts ?? 5
  let waited = 0
  const attempts: Decision[] = []
  for (let n = 1; ; n++) {
    let out: Sent
    try {
      const r = await f(input, init)
      const text = await r.text()
      const body = parseBody(text, r.headers.get('content-type'))
      const decision = decide({ status: r.status, headers: r.headers, body })
      out = { decision, status: r.status, headers: r.headers, body, replayed: r.headers.get('idempotent-replayed') === 'true', attempts }
    } catch (error) {
      const aborted = (o.signal?.aborted ?? false) || (init.signal?.aborted ?? false) || (error as Error)?.name === 'LeaseLostError'
      const decision: Decision = aborted
        ? { action: 'stop', case: 'aborted', reason: 'the request was aborted (the lease was lost, or the caller gave up): stop, do not retry with this token', status: 0 }
        : decide({ status: 0 })
      out = { decision, status: 0, headers: new Headers(), body: '', replayed: false, attempts, error }
    }
    attempts.push(out.decision)
    o.onAnswer?.(out.decision, { status: out.status, body: out.body, replayed: out.replayed })
    if (!isRetry(out.decision) || n >= maxAttempts || o.signal?.aborted) return out
    const wait = out.decision.retryAfterMs ?? (o.backoffMs ?? 200) * 2 ** (n - 1)
    if (waited + wait > (o.maxWaitMs ?? 30_000)) return out
    waited += wait
    await sleep(wait, o.signal)
    if (o.signal?.aborted) return out
  }
}

/**
 * The attempt log's key hash of an idempotency key (contract §8: `fencegate resolve --key-hash`,
 * admin `/unknown`): hex SHA-256 of the scope part and the key. `scope` is the route's
 * `idempotency.scope` template as this request fills it (e.g. the Authorization header's value);
 * leave it out for a route without scope.
 */
export function keyHash(key: string, scope?: string): string {
  const s = scope === undefined ? '' : hash('sha256', scope, 'hex')
  return hash('sha256', `${s}\n${key}`, 'hex')
}
