/**
 * `fencing.serialize: store`: the check-to-apply window closed across every gateway sharing the
 * store (issue 12 §2) — the Chubby/Consul lock-delay idea, made exact by registrations.
 *
 * `fencing.serialize: true` (./window-tracker.ts) holds a newer token until this process's older ones
 * have ended; a replica cannot see another's. Here every forwarded fenced write is registered in
 * the shared store — (resource, token, id, deadline) — until its outcome stops mattering, and a
 * newer token waits until no older token of its resource is registered there, whichever gateway
 * registered it.
 *
 * One request, in this order (src/admission/, src/fencing/request-window.ts):
 *   F  fence: the check-and-set of the high-water mark (`Store.fence`), as on every fenced route;
 *   R  register (`Store.register`): atomically with reading the mark again, write the registration
 *      — or, when the mark has passed the token meanwhile, write nothing and refuse (412);
 *      R's answer lists the older tokens registered at that moment;
 *   Q* while older ones are registered: poll (`Store.olderRegistered`), at most `serializeWait`;
 *   S  send upstream;
 *   U  unregister (`Store.unregister`) when the request ends — or keep the registration until the
 *      hold of an unknown outcome ends.
 *
 * Why no newer token can miss an older one. Take a and b on one resource, t_a < t_b, both
 * forwarded. The store runs F and R of one resource one at a time (one Lua script on one Redis
 * slot — the registrations sit under the mark's hash tag —, one SQLite write transaction, a
 * PostgreSQL row lock on the mark taken FOR SHARE by R and FOR UPDATE by F, one JS turn in the
 * memory store), and each request sends R only after F answered. Either
 *   - R(a) ran before R(b): then R(b)'s answer, and every Q(b) after it, shows a until U(a) or
 *     a's deadline, and b is sent only after an answer without it; or
 *   - R(b) ran before R(a): then F(b) ran before R(a) too, so R(a) found the mark at t_b > t_a
 *     (marks never go down) and refused: a was never sent. Contradiction.
 * The interleavings, spelled out (→ = happens before, in the store's order):
 *   1. F(a) R(a) S(a) → F(b) R(b): b sees a, polls; U(a) → Q(b) clear → S(b).
 *   2. F(a) → F(b) R(b) Q(b) clear S(b) → R(a): the mark is t_b, R(a) refuses: a gets 412. This is
 *      the case a fence alone cannot catch — a was accepted first but would have reached the
 *      upstream last.
 *   3. F(a) → F(b) → R(a) → R(b): b sees a (case 1 from R on).
 *   4. F(b) → F(a): a is stale at F (412), as without serialize.
 *   5. t_a = t_b: neither is older; one lease holder's writes never wait for each other.
 *   6. a's gateway crashes (or is partitioned from the store) after R(a): nothing unregisters a;
 *      its registration counts until its deadline, then b may go (or b gets 503 serialize-timeout
 *      first, with Retry-After).
 *   7. U(a) fails (store down): as 6, bounded by the deadline.
 *   8. R(a) answers after the gateway gave up on it (store.timeout: a answered 503): the late
 *      registration is unregistered as soon as its answer comes (src/store/runtime/guard.ts), or ends at
 *      its deadline.
 *   9. Q(b) fails: b answers 503 store-unavailable, nothing forwarded; U(b) as usual.
 * Why R comes after F rather than before: registering before the fence would need a third call
 * after F to look for older ones — R(b) before F(b) can miss an a with R(a) after R(b) and F(a)
 * before F(b) — while R after F, refusing below the mark, answers that question itself. The cost
 * on a route with `serialize: store` is R and U: two store calls per forwarded request, plus one
 * poll every 5–50 ms per request that actually waits.
 *
 * Deadlines (epoch ms; on Redis and PostgreSQL the store's clock: the gateway passes the deadline
 * as a duration from now and the store reads its own clock to write and to compare it, so
 * replicas need not agree on the time — src/store/shared/clock.ts; SQLite's gateways share one host's). A
 * registration must outlive the request's outcome mattering even when nobody is left to
 * unregister it, so it is set to the request's own bound: the longest it can wait before sending
 * (`serializeWait`, plus `upstream.timeout` when `inFlight: wait` may wait for the key, plus
 * MARGIN_MS), then one `upstream.timeout` for the answer, then the hold an unknown outcome gets:
 * the idempotency lease from the request's start when it has a record, else one more
 * `upstream.timeout` (the rule of `serialize: true`). A request that is sent later than that bound
 * foresaw (a slow store) extends its deadline as it is sent. When the request ends its
 * registration is deleted, or — outcome unknown — kept until that hold ends.
 *
 * The wait polls: after 5 ms, doubling to 50 ms, and once more when `serializeWait` runs out, so
 * it answers within `serializeWait` + 50 ms + one store call. A registration this process deletes
 * wakes its own waiters on that resource at once; other replicas' are seen at the next poll.
 */
import { randomUUID } from 'node:crypto'
import type { Logger } from '../log.js'
import type { FenceWindow } from './window-tracker.js'
import type { OlderWrites, Store } from '../store/index.js'

/** slack in every deadline: store calls around the send, ms */
export const MARGIN_MS = 1000
/** the first and the longest pause between polls while older writes are registered, ms */
export const FIRST_POLL_MS = 5
export const LONGEST_POLL_MS = 50

/** What the deadline of a route's registrations is made of (see the file's header). */
export interface WindowTimes {
  serializeWait: number
  upstreamTimeout: number
  /** `idempotency.lease`, when the route has idempotency */
  lease?: number
  /** `idempotency.inFlight: wait`: a request may wait up to `upstreamTimeout` for its key before it is sent */
  waitForInFlight: boolean
}

/** One request's registration. */
export class Ticket {
  /** set when the request ends with an unknown outcome: keep the registration until then (epoch ms) */
  holdUntil = 0

  constructor(
    readonly resource: string,
    readonly token: bigint,
    readonly id: string,
    /** the deadline last written */
    public deadline: number,
    /** the deadline a request sent at `at` needs */
    readonly bound: (at: number) => number,
  ) {}
}

/** How the wait ended. */
export type Waited = { kind: 'clear' } | { kind: 'timeout'; until: number } | { kind: 'gone' }

export class StoreWindow {
  /** this process's waiters, by resource: woken when this process unregisters a write of it */
  readonly #waiters = new Map<string, Set<() => void>>()

  constructor(private readonly store: Store, private readonly log: Logger) {}

  /**
   * R: registers the request (after its fence accepted it).
   * @param recorded the request has an idempotency record (its unknown outcome holds for the lease from `started`)
   * @param started when the request was admitted (epoch ms)
   * @returns the ticket and the older writes registered now, or the mark that passed the token
   * @throws StoreError when the store cannot answer
   */
  async register(resource: string, token: bigint, times: WindowTimes, recorded: boolean, started: number): Promise<{ ticket: Ticket; older: OlderWrites } | { highest: bigint }> {
    const now = Date.now()
    const { upstreamTimeout: T, lease } = times
    const bound = (at: number) => recorded && lease !== undefined ? Math.max(at + T, started + lease) + MARGIN_MS : at + 2 * T + MARGIN_MS
    const sendBy = now + times.serializeWait + (times.waitForInFlight ? T : 0) + MARGIN_MS
    const ticket = new Ticket(resource, token, randomUUID(), bound(sendBy), bound)
    const r = await this.store.register(resource, token, ticket.id, ticket.deadline, now)
    if (!r.registered) return { highest: r.highest }
    return { ticket, older: r }
  }

  /**
   * Q*: waits until no older write of the ticket's resource is registered, at most `ms`.
   * @param first R's answer
   * @param gone whether the client left (checked between polls: a write nobody waits for is not sent)
   * @throws StoreError when a poll fails
   */
  async waitForOlder(ticket: Ticket, first: OlderWrites, ms: number, gone: () => boolean): Promise<Waited> {
    let older = first
    if (older.oldest === undefined) return { kind: 'clear' }
    const end = Date.now() + ms
    for (let pause = FIRST_POLL_MS; ; pause = Math.min(pause * 2, LONGEST_POLL_MS)) {
      const left = end - Date.now()
      if (left <= 0) return { kind: 'timeout', until: older.until }
      await this.#sleep(ticket.resource, Math.min(pause, left))
      if (gone()) return { kind: 'gone' }
      older = await this.store.olderRegistered(ticket.resource, ticket.token, Date.now())
      if (older.oldest === undefined) return { kind: 'clear' }
    }
  }

  /**
   * The request's sending side (./request-window.ts `markSent`): passes `markSent` on, and when the request is sent later
   * than its deadline foresaw, extends the deadline (not waited for: the send does not wait on the store).
   */
  flights(ticket: Ticket, local: FenceWindow): FenceWindow {
    return {
      markSent: (token) => {
        local.markSent(token)
        const need = ticket.bound(Date.now())
        if (need <= ticket.deadline) return
        ticket.deadline = need
        this.store.unregister(ticket.resource, ticket.id, need).catch((e: Error) => {
          this.log.warn('a fenced write\'s registration could not be extended as it was sent: if this gateway stops now, newer tokens may reach the upstream before its outcome is known', { error: e.message })
        })
      },
    }
  }

  /**
   * U: ends the request's registration — deleted, or kept until `ticket.holdUntil` — and wakes
   * this process's waiters on the resource. Never throws: a registration left behind counts until
   * its deadline (logged).
   */
  async leave(ticket: Ticket): Promise<void> {
    const hold = ticket.holdUntil > Date.now() ? ticket.holdUntil : 0
    try {
      await this.store.unregister(ticket.resource, ticket.id, hold)
    } catch (e) {
      this.log.warn('a fenced write\'s registration could not be removed: newer tokens of its resource wait until it expires', {
        token: String(ticket.token), expiresInMs: Math.max(0, ticket.deadline - Date.now()), error: (e as Error).message,
      })
      return
    }
    if (hold === 0) this.#wake(ticket.resource)
  }

  #sleep(resource: string, ms: number): Promise<void> {
    return new Promise((resolve) => {
      let set = this.#waiters.get(resource)
      if (!set) this.#waiters.set(resource, (set = new Set()))
      const waiters = set
      const wake = () => {
        clearTimeout(timer)
        waiters.delete(wake)
        if (waiters.size === 0 && this.#waiters.get(resource) === waiters) this.#waiters.delete(resource)
        resolve()
      }
      const timer = setTimeout(wake, ms)
      waiters.add(wake)
    })
  }

  #wake(resource: string): void {
    const set = this.#waiters.get(resource)
    if (set) for (const wake of [...set]) wake()
  }
}

const windows = new WeakMap<Store, StoreWindow>()

/** The window of `store`: one per store object, so that every route of a gateway (and a reloaded config) shares the wake-ups. */
export function storeWindow(store: Store, log: Logger): StoreWindow {
  let w = windows.get(store)
  if (!w) windows.set(store, (w = new StoreWindow(store, log)))
  return w
}
