/**
 * Unknown outcomes that end by expiry (contract §4a, §6 `by="expiry"`): a record whose outcome
 * is still unknown when its ttl ends is forgotten, and the key's next attempt is forwarded as a
 * first attempt. So that this is counted once across every gateway sharing the store and shows on
 * the key's timeline, the gateway releases the record itself a moment before its expiry — as an
 * operator's `resolve --as failed` would, which only one caller can win — and counts
 * `fencegate_unknown_outcomes_settled_total{by="expiry", as="not_applied"}`: `not_applied` is
 * what the gateway acts on from then, not something the resource said.
 *
 * The release comes `EXPIRY_LEAD_MS` before the expiry (less for a ttl under 100 s: a
 * hundredth of it), so the record ends at most that much sooner than its ttl says.
 */
import type { Logger } from '../log.js'
import type { Metrics } from '../telemetry/metrics.js'
import type { Store, UnknownRecord } from '../store/index.js'
import { keyHashOf } from '../idempotency/record-key.js'
import { localTime } from '../idempotency/settle/settler.js'
import { recordSettled, type EntrySink } from './entry.js'

/** How long before a record's expiry the gateway releases it, at most, ms. */
const EXPIRY_LEAD_MS = 1_000

export class ExpiryWatch {
  readonly #timers = new Map<string, NodeJS.Timeout>()
  #stopped = false

  /** @param ttls each idempotent route's `idempotency.ttl`, ms */
  constructor(private readonly store: Store, private readonly ttls: ReadonlyMap<string, number>, private readonly metrics: Metrics, private readonly log: Logger, private readonly audit?: EntrySink) {}

  /**
   * Schedules the release of each listed record that expires within `horizonMs` of now (expiry
   * times on the store's clock, as `Store.unknowns` lists them).
   */
  consider(records: readonly UnknownRecord[], horizonMs: number, now = Date.now()): void {
    if (this.#stopped) return
    for (const r of records) {
      const ttl = this.ttls.get(r.key.route)
      if (ttl === undefined) continue
      const id = `${r.key.route}\n${r.key.scope}\n${r.key.key}`
      if (this.#timers.has(id)) continue
      const at = localTime(this.store, r.expiresAt) - Math.min(EXPIRY_LEAD_MS, ttl / 100)
      if (at - now > horizonMs) continue
      const t = setTimeout(() => { this.#timers.delete(id); void this.#release(r, ttl) }, Math.max(0, at - now))
      t.unref()
      this.#timers.set(id, t)
    }
  }

  stop(): void {
    this.#stopped = true
    for (const t of this.#timers.values()) clearTimeout(t)
    this.#timers.clear()
  }

  async #release(r: UnknownRecord, ttl: number): Promise<void> {
    if (this.#stopped) return
    const route = r.key.route
    const keyHash = keyHashOf(r.key.scope, r.key.key)
    try {
      // only while it is still that unknown outcome; another gateway, a probe or an operator may have come first
      const result = await this.store.resolve(r.key, 'failed', ttl, Date.now())
      if (result.kind !== 'resolved') return
      recordSettled(this.metrics, this.audit, { route, keyHash, by: 'expiry', as: 'not_applied',
        reason: `the record's ttl ended with its outcome unknown (${result.reason}): forgotten, so the key's next attempt is forwarded as a first attempt` })
      this.log.warn('unknown outcome expired unsettled: the key is forgotten and its next attempt is forwarded as a first attempt', { route, keyHash, reason: result.reason })
    } catch (e) {
      this.log.debug?.('could not release an expiring unknown outcome; it expires in the store all the same, uncounted', { route, keyHash, error: (e as Error).message })
    }
  }
}
