/**
 * The background settler of one gateway (contract §4a): on a timer, for each route with
 * `idempotency.settle`, lists the route's unknown outcomes (`Store.unknowns`, times on the store's
 * clock) and probes each whose next probe is due — `nextProbe`, or `after` past the lapsed lease
 * of a crashed holder that was never probed — until `for` past the moment it became unknown.
 * Which gateway sends a due probe is the store's decision (`takeProbe`): every gateway sharing
 * the store runs a settler, and one of them takes each probe.
 */
import type { Logger } from '../../log.js'
import type { Store, UnknownRecord } from '../../store/index.js'
import type { RouteProber } from './prober.js'

/** An instant on the store's clock (epoch ms) as this process's clock reads it; as given for a store without a clock of its own. */
export const localTime = (store: Pick<Store, 'clock'>, at: number): number => (store.clock ? store.clock.toLocal(at) : at)

/** When the record's outcome became unknown, epoch ms on the store's clock. */
export function unknownSince(r: UnknownRecord, ttlMs: number): number {
  return r.leaseUntil > 0 ? r.leaseUntil : r.expiresAt - ttlMs
}

/**
 * When the record's next probe is due (store's clock), or null when there is none: no probe
 * request kept, or probing ended (`for` past the moment it became unknown).
 */
export function nextProbeAt(r: UnknownRecord, p: { afterMs: number; forMs: number; ttlMs: number }): number | null {
  if (r.probe === undefined) return null
  const due = r.nextProbe ?? (r.leaseUntil > 0 ? r.leaseUntil + p.afterMs : r.expiresAt - p.ttlMs + p.afterMs)
  return due > unknownSince(r, p.ttlMs) + p.forMs ? null : due
}

/** Probes one settler sends at the same time, per route. */
export const PROBES_AT_ONCE = 8

export class Settler {
  #timer: NodeJS.Timeout | undefined
  #busy = false
  #stopped = false
  readonly #everyMs: number

  /** @param ttls each route's idempotency.ttl, ms */
  constructor(private readonly store: Store, private readonly probers: readonly RouteProber[], private readonly ttls: ReadonlyMap<string, number>, private readonly log: Logger) {
    this.#everyMs = Math.max(250, Math.min(...probers.map((p) => p.settle.after)) / 2)
  }

  /** Starts the timer (unref'd: it never keeps the process alive). */
  start(): this {
    if (this.probers.length === 0 || this.#timer) return this
    this.#timer = setInterval(() => { void this.tick() }, this.#everyMs)
    this.#timer.unref()
    return this
  }

  stop(): void {
    this.#stopped = true
    if (this.#timer) clearInterval(this.#timer)
    this.#timer = undefined
  }

  /** One round: every due probe of every settle route, one after another. Never throws. */
  async tick(): Promise<void> {
    if (this.#busy || this.#stopped) return
    this.#busy = true
    try {
      for (const p of this.probers) {
        if (this.#stopped) return
        await this.#route(p)
      }
    } finally {
      this.#busy = false
    }
  }

  async #route(p: RouteProber): Promise<void> {
    const ttlMs = this.ttls.get(p.route)!
    let records: UnknownRecord[]
    try {
      records = await this.store.unknowns(Date.now(), { route: p.route })
    } catch (e) {
      this.log.debug?.('settler could not list unknown outcomes; trying again on the next round', { route: p.route, error: (e as Error).message })
      return
    }
    const now = Date.now()
    const due = records.filter((r) => {
      const at = nextProbeAt(r, { afterMs: p.settle.after, forMs: p.forMs, ttlMs })
      return at !== null && localTime(this.store, at) <= now
    })
    // a few at a time: one lookup that hangs for upstream.timeout does not hold up the others
    let next = 0
    const worker = async () => {
      while (next < due.length && !this.#stopped) {
        const r = due[next++]
        try {
          await p.probe(r.key, r.probes ?? 0)
        } catch (e) {
          this.log.warn('settle probe not taken or not settled: the store did not answer; the outcome stays unknown', { route: p.route, error: (e as Error).message })
        }
      }
    }
    await Promise.all(Array.from({ length: Math.min(PROBES_AT_ONCE, due.length) }, worker))
  }
}
