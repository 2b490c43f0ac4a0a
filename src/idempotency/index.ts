/**
 * The idempotency record's side of a request (contract §4, draft-ietf-httpapi-idempotency-key-
 * header §2, Stripe's semantics where it is silent): counting results, noting what a claim
 * found, and for a claimed key the record step — what the upstream's answer (or its absence)
 * writes into the record — with the claim's lease kept alive until then. The claim itself is
 * made by the admission step (src/admission/), what a claim's result means for the client is
 * decided there (src/admission/decide.ts).
 */
import type { RequestFacts } from '../facts.js'
import type { IdempotencyResult, UnknownReason } from '../outcomes.js'
import type { CompiledRoute, RouteContext } from '../route.js'
import type { Metrics } from '../telemetry/metrics.js'
import type { Logger } from '../log.js'
import type { ClaimResult, RecordKey, Store } from '../store/index.js'
import { LeaseKeeper } from './lease.js'
import { EffectDurations } from './retry-after.js'
import { counterSeries } from '../telemetry/series.js'

/** The default of `idempotency.releaseStatuses`: upstream statuses that mean "not done, try again": the claim is released, not stored. */
export const RELEASE_STATUSES: ReadonlySet<number> = new Set([429, 502, 503, 504])

/** One route's claims: counting results, noting what claims found, and the claimed keys of its requests. */
export class RouteClaims {
  readonly route: string
  readonly cfg: NonNullable<CompiledRoute['idempotency']>
  readonly #metrics: Metrics
  readonly #leases: LeaseKeeper
  /** the route's newest effect durations, for a 409's Retry-After */
  readonly effects = new EffectDurations()

  readonly store: Store
  readonly log: Logger

  constructor(context: RouteContext) {
    const { route, store, log } = context
    this.store = store
    this.log = log
    this.route = route.name
    this.#metrics = context.metrics
    this.cfg = route.idempotency!
    this.#leases = new LeaseKeeper(store, this.cfg.lease, log, route.name)
  }

  readonly #counted = new Map<IdempotencyResult, { inc(): void }>()

  /** Counts a result (contract §6 `fencegate_idempotency_total`) and notes it on the request. */
  count(f: RequestFacts, result: IdempotencyResult): void {
    let c = this.#counted.get(result)
    if (c === undefined) this.#counted.set(result, c = counterSeries(this.#metrics.idempotency, this.route, result))
    c.inc()
    f.result = result
  }

  /**
   * Notes what a claim found before acting on it: an earlier attempt abandoned past its lease
   * (counted once, as an unknown outcome with reason crash), or a key forwarded again after an
   * unknown outcome (a possible duplicate effect).
   */
  noteFindings(f: RequestFacts, result: ClaimResult): void {
    const name = this.route
    if ('abandoned' in result && result.abandoned) {
      this.#metrics.unknownOutcomes.inc({ route: name, reason: 'crash' })
      f.abandoned = true
      this.log.warn('found an in-flight record past its lease: its holder crashed or hung, the outcome is unknown', { route: name, requestId: f.requestId, keyHash: f.keyHash })
    }
    if (result.kind === 'claimed' && result.after) {
      this.#metrics.duplicateForwards.inc({ route: name })
      f.duplicate = true
      this.log.warn('key forwarded again after an unknown outcome: the effect may happen twice', { route: name, after: result.after, requestId: f.requestId, keyHash: f.keyHash })
    }
  }

  /** The route's p90 effect duration (ms), when enough were observed: a 409's Retry-After. */
  expectedMs(): number | undefined {
    return this.effects.quantile(0.9)
  }

  /**
   * A claimed key: its lease is renewed until the record is written (`record`) or the request
   * is over (`end`, however it ended).
   */
  claimed(f: RequestFacts, key: RecordKey, claimId: string): Claim {
    return new Claim(this, f, key, claimId, this.#leases)
  }

}

/**
 * What came of a claimed request, as the record step sees it: the upstream's answer (`body`
 * undefined when it was larger than `Claim.captureBytes`, `upstreamMs` from sending to its
 * headers), or no answer (`sent` false: nothing reached the upstream; else the outcome is
 * unknown, for `reason`).
 */
export type UpstreamResult =
  | { kind: 'answer'; status: number; headers: [string, string][]; body: Buffer | undefined; upstreamMs: number }
  | { kind: 'failed'; sent: false }
  | { kind: 'failed'; sent: true; reason: UnknownReason }

/** One claimed key of one request. */
export class Claim {
  readonly #kept: { stop(): void }
  /** buffer the upstream body up to this many bytes to store it */
  readonly captureBytes: number

  constructor(private readonly r: RouteClaims, private readonly f: RequestFacts, private readonly key: RecordKey, private readonly claimId: string, leases: LeaseKeeper) {
    this.captureBytes = r.cfg.maxResponseBytes
    this.#kept = leases.keep(key, claimId, Date.now())
  }

  /** Stops renewing the lease; the request is over. */
  end(): void {
    this.#kept.stop()
  }

  /**
   * The record step: stores the answer (or its status when too large to keep), releases the
   * claim for a release status or when nothing was sent, or marks the outcome unknown. Releasing
   * puts back the unknown outcome the claim took over, if it took one over (`Store.release`):
   * this attempt did nothing upstream, so that earlier outcome is still unknown. Never throws:
   * a finish the store cannot write leaves the record in flight until its lease ends, then an
   * unknown outcome (reason crash); a release it did not answer is tried again by guardStore
   * until it does (src/store/runtime/give-back.ts), undoing that crash. The client gets its answer
   * either way (the failure is logged).
   */
  async record(o: UpstreamResult): Promise<void> {
    const { r, f, key, claimId } = this
    const { store, cfg: { ttl, releaseStatuses, settle } } = r
    this.#kept.stop() // the record leaves in_flight now
    try {
      if (o.kind === 'failed') {
        // idempotency.settle: the first probe is due `after` from now, on the store's clock
        if (o.sent) return await store.finish(key, claimId, settle ? { kind: 'unknown', reason: o.reason, probeInMs: settle.after } : { kind: 'unknown', reason: o.reason }, ttl, Date.now())
        r.count(f, 'released')
        await store.release(key, claimId)
        return
      }
      r.effects.add(o.upstreamMs)
      if (releaseStatuses.has(o.status)) { // idempotency.releaseStatuses (default RELEASE_STATUSES)
        r.count(f, 'released')
        await store.release(key, claimId)
      } else if (o.body === undefined) {
        r.count(f, 'not_stored')
        await store.finish(key, claimId, { kind: 'not_stored', status: o.status }, ttl, Date.now())
      } else {
        r.count(f, 'stored')
        await store.finish(key, claimId, { kind: 'completed', response: { status: o.status, headers: o.headers, body: o.body } }, ttl, Date.now())
      }
    } catch (e) {
      r.log.error(o.kind === 'answer' ? 'idempotency record not written after the upstream answered' : 'idempotency record not updated after an upstream failure', { route: r.route, requestId: f.requestId, keyHash: f.keyHash, error: (e as Error).message })
    }
  }
}
