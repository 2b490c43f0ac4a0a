/**
 * The check-to-apply window, as far as one gateway process can see it (issue 5 §3).
 *
 * The fencing check happens when a request arrives; the upstream applies it later. A request
 * accepted with token 5 can still be on its way when one with token 6 is accepted and sent, and
 * then land after it. This tracker keeps, per fencing resource, the tokens of the requests this
 * process is handling, from before their store check until they end, so that:
 * - detection: a request that ends after a newer token of its resource was sent upstream is
 *   reported (`fencegate_fencing_overtaken_total`);
 * - prevention (`fencing.serialize`): a newer token waits until every older one has ended, and an
 *   older one whose outcome is unknown keeps holding the resource for a while.
 *
 * Registering before the store check matters: a request that passes the check after a newer
 * token did is refused as stale by the store, so every older token that will ever be accepted is
 * already registered when a newer one is accepted. An entry exists only while one of its
 * requests does, so the map holds no more than the requests in flight (plus held ones).
 */

interface Waiter { token: bigint; wake: (ok: boolean) => void }

/** What a request going upstream tells its window. */
export interface FenceWindow {
  /** the request with `token` is being sent upstream */
  markSent(token: bigint): void
}

/** One resource's requests in this process. */
export class ResourceWindow implements FenceWindow {
  /** tokens of the registered requests (checking, waiting, sent, or held after an unknown outcome): a multiset */
  readonly tokens: bigint[] = []
  /** the highest token sent upstream while this entry existed; -1n before any */
  sent = -1n
  /** when the last hold of an unknown outcome ends (epoch ms); 0 when none */
  heldUntil = 0
  waiters: Waiter[] | undefined = undefined

  constructor(readonly resource: string) {}

  /** The request with `token` is going upstream (./request-window.ts `markSent`). */
  markSent(token: bigint): void {
    if (token > this.sent) this.sent = token
  }

  /** Whether a token older than `token` is registered here. */
  hasOlder(token: bigint): boolean {
    const t = this.tokens
    for (let i = 0; i < t.length; i++) if (t[i] < token) return true
    return false
  }
}

/** Requests in flight per route, for the `fencegate_fencing_in_flight` gauge. */
export interface RouteCount { n: number }

export class WindowTracker {
  readonly #resources = new Map<string, ResourceWindow>()
  readonly #routes = new Map<string, RouteCount>()

  /** The in-flight counter of a route (one object per route, counted without allocation). */
  route(name: string): RouteCount {
    let c = this.#routes.get(name)
    if (!c) this.#routes.set(name, (c = { n: 0 }))
    return c
  }

  /** Resources with at least one registered request: the size of the tracking map. */
  get resources(): number { return this.#resources.size }

  /** [route, requests registered] for every route that has a counter. */
  byRoute(): IterableIterator<[string, RouteCount]> { return this.#routes.entries() }

  /** Registers a request with `token` on `resource`; end it with `leave` (or `hold`) exactly once. */
  enter(resource: string, token: bigint): ResourceWindow {
    let s = this.#resources.get(resource)
    if (s === undefined) this.#resources.set(resource, (s = new ResourceWindow(resource)))
    s.tokens.push(token)
    return s
  }

  /** Unregisters one request; wakes newer tokens waiting for it; drops the entry when empty. */
  leave(s: ResourceWindow, token: bigint): void {
    const t = s.tokens
    const i = t.indexOf(token)
    if (i < 0) return
    t[i] = t[t.length - 1]
    t.pop()
    if (t.length === 0) {
      // a waiter's own token is registered, so no waiter can be left on an empty entry
      if (this.#resources.get(s.resource) === s) this.#resources.delete(s.resource)
    } else if (s.waiters !== undefined) {
      this.#wake(s)
    }
  }

  /**
   * Keeps an ended request's token registered until `until` (epoch ms): its outcome is unknown,
   * so the upstream may still apply it, and newer tokens must not go ahead of it. `done` runs
   * when the hold ends.
   */
  hold(s: ResourceWindow, token: bigint, until: number, done: () => void): void {
    if (until > s.heldUntil) s.heldUntil = until
    setTimeout(() => { done(); this.leave(s, token) }, Math.max(0, until - Date.now())).unref()
  }

  /**
   * Waits until no token older than `token` is registered on `s`, at most `ms`.
   * @returns true when none is left, false when the wait ran out
   */
  waitForOlder(s: ResourceWindow, token: bigint, ms: number): Promise<boolean> {
    if (!s.hasOlder(token)) return Promise.resolve(true)
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        const w = s.waiters!
        w.splice(w.indexOf(waiter), 1)
        if (w.length === 0) s.waiters = undefined
        resolve(false)
      }, ms)
      const waiter: Waiter = { token, wake: (ok) => { clearTimeout(timer); resolve(ok) } }
      ;(s.waiters ??= []).push(waiter)
    })
  }

  #wake(s: ResourceWindow): void {
    const w = s.waiters!
    for (let i = w.length - 1; i >= 0; i--) {
      if (!s.hasOlder(w[i].token)) {
        const [waiter] = w.splice(i, 1)
        waiter.wake(true)
      }
    }
    if (w.length === 0) s.waiters = undefined
  }
}
