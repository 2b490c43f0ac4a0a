/**
 * `Retry-After` of a 409 request-in-flight, from what the gateway knows instead of a fixed 1 s:
 * the route's observed effect durations (how long the upstream takes to answer its writes) and
 * the in-flight record's lease end (past it the attempt counts as abandoned, and a repeat learns
 * its outcome is unknown). A client that comes back after it most likely finds the first attempt
 * completed and gets its response replayed, instead of a second 409.
 */

/** Durations kept per route: the newest, in a ring. */
const CAPACITY = 256
/** Fewer observations than this say too little: Retry-After stays 1 s. */
const MIN_OBSERVATIONS = 5
/** How long a computed quantile is reused before the ring is sorted again, ms. */
const REUSE_MS = 1000

/**
 * The newest effect durations of one route (ms), and a quantile of them. In-process and bounded:
 * fed by every answered forward of the route's claimed keys.
 */
export class EffectDurations {
  readonly #ring = new Float64Array(CAPACITY)
  #n = 0
  #next = 0
  #cached?: { q: number; value: number; at: number }

  add(ms: number): void {
    if (!Number.isFinite(ms) || ms < 0) return
    this.#ring[this.#next] = ms
    this.#next = (this.#next + 1) % CAPACITY
    if (this.#n < CAPACITY) this.#n++
  }

  get count(): number {
    return this.#n
  }

  /** The `q` quantile (0..1) of the kept durations, ms; undefined with too few of them. */
  quantile(q: number, now = Date.now()): number | undefined {
    if (this.#n < MIN_OBSERVATIONS) return undefined
    const c = this.#cached
    if (c && c.q === q && now - c.at < REUSE_MS) return c.value
    const sorted = this.#ring.slice(0, this.#n).sort()
    const value = sorted[Math.min(this.#n - 1, Math.ceil(q * this.#n) - 1)]
    this.#cached = { q, value, at: now }
    return value
  }
}

/**
 * Seconds to put in `Retry-After`, never less than 1: the route's p90 effect duration (the first
 * attempt, in flight now, has most likely ended by then), but no later than the record's lease
 * end; 1 when nothing was observed yet.
 * @param leaseUntil the in-flight record's lease end, epoch ms
 * @param expectedMs the route's p90 effect duration, ms, when known
 */
export function retryAfterSeconds(leaseUntil: number, now: number, expectedMs: number | undefined): number {
  if (expectedMs === undefined) return 1
  const wait = Math.min(expectedMs, Math.max(0, leaseUntil - now))
  return Math.max(1, Math.ceil(wait / 1000))
}
