/**
 * The store's clock, as a gateway sees it. Redis and PostgreSQL take every instant a guarantee
 * depends on — a lease's start and end, a record's expiry, a registration's deadline, a mark's
 * `since` — from their own clock, inside the script or function that uses it (`TIME`,
 * `clock_timestamp()`), so replicas whose clocks disagree still agree on when a lease ends. The
 * gateway only passes durations. (SQLite's gateways all run on one host and read its clock;
 * memory is one process.)
 *
 * What a gateway still reads on its own clock is what it shows: a 409's Retry-After, a 412's
 * `supersededForMs`, the times `/unknown` lists, how long `serialize: store` waits. The store's
 * answers carry instants on the store's clock; `toLocal` moves them onto the gateway's by the
 * measured offset. The offset is measured as NTP does, from one round trip: the store's reading
 * against the midpoint of the gateway's send and receive (the error is at most half the round
 * trip), at connect and every minute (`fencegate_store_clock_offset_seconds`).
 */

/** One measurement: the store's clock minus the gateway's, and the round trip it came from. */
export interface ClockReading {
  /** store clock − gateway clock, ms (positive: the store is ahead) */
  offsetMs: number
  /** the round trip of the measurement, ms: the offset is right to within half of it */
  rttMs: number
  /** when it was measured, epoch ms (gateway clock) */
  at: number
}

/** How often a store measures its offset again, ms. */
export const MEASURE_EVERY_MS = 60_000

/**
 * A network store's clock. `read` asks the store for its time (epoch ms); `caller` true: the store
 * keeps the caller's `now` (tests that drive time), so there is no offset to apply.
 */
export class StoreClock {
  #reading: ClockReading | undefined
  #timer: NodeJS.Timeout | undefined
  readonly #listeners = new Set<(r: ClockReading) => void>()

  constructor(private readonly read: () => Promise<number>, readonly caller = false) {}

  /** The latest measurement, undefined before the first. */
  get reading(): ClockReading | undefined { return this.#reading }

  /**
   * Measures once (one round trip) and tells the listeners.
   * @throws whatever `read` threw (the offset kept is the previous one)
   */
  async measure(): Promise<ClockReading> {
    const sentAt = Date.now()
    const started = performance.now()
    const storeMs = await this.read()
    const rttMs = performance.now() - started
    const r: ClockReading = { offsetMs: Math.round(storeMs - (sentAt + rttMs / 2)), rttMs, at: sentAt }
    this.#reading = r
    for (const l of this.#listeners) l(r)
    return r
  }

  /** Measures every `everyMs` from now on (a failed measurement keeps the last offset). */
  start(everyMs = MEASURE_EVERY_MS): void {
    if (this.#timer) return
    this.#timer = setInterval(() => { this.measure().catch(() => { /* the store's own calls report it */ }) }, everyMs)
    this.#timer.unref()
  }

  stop(): void {
    if (this.#timer) clearInterval(this.#timer)
    this.#timer = undefined
  }

  /** Calls `l` with each measurement, the latest one at once when there is one; returns the unsubscribe. */
  watch(l: (r: ClockReading) => void): () => void {
    this.#listeners.add(l)
    if (this.#reading) l(this.#reading)
    return () => { this.#listeners.delete(l) }
  }

  /** An instant the store answered (epoch ms, its clock) on the gateway's clock. */
  toLocal(storeMs: number): number {
    return this.caller || !this.#reading ? storeMs : storeMs - this.#reading.offsetMs
  }

  /** The `now` a script or function is given: the caller's (tests that drive time), else none (the store's own). */
  now(callerNow: number): number | undefined {
    return this.caller ? callerNow : undefined
  }
}
