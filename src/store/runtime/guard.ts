/**
 * A store wrapped so that every call is timed, counted on failure, and bounded by
 * `store.timeout`: a call slower than that rejects with StoreError, and the request that needed
 * it fails closed.
 */
import type { Metrics } from '../../telemetry/metrics.js'
import { histogramSeries } from '../../telemetry/series.js'
import { tracingOn } from '../../telemetry/tracing.js'
import type { Logger } from '../../log.js'
import { GiveBacks, MAX_GIVE_BACK_MS } from './give-back.js'
import { StoreErrorLog } from './error-log.js'
import { keyHashOf } from '../contract/key-hash.js'
import { StoreError, StoreFull, type ClaimRequest, type ClaimResult, type RecordKey, type Store } from '../contract/store.js'

/** True for a StoreError of a call that never left this process: it wrote nothing. */
const unsent = (e: unknown): boolean => e instanceof StoreError && e.unsent

/** How often a full store, or one dropping entries the operator let it drop, is logged: once a minute. */
const FULL_LOG_MS = 60_000

/**
 * A Store that measures, counts errors and enforces the timeout on every call of `inner`.
 * Failures are logged once with their cause, then summarised once a minute (./error-log.ts);
 * a full store (StoreFull) is counted by limit and logged at most once a minute, and so are the
 * evictions the operator accepted. Claims never used — a claim or admit that failed or answered
 * too late, a release that failed — are given back by their id until the store takes them
 * (./give-back.ts); `close()` gives up on those still waiting (logged) before closing `inner`.
 */
export function guardStore(inner: Store, metrics: Metrics, timeoutMs: number, log: Logger): Store {
  const kind = inner.kind
  const lastLogged = new Map<string, number>()
  const errors = new StoreErrorLog(log, kind)
  const rarely = (what: string, now = Date.now()): boolean => {
    if (now - (lastLogged.get(what) ?? -Infinity) < FULL_LOG_MS) return false
    lastLogged.set(what, now)
    return true
  }
  inner.watchEvictions?.(
    (route) => {
      metrics.idempotencyEvicted.inc({ route })
      if (rarely('evicted')) log.warn('the memory store is full and drops completed idempotency records before their ttl (store.acceptRisks: maxRecords): a retry of a dropped key is forwarded again', { store: kind, route })
    },
    () => {
      metrics.auditDropped.inc({ reason: 'evicted' })
      if (rarely('attempts evicted')) log.warn('the memory store\'s attempt log is full and drops its oldest entries within audit.retention (store.acceptRisks: maxAttempts)', { store: kind })
    },
  )
  // each operation's duration child, so a call does not hash its labels (prom-client does per labels object)
  const durations = new Map<string, { observe(v: number): void }>()
  const traced = tracingOn()
  const duration = (op: string) => {
    let h = durations.get(op)
    if (h === undefined) durations.set(op, h = histogramSeries(metrics.storeDuration, kind, op))
    return h
  }
  const observe = (op: string, started: number) => {
    const seconds = (performance.now() - started) / 1000
    if (traced) metrics.storeDuration.observe({ store: kind, op }, seconds) // with its exemplar
    else duration(op).observe(seconds)
  }
  const failed = (op: string, e: unknown): StoreError => {
    metrics.storeErrors.inc({ store: kind, op })
    if (e instanceof StoreError && e.refusal) metrics.storeWritesRefused.inc({ store: kind, reason: e.refusal })
    const now = Date.now()
    if (e instanceof StoreFull) {
      metrics.storeFull.inc({ store: kind, limit: e.limit })
      if (!rarely(e.limit, now)) { /* logged this minute */ }
      else if (e.limit === 'disk') log.error('the store\'s disk refuses writes: requests that need new state are refused (503); replays and stale-token refusals are still answered', { store: kind, op, limit: e.limit, error: e.message })
      else log.error('the store is full and refuses new entries rather than forget one before its time: requests that need one are refused (503)', { store: kind, op, limit: e.limit, max: e.max, error: e.message })
    } else errors.failed(op, (e as Error).message)
    return e instanceof StoreError ? e : new StoreError(`${kind} ${op}: ${(e as Error).message}`, op, { cause: e })
  }
  // One promise a call, which times it, bounds it (a store out of process: a timer) and turns a
  // failure into a counted StoreError: every request makes one to three of these.
  const call = <T>(op: string, fn: () => Promise<T>): Promise<T> => {
    const started = performance.now()
    return new Promise<T>((resolve, reject) => {
      let done = false
      const timer = inner.inProcess ? undefined : setTimeout(() => {
        done = true
        observe(op, started)
        reject(failed(op, new StoreError(`store did not answer ${op} within ${timeoutMs} ms`, op)))
      }, timeoutMs)
      // an answer after the timeout is not measured again: the caller had its StoreError
      const settle = (ok: boolean, v: unknown) => {
        if (done) return
        done = true
        if (timer !== undefined) clearTimeout(timer)
        observe(op, started)
        if (ok) { errors.answered(); resolve(v as T) }
        else reject(failed(op, v))
      }
      let p: Promise<T>
      try {
        p = fn()
      } catch (e) {
        settle(false, e)
        return
      }
      p.then((v) => settle(true, v), (e) => settle(false, e))
    })
  }
  // claims never used, given back by their id until the store takes them (./give-back.ts)
  const giveBacks = new GiveBacks((key, claimId) => call('release', () => inner.release(key, claimId)), log, kind)
  /**
   * Before a claim of `key`: this gateway's claims of the same key it never used and is giving
   * back are given back first. After a heal the retry's claim and the give-back race to the
   * store; a claim past its lease that the retry met first would read to it as an abandoned
   * attempt, an unknown outcome (reason crash), for a request never sent. (A claim whose call is
   * still unanswered joins the give-backs once its connection answers or fails: a store cut off
   * and healed by a reset fails it at once.) Undefined on the common path: nothing is read while
   * no give-back waits.
   */
  const first = (key: RecordKey): Promise<void> | undefined => {
    if (giveBacks.waiting === 0) return undefined
    const ids = [...giveBacks.waitingFor(keyHashOf(key))]
    return ids.length ? giveBacks.now(key, ids) : undefined
  }
  /** key hash → claim ids whose claim call failed while the store has not answered it yet */
  const unanswered = new Map<string, Set<string>>()
  const own = (key: RecordKey): string[] => {
    const hash = keyHashOf(key)
    return [...new Set([...giveBacks.waitingFor(hash), ...(unanswered.get(hash) ?? [])])]
  }
  /**
   * A claim of `key`, after `first`. An answer that found an attempt abandoned past its lease
   * while this gateway holds an unused claim of the key (waiting to be given back, or its call
   * still unanswered: the store may have made it) may have met that very claim: it is given back
   * and the key claimed once more. Claimed then, it was this gateway's own claim, never sent; else
   * the first answer stands (someone else's attempt was abandoned, counted as such).
   */
  const claimAfter = <T>(key: RecordKey, go: () => Promise<T>, claimOf: (r: T) => ClaimResult | undefined): Promise<T> => {
    const once = () => go().then((r) => {
      const c = claimOf(r)
      if (c?.kind !== 'unknown' || !c.abandoned || (unanswered.size === 0 && giveBacks.waiting === 0)) return r
      const ids = own(key)
      if (!ids.length) return r
      return giveBacks.now(key, ids).then(go).then((again) => (claimOf(again)?.kind === 'claimed' ? again : r))
    })
    const before = first(key)
    return before ? before.then(once) : once()
  }
  /**
   * `call(op, attempt)` for an operation that may claim a key. The request fails closed (503,
   * nothing forwarded) when the call fails or times out, but the store may have made the claim
   * all the same: a slow store applies it afterwards, or it ran and its reply was lost (a reset,
   * a connection dropped, a partition). Either way the claim is given back by its id (`release`,
   * which deletes it or puts back the unknown outcome it took over, and undoes the unknown
   * outcome its own lease made if it ran out meanwhile), or the key would read as in flight and
   * then as an unknown outcome, for a request never sent. A late answer says whether there is a
   * claim to give back; without one the claim id is given back all the same (a no-op when it was
   * never made), unless the call never left this process (`StoreError.unsent`) or a full store
   * refused the claim (StoreFull: it made none).
   */
  const givingBack = <T>(op: string, attempt: Promise<T>, claimOf: (r: T) => ClaimResult | undefined, key: RecordKey, req: ClaimRequest): Promise<T> =>
    call(op, () => attempt).catch((e) => {
      const hash = keyHashOf(key)
      let ids = unanswered.get(hash)
      if (!ids) unanswered.set(hash, ids = new Set())
      ids.add(req.claimId)
      attempt.then((r) => {
        const c = claimOf(r)
        // the late call found an attempt abandoned past its lease and made it an unknown outcome
        // (or took it over): the request that would have counted it already got 503
        if (c && 'abandoned' in c && c.abandoned) metrics.unknownOutcomes.inc({ route: key.route, reason: 'crash' })
        if (c?.kind === 'claimed') giveBacks.add(key, req.claimId, req.ttlMs)
      }, (late) => { if (!unsent(late) && !(late instanceof StoreFull)) giveBacks.add(key, req.claimId, req.ttlMs) })
      // after the handlers above: from unanswered to given back (or not needed), nothing between
      attempt.finally(() => { ids.delete(req.claimId); if (ids.size === 0 && unanswered.get(hash) === ids) unanswered.delete(hash) }).catch(() => {})
      throw e
    })
  return {
    kind,
    inProcess: inner.inProcess,
    sequence: inner.sequence,
    writeRefused: inner.writeRefused?.bind(inner),
    replicaShortfalls: inner.replicaShortfalls?.bind(inner),
    retireEpoch: (note) => call('retire_epoch', () => inner.retireEpoch(note)),
    // read at each use: a store that connects late (./late.ts) has none before it connects
    get clock() { return inner.clock },
    fence: (resource, token, now) => call('fence', () => inner.fence(resource, token, now)),
    highest: (resource) => call('highest', () => inner.highest(resource)),
    mark: (resource) => call('mark', () => inner.mark(resource)),
    claim: (key, req, now) => claimAfter(key, () => givingBack('claim', inner.claim(key, req, now), (r) => r, key, req), (r) => r),
    admit: (fence, key, req, now) => claimAfter(key, () => givingBack('admit', inner.admit(fence, key, req, now), (r) => r.claim, key, req), (r) => r.claim),
    finish: (key, claimId, done, ttlMs, now) => call('finish', () => inner.finish(key, claimId, done, ttlMs, now)),
    renew: (key, claimId, leaseMs, now) => call('renew', () => inner.renew(key, claimId, leaseMs, now)),
    // a release the store did not answer is tried again (the request was never sent, or the
    // upstream said it did nothing); the caller still hears of the failure
    // (at once: a second release of one claim id, before or after the first lands, is a no-op)
    release: (key, claimId) => call('release', () => inner.release(key, claimId)).catch((e) => {
      if (!unsent(e)) giveBacks.add(key, claimId, MAX_GIVE_BACK_MS)
      throw e
    }),
    resolve: (key, as, ttlMs, now) => call('resolve', () => inner.resolve(key, as, ttlMs, now)),
    unknowns: (now, options) => call('unknowns', () => inner.unknowns(now, options)),
    unknownRecord: (key, now) => call('unknown_record', () => inner.unknownRecord(key, now)),
    takeProbe: (key, p, now) => call('take_probe', () => inner.takeProbe(key, p, now)),
    settle: (key, probes, as, ttlMs, now) => call('settle', () => inner.settle(key, probes, as, ttlMs, now)),
    // a grant whose answer was lost is nobody's: its holder's next acquisition replaces it, another holder waits out its ttl
    acquireLease: (resource, holder, ttlMs, now) => call('lease_acquire', () => inner.acquireLease(resource, holder, ttlMs, now)),
    renewLease: (resource, token, now) => call('lease_renew', () => inner.renewLease(resource, token, now)),
    releaseLease: (resource, token, now) => call('lease_release', () => inner.releaseLease(resource, token, now)),
    readLease: (resource, now) => call('lease_read', () => inner.readLease(resource, now)),
    // a registration a slow store makes after the request gave up on it is ended at once: it would
    // hold newer tokens of its resource back until its deadline
    register: (resource, token, id, deadline, now) => {
      const attempt = inner.register(resource, token, id, deadline, now)
      return call('register', () => attempt).catch((e) => {
        attempt.then((r) => { if (r.registered) return inner.unregister(resource, id) }).catch(() => {})
        throw e
      })
    },
    olderRegistered: (resource, token, now) => call('older_registered', () => inner.olderRegistered(resource, token, now)),
    unregister: (resource, id, until) => call('unregister', () => inner.unregister(resource, id, until)),
    // off the request path: the audit queue bounds, counts and logs its own failures
    audit: inner.audit,
    markers: () => call('markers', () => inner.markers()),
    acceptLoss: () => call('accept_loss', () => inner.acceptLoss()),
    ping: () => call('ping', () => inner.ping()),
    close: async () => {
      await giveBacks.close()
      await inner.close()
    },
  }
}
