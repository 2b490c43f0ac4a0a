/**
 * `withLease`: a piece of work under a lease from the gateway's lease service (contract §3a),
 * whose token fences every write the work makes.
 *
 *   acquire   POST; 409 lease-held → wait Retry-After and ask again, up to `waitMs`
 *   renew     PUT with Fencing-Token every `renewEveryMs` (a third of the lease) while fn runs
 *   writes    lease.fetch / lease.send add Fencing-Token and the job's Idempotency-Key
 *   lost      a 412 on a renewal or a write (or renewals unanswered until the lease's end):
 *             lease.signal aborts at once, and with it every request made through lease.fetch
 *   release   DELETE when fn ends, unless the lease was lost
 *
 * A lease is not presumed lost because time passed: only the service's 412, or renewals that got
 * no answer until the lease would have ended, say so. A write sent in between reaches the gateway
 * and is refused there (412) when a newer holder took over: the fence, not the client's clock,
 * is what keeps a late writer out.
 */
import { hostname } from 'node:os'
import { randomBytes } from 'node:crypto'
import { decide, type Decision } from './decisions.js'
import { acquireLease, releaseLease, renewLease, type LeaseBody, type LeaseService } from './lease-api.js'
import { fencedFetch, parseBody, send, sleep, type FetchLike, type Sent, type SendOptions } from './send.js'

/** The lease was lost while the work ran: taken over or released (412), or not renewable until its end. */
export class LeaseLostError extends Error {
  override name = 'LeaseLostError'
  constructor(readonly resource: string, readonly token: string, readonly reason: 'stale' | 'expired', readonly decision?: Decision) {
    super(`the lease on ${resource} (token ${token}) is lost: ${reason === 'stale' ? 'a newer token took over or it was released (412)' : 'no renewal was answered before it ended'}`)
  }
}

/** No lease within `waitMs`, or the service refused the request (a bad resource, ttl or holder). */
export class LeaseUnavailableError extends Error {
  override name = 'LeaseUnavailableError'
  constructor(readonly resource: string, readonly decision: Decision, readonly body: unknown) {
    super(`no lease on ${resource}: ${decision.status || 'no answer'} ${decision.problem ?? decision.case} (${decision.action})`)
  }
}

/** What withLease tells `onEvent`: acquired, held, renewed, renew-failed, lost, released. */
export interface LeaseEvent {
  event: 'acquired' | 'held' | 'renewed' | 'renew-failed' | 'lost' | 'released'
  resource: string
  token?: string
  decision?: Decision
  [field: string]: unknown
}

export interface WithLeaseOptions extends LeaseService {
  /** who asks, unique per worker (default host-pid-random); a holder asking again replaces its own lease */
  holder?: string
  /** the lease's length: a duration ("30s") or ms; default the service's `defaultTtl` */
  ttl?: string | number
  /** the job's Idempotency-Key, added to every write through lease.fetch / lease.send */
  key?: string
  /** how long to wait for another holder's lease to end, ms (default 30 000) */
  waitMs?: number
  /** ends the wait, aborts the work's requests and releases the lease */
  signal?: AbortSignal
  /** defaults for lease.send */
  sendOptions?: SendOptions
  onEvent?: (e: LeaseEvent) => void
}

/** The lease as `fn` sees it. */
export interface Lease {
  readonly resource: string
  /** the Fencing-Token, a decimal string */
  readonly token: string
  readonly holder: string
  readonly ttlMs: number
  readonly renewEveryMs: number
  /** aborted when the lease is lost (reason: a LeaseLostError) or the caller's signal aborts */
  readonly signal: AbortSignal
  /** set once the lease is lost */
  readonly lost: LeaseLostError | undefined
  /** fetch with Fencing-Token and Idempotency-Key; relative URLs go to the gateway */
  fetch: FetchLike
  /** one write through lease.fetch, asked again while its answer says so (./send.ts) */
  send(input: string | URL, init?: RequestInit, o?: SendOptions): Promise<Sent>
}

/**
 * Takes the lease on `resource`, runs `fn` under it, renews it meanwhile and releases it after.
 * @returns what `fn` returns
 * @throws LeaseUnavailableError when no lease was granted within `waitMs`, or the service refused
 *   the request (400, 401, 404: decision dead-letter); what `fn` throws (a LeaseLostError when its
 *   requests were aborted because the lease was lost)
 */
export async function withLease<T>(resource: string, fn: (lease: Lease) => Promise<T>, options: WithLeaseOptions): Promise<T> {
  const o = options
  const holder = o.holder ?? `${hostname()}-${process.pid}-${randomBytes(3).toString('hex')}`
  const emit = (e: Omit<LeaseEvent, 'resource'>) => o.onEvent?.({ resource, ...e } as LeaseEvent)
  const grant = await acquire(resource, holder, o, emit)
  const token = grant.body.token
  const control = new AbortController()
  let lost: LeaseLostError | undefined
  let done = false
  let timer: NodeJS.Timeout | undefined
  let expiresAt = grant.sentAt + grant.body.ttlMs
  const renewEveryMs = Math.max(1, grant.body.renewEveryMs)

  const lose = (reason: 'stale' | 'expired', decision?: Decision) => {
    if (lost || done) return
    lost = new LeaseLostError(resource, token, reason, decision)
    clearTimeout(timer)
    emit({ event: 'lost', token, reason, decision })
    control.abort(lost)
  }
  const onCallerAbort = () => control.abort(o.signal?.reason)
  o.signal?.addEventListener('abort', onCallerAbort, { once: true })

  const renew = async () => {
    if (lost || done) return
    const r = await renewLease(o, resource, token, AbortSignal.timeout(renewEveryMs))
    if (lost || done) return
    if (r.decision.action === 'done') {
      expiresAt = r.sentAt + (r.body?.ttlMs ?? grant.body.ttlMs)
      emit({ event: 'renewed', token, decision: r.decision })
    } else if (r.decision.action === 'stop') {
      return lose('stale', r.decision)
    } else {
      emit({ event: 'renew-failed', token, decision: r.decision })
      if (Date.now() >= expiresAt) return lose('expired', r.decision)
    }
    schedule(r.decision.action === 'done' ? renewEveryMs : Math.min(renewEveryMs, Math.max(50, expiresAt - Date.now())))
  }
  const schedule = (ms: number) => { timer = setTimeout(() => { void renew() }, ms); timer.unref() }
  schedule(renewEveryMs)

  const leaseFetch = fencedFetch({ gateway: o.gateway, token, key: o.key, signal: control.signal, fetch: o.fetch })
  const watched: FetchLike = async (input, init) => {
    const r = await leaseFetch(input, init)
    if (r.status !== 412) return r
    // read the refusal before the abort, which would cut its body off
    const body = await r.arrayBuffer()
    const refused = new Response(body, { status: r.status, statusText: r.statusText, headers: r.headers })
    lose('stale', decide({ status: r.status, headers: r.headers, body: parseBody(Buffer.from(body).toString('utf8'), r.headers.get('content-type')) }))
    return refused
  }
  const lease: Lease = {
    resource, token, holder,
    ttlMs: grant.body.ttlMs,
    renewEveryMs,
    signal: control.signal,
    get lost() { return lost },
    fetch: watched,
    send: (input, init = {}, so) => send(watched, input, init, { ...o.sendOptions, ...so, signal: control.signal }),
  }
  try {
    return await fn(lease)
  } finally {
    clearTimeout(timer)
    o.signal?.removeEventListener('abort', onCallerAbort)
    const wasLost = lost
    done = true
    if (!wasLost) {
      const r = await releaseLease(o, resource, token, AbortSignal.timeout(Math.max(1000, renewEveryMs)))
      emit({ event: 'released', token, decision: r.decision })
    }
  }
}

/** POST until granted, waiting out lease-held and backing off on 503 or no answer, within `waitMs`. */
async function acquire(resource: string, holder: string, o: WithLeaseOptions, emit: (e: Omit<LeaseEvent, 'resource'>) => void): Promise<{ body: LeaseBody; sentAt: number }> {
  const started = Date.now()
  const deadline = started + (o.waitMs ?? 30_000)
  for (let n = 1; ; n++) {
    if (o.signal?.aborted) throw o.signal.reason
    const r = await acquireLease(o, resource, holder, o.ttl, o.signal)
    if (r.decision.action === 'done' && r.body?.token) {
      emit({ event: 'acquired', token: String(r.body.token), holder, ttlMs: r.body.ttlMs, renewEveryMs: r.body.renewEveryMs, expiresAt: r.body.expiresAt, waitedMs: Date.now() - started, tries: n, decision: r.decision })
      return { body: { ...r.body, token: String(r.body.token) }, sentAt: r.sentAt }
    }
    if (r.decision.action !== 'retry-after' && r.decision.action !== 'backoff') throw new LeaseUnavailableError(resource, r.decision, r.body)
    // Retry-After is whole seconds; a little jitter keeps waiting holders from asking in step
    const wait = (r.decision.retryAfterMs ?? Math.min(2000, 100 * 2 ** (n - 1))) + Math.floor(Math.random() * 100)
    emit({ event: 'held', holder: r.body?.holder, expiresAt: r.body?.expiresAt, retryAfterMs: r.decision.retryAfterMs, decision: r.decision })
    if (Date.now() + wait > deadline) throw new LeaseUnavailableError(resource, r.decision, r.body)
    await sleep(wait, o.signal)
  }
}
