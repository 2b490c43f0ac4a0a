/**
 * One fenced request's part in the check-to-apply window, as one object with three calls:
 *
 *   enter   before the store check (`RouteWindows.enter`): registered in this process's tracker
 *           (./window-tracker.ts), so every older token accepted before it is seen;
 *   settle  after the fence accepted it, with `fencing.serialize`: for `store`, registered in the
 *           store (./window.ts, R); then, for `true | store`, waits until older tokens of the
 *           resource have ended — or says why it may not go (stale, held, the client left);
 *   end     when the request is over: reported when a newer token was sent upstream before it
 *           ended (overtaken); an unknown outcome holds the resource; else it leaves.
 *
 * Between settle and end, `markSent()` tells the window the request is going upstream. All
 * three, and `markSent`, are called by one owner: admission (src/admission/, its `Pass`).
 */
import type { CompiledRoute, RouteContext } from '../route.js'
import type { RequestFacts } from '../facts.js'
import type { Metrics } from '../telemetry/metrics.js'
import type { Logger } from '../log.js'
import type { OlderWrites, Store } from '../store/index.js'
import type { FenceWindow, ResourceWindow, RouteCount, WindowTracker } from './window-tracker.js'
import { storeWindow, type StoreWindow, type Ticket, type WindowTimes } from './window.js'

/**
 * What the store and the check-to-apply window said about a request's token:
 * - `current`: accepted by the check-and-set (or the window let it go), or, for a request
 *   refused for its own mistake, not below the mark read (`highest` undefined: no mark yet);
 * - `stale`: below the mark, or a newer token got ahead while it waited or registered
 *   (`highest`: the mark then; `since`: when the mark was first accepted, epoch ms, when known;
 *   `at`: when this request was checked);
 * - `held`: `fencing.serialize` waited `waitedMs` for older tokens in vain (`where` they were
 *   registered); `retryAfter` in seconds;
 * - `left`: the client closed the connection while the request waited.
 */
export type FenceAnswer =
  | { kind: 'current'; highest?: bigint }
  | { kind: 'stale'; highest: bigint; since?: number; at: number }
  | { kind: 'held'; where: 'process' | 'store'; waitedMs: number; retryAfter: number }
  | { kind: 'left' }

const GO: FenceAnswer = { kind: 'current' }

/** One route's windows: what its requests share. */
export class RouteWindows {
  readonly serialize: boolean | 'store'
  readonly count: RouteCount
  readonly shared: StoreWindow | undefined
  readonly times: WindowTimes
  readonly route: CompiledRoute
  readonly store: Store
  readonly tracker: WindowTracker
  readonly metrics: Metrics
  readonly log: Logger

  constructor(context: RouteContext) {
    const { route, store, log } = context
    this.route = route
    this.store = store
    this.tracker = context.windows
    this.metrics = context.metrics
    this.log = log
    const tracker = this.tracker
    const fencing = route.config.fencing
    const upstreamTimeout = route.config.upstream.timeout
    this.serialize = fencing?.serialize ?? false
    this.count = tracker.route(route.name)
    this.shared = this.serialize === 'store' ? storeWindow(store, log) : undefined
    this.times = { serializeWait: fencing?.serializeWait ?? upstreamTimeout, upstreamTimeout, lease: route.config.idempotency?.lease, waitForInFlight: route.config.idempotency?.inFlight === 'wait' }
  }

  /** enter: registers the request before its store check; call `end` exactly once. */
  enter(resource: string, token: bigint): RequestWindow {
    this.count.n++
    return new RequestWindow(this, resource, token, this.tracker.enter(resource, token))
  }
}

export class RequestWindow {
  /** the request went upstream (from undici's first write) */
  sent = false
  #ticket?: Ticket
  /** this process's tracker, and with `serialize: store` the registration's deadline */
  #sending: FenceWindow
  readonly #started = Date.now()

  constructor(private readonly w: RouteWindows, readonly resource: string, readonly token: bigint, private readonly flights: ResourceWindow) {
    this.#sending = flights
  }

  /**
   * settle: after the fence accepted the token. Without `serialize`, nothing to do.
   * @param recorded the request has an idempotency record (its unknown outcome holds for the lease)
   * @param gone whether the client has left (a write nobody waits for is not sent)
   * @returns `current`: go; else why not
   * @throws StoreError when the store cannot answer (register, a poll, a mark read)
   */
  async settle(recorded: boolean, gone: () => boolean): Promise<FenceAnswer> {
    const { serialize, shared, times } = this.w
    if (!serialize) return GO
    if (shared) {
      const entered = await shared.register(this.resource, this.token, times, recorded, this.#started)
      if (!('ticket' in entered)) {
        // the mark passed the token between the fence and the registration: a newer token may already be upstream
        const at = Date.now()
        const mark = await this.w.store.mark(this.resource)
        return { kind: 'stale', highest: mark !== undefined && mark.highest > this.token ? mark.highest : entered.highest, since: mark?.since, at }
      }
      this.#ticket = entered.ticket
      this.#sending = shared.flights(entered.ticket, this.flights)
      return this.#waitInStore(entered.older, gone)
    }
    if (!(await this.w.tracker.waitForOlder(this.flights, this.token, times.serializeWait))) {
      const heldUntil = this.flights.heldUntil
      return { kind: 'held', where: 'process', waitedMs: times.serializeWait, retryAfter: heldUntil > Date.now() ? Math.ceil((heldUntil - Date.now()) / 1000) : 1 }
    }
    if (gone()) return { kind: 'left' }
    // cannot happen while every route sharing the resource serializes; refused if it does
    return this.#newerSent()
  }

  async #waitInStore(first: OlderWrites, gone: () => boolean): Promise<FenceAnswer> {
    const wait = this.w.times.serializeWait
    const waited = await this.w.shared!.waitForOlder(this.#ticket!, first, wait, gone)
    if (waited.kind === 'timeout') {
      // when the older registrations expire at the latest, but never more than one more wait
      return { kind: 'held', where: 'store', waitedMs: wait, retryAfter: Math.max(1, Math.ceil(Math.min(waited.until - Date.now(), wait) / 1000)) }
    }
    if (waited.kind === 'gone' || gone()) return { kind: 'left' }
    return this.#newerSent()
  }

  /** A newer token was sent while this one waited: stale, with the mark's first acceptance when the store has it. */
  async #newerSent(): Promise<FenceAnswer> {
    const sent = this.flights.sent
    if (sent <= this.token) return GO
    const at = Date.now()
    const mark = await this.w.store.mark(this.resource)
    return { kind: 'stale', highest: mark !== undefined && mark.highest >= sent ? mark.highest : sent, since: mark?.since, at }
  }

  /**
   * The request is going upstream: from here on, an older token of the resource ending is
   * overtaken; a registration in the store is extended when it is sent later than it foresaw
   * (not waited for: the send does not wait on the store).
   */
  markSent(): void {
    this.sent = true
    this.#sending.markSent(this.token)
  }

  /**
   * end: once the request is over, however it ended. Notes `f.overtaken`. With `serialize`, an
   * unknown outcome holds the resource for the idempotency lease (from the request's start) when
   * the request had a record, and at least one more upstream timeout after it ended: a lease no
   * longer than the timeout would otherwise have run out already.
   */
  async end(f: RequestFacts): Promise<void> {
    const w = this.w
    const { flights, token } = this
    let held = false
    try {
      if (this.sent && flights.sent > token) {
        f.overtaken = true
        w.metrics.fencingOvertaken.inc({ route: w.route.name })
        w.log.warn('a request ended after one with a newer fencing token for the same resource had been sent upstream: the upstream may have applied the older write last', {
          route: w.route.name, token: String(token), newerToken: String(flights.sent), requestId: f.requestId,
        })
      }
      if (w.serialize && this.sent && f.outcome === 'outcome_unknown') {
        const { lease, upstreamTimeout } = w.times
        const until = Math.max(f.keyHash !== undefined && lease !== undefined ? this.#started + lease : 0, Date.now() + upstreamTimeout)
        if (this.#ticket) this.#ticket.holdUntil = until
        if (until > Date.now()) {
          held = true
          w.tracker.hold(flights, token, until, () => { w.count.n-- })
        }
      }
    } finally {
      if (this.#ticket) await w.shared!.leave(this.#ticket)
      if (!held) {
        w.count.n--
        w.tracker.leave(flights, token)
      }
    }
  }
}
