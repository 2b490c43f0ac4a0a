/**
 * The idempotency record's side of a request (contract §4, draft-ietf-httpapi-idempotency-key-
 * header §2, Stripe's semantics where it is silent): what a claim's result means for the client
 * (a replay, a 409, a 422), and for a claimed key the hooks `forward()` calls so the response is
 * stored before the client sees it (`Exchange`), with the claim's lease kept alive meanwhile.
 * The claim itself is made by the admission step (src/admission.ts), with fencing's check.
 */
import { RESPONSE_ALREADY_SENT } from '@hono/node-server/utils/response'
import type { Exchange } from '../context.js'
import type { RequestFacts } from '../facts.js'
import type { IdempotencyResult, UnknownReason } from '../outcomes.js'
import type { CompiledRoute } from '../route.js'
import type { Metrics } from '../telemetry/metrics.js'
import type { Logger } from '../log.js'
import type { ClaimResult, RecordKey, Store, StoredResponse } from '../store/types.js'
import { Problem } from '../problems.js'
import { flat, VIA } from '../forward/headers.js'
import { LeaseKeeper } from './lease.js'
import { EffectDurations, retryAfterSeconds } from './retry-after.js'

/** The default of `idempotency.releaseStatuses`: upstream statuses that mean "not done, try again": the claim is released, not stored. */
export const RELEASE_STATUSES: ReadonlySet<number> = new Set([429, 502, 503, 504])

/** A claim's result other than `claimed`, as the client gets it. */
export type RecordAnswer = { replay: StoredResponse } | { problem: Problem } | { wait: true }

/** One route's records: counting, answering claim results, and the exchange of a claimed key. */
export class Records {
  readonly #route: CompiledRoute
  readonly #store: Store
  readonly #metrics: Metrics
  readonly #log: Logger
  readonly #leases: LeaseKeeper
  readonly #cfg: NonNullable<CompiledRoute['idempotency']>
  /** the route's newest effect durations, for a 409's Retry-After */
  readonly #effects = new EffectDurations()

  constructor(route: CompiledRoute, store: Store, metrics: Metrics, log: Logger) {
    this.#route = route
    this.#store = store
    this.#metrics = metrics
    this.#log = log
    this.#cfg = route.idempotency!
    this.#leases = new LeaseKeeper(store, this.#cfg.lease, log, route.name)
  }

  readonly #counted = new Map<IdempotencyResult, { inc(): void }>()

  /** Counts a result (contract §6 `fencegate_idempotency_total`) and notes it on the request. */
  count(f: RequestFacts, result: IdempotencyResult): void {
    let c = this.#counted.get(result)
    if (c === undefined) this.#counted.set(result, c = this.#metrics.idempotency.labels(this.#route.name, result))
    c.inc()
    f.result = result
  }

  /**
   * Notes what a claim found before acting on it: an earlier attempt abandoned past its lease
   * (counted once, as an unknown outcome with reason crash), or a key forwarded again after an
   * unknown outcome (a possible duplicate effect).
   */
  noteFindings(f: RequestFacts, result: ClaimResult): void {
    const name = this.#route.name
    if ('abandoned' in result && result.abandoned) {
      this.#metrics.unknownOutcomes.inc({ route: name, reason: 'crash' })
      f.abandoned = true
      this.#log.warn('found an in-flight record past its lease: its holder crashed or hung, the outcome is unknown', { route: name, requestId: f.requestId, keyHash: f.keyHash })
    }
    if (result.kind === 'claimed' && result.after) {
      this.#metrics.duplicateForwards.inc({ route: name })
      f.duplicate = true
      this.#log.warn('key forwarded again after an unknown outcome: the effect may happen twice', { route: name, after: result.after, requestId: f.requestId, keyHash: f.keyHash })
    }
  }

  /**
   * What a claim result other than `claimed` gives the client.
   * @param mayWait `inFlight: wait` and time left: an in-flight key is waited for instead of refused
   */
  answer(f: RequestFacts, result: Exclude<ClaimResult, { kind: 'claimed' }>, mayWait: boolean): RecordAnswer {
    switch (result.kind) {
      case 'completed':
        this.count(f, 'replayed')
        f.outcome = 'replayed'
        return { replay: result.response }
      case 'not_stored':
        // status 0: an operator declared the unknown outcome completed (`fencegate resolve --as completed`)
        if (result.status === 0) return { problem: new Problem('response-not-stored', 'An operator recorded that the first request with this key took effect (fencegate resolve --as completed) after its outcome was unknown; there is no response to replay, and it is not applied again.', { resolvedBy: 'operator' }) }
        return { problem: new Problem('response-not-stored', `The first request with this key completed with status ${result.status}, but its response was larger than this route stores (idempotency.maxResponseBytes); it was not applied again.`, { originalStatus: result.status }) }
      case 'mismatch':
        this.count(f, 'key_reused')
        return { problem: new Problem('idempotency-key-reused', 'This idempotency key was already used with a different request (method, path, content type or body).') }
      case 'unknown':
        return { problem: new Problem('outcome-unknown', `The first request with this key was sent upstream and no complete response came back (${result.reason}); it may or may not have taken effect. It is not sent again (unknownOutcome: reject) until an operator resolves it or the key expires.`, { reason: result.reason }) }
      case 'in_flight':
        if (mayWait) return { wait: true }
        this.count(f, 'in_flight')
        return { problem: new Problem('request-in-flight', 'A request with this idempotency key is being processed; retry after it completes.', {}, { 'retry-after': String(retryAfterSeconds(result.leaseUntil, Date.now(), this.#effects.quantile(0.9))) }) }
    }
  }

  /**
   * The exchange of a claimed key: its lease is renewed until the record is finished or released
   * (./lease.ts); call `end()` once the request is over, however it ended.
   * @param after the reason of the unknown outcome this claim took over (`ClaimResult.after`), if
   *   any: when this attempt then does nothing upstream, that earlier outcome is still unknown and
   *   is put back, not released (which would forget it and let the next try count as fresh)
   */
  exchange(f: RequestFacts, key: RecordKey, claimId: string, after?: UnknownReason): Exchange & { end(): void } {
    const store = this.#store
    const giveBack = (): Promise<void> => after
      ? store.finish(key, claimId, { kind: 'unknown', reason: after }, this.#cfg.ttl, Date.now())
      : store.release(key, claimId)
    const log = this.#log
    const { ttl, maxResponseBytes, releaseStatuses } = this.#cfg
    const name = this.#route.name
    const kept = this.#leases.keep(key, claimId, Date.now())
    return {
      captureBytes: maxResponseBytes,
      end: () => kept.stop(),
      onResponse: async (res) => {
        kept.stop() // the record leaves in_flight now
        if (f.upstreamMs !== undefined) this.#effects.add(f.upstreamMs)
        try {
          if (releaseStatuses.has(res.status)) { // idempotency.releaseStatuses (default RELEASE_STATUSES)
            this.count(f, 'released')
            await giveBack()
          } else if (res.body === undefined) {
            this.count(f, 'not_stored')
            await store.finish(key, claimId, { kind: 'not_stored', status: res.status }, ttl, Date.now())
          } else {
            this.count(f, 'stored')
            await store.finish(key, claimId, { kind: 'completed', response: { status: res.status, headers: res.headers, body: res.body } }, ttl, Date.now())
          }
        } catch (e) {
          // The effect happened; the client still gets its response. The record stays in flight
          // until its lease ends and then counts as an unknown outcome (reason crash).
          log.error('idempotency record not written after the upstream answered', { route: name, requestId: f.requestId, keyHash: f.keyHash, error: (e as Error).message })
        }
      },
      onFailure: async (failure) => {
        kept.stop()
        try {
          if (!failure.sent) {
            this.count(f, 'released')
            await giveBack()
          } else {
            await store.finish(key, claimId, { kind: 'unknown', reason: failure.reason }, ttl, Date.now())
          }
        } catch (e) {
          log.error('idempotency record not updated after an upstream failure', { route: name, requestId: f.requestId, keyHash: f.keyHash, error: (e as Error).message })
        }
      },
    }
  }
}

/** Writes a stored response byte for byte; the request id is this request's, not the first one's. */
export function replay(outgoing: import('node:http').ServerResponse, res: StoredResponse, idHeader: string, requestId: string): Response {
  outgoing.writeHead(res.status, flat(res.headers, ['via', VIA, 'idempotent-replayed', 'true', idHeader, requestId], idHeader))
  outgoing.end(res.body)
  return RESPONSE_ALREADY_SENT
}
