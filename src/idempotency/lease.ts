/**
 * Lease renewal for the gateway's own claims. A claim's in-flight record holds its key for
 * `lease` ms; past that, the next attempt takes the holder for crashed (contract §4: outcome
 * unknown, reason crash). A live exchange can outlast any fixed lease (an answer that streams
 * for minutes in gaps shorter than `upstream.timeout`), so while the exchange is alive the
 * gateway renews the record's lease, and only a gateway that really stopped (crash, kill -9,
 * a pause longer than the lease) lets its claim expire — the lease becomes a failure detector,
 * as in Chubby's KeepAlives or BullMQ's lock extension, not a bound on the exchange.
 *
 * One timer per route, not per request: every `lease / 4` ms the keeper renews each claim not
 * renewed for a quarter lease, so a claim is renewed within half a lease of its last renewal
 * and the store call has the other half to land.
 */
import type { Logger } from '../log.js'
import type { RecordKey, Store } from '../store/index.js'

/** A claim being kept alive; `stop()` once its record is finished or released. */
export interface KeptLease {
  stop(): void
}

interface Held { key: RecordKey; claimId: string; renewedAt: number; busy: boolean; lost: boolean }

export class LeaseKeeper {
  readonly #held = new Set<Held>()
  readonly #tickMs: number
  #timer?: NodeJS.Timeout

  /**
   * @param leaseMs the route's `idempotency.lease`, ms
   * @param route the route's name, for logs
   */
  constructor(private readonly store: Store, private readonly leaseMs: number, private readonly log: Logger, private readonly route: string) {
    this.#tickMs = Math.max(1, Math.floor(leaseMs / 4))
  }

  /** Starts renewing the claim `claimId` of `key`, taken at `now` (epoch ms). */
  keep(key: RecordKey, claimId: string, now: number): KeptLease {
    const h: Held = { key, claimId, renewedAt: now, busy: false, lost: false }
    this.#held.add(h)
    if (!this.#timer) {
      this.#timer = setInterval(() => this.#tick(), this.#tickMs)
      this.#timer.unref() // a claim alone never keeps the process up: its request does
    }
    return { stop: () => this.#drop(h) }
  }

  #drop(h: Held): void {
    this.#held.delete(h)
    if (this.#held.size === 0 && this.#timer) { clearInterval(this.#timer); this.#timer = undefined }
  }

  #tick(): void {
    const now = Date.now()
    for (const h of this.#held) {
      if (h.busy || h.lost || now - h.renewedAt < this.#tickMs - 2) continue
      h.busy = true
      this.store.renew(h.key, h.claimId, this.leaseMs, now).then((held) => {
        h.busy = false
        if (held) { h.renewedAt = now; return }
        // finished, released, or taken over after an expiry this gateway did not see coming
        h.lost = true
        if (this.#held.has(h)) this.log.warn('an in-flight claim was lost before its exchange ended: its lease ran out and another attempt may have taken the key over', { route: this.route })
      }, (e: Error) => {
        h.busy = false // tried again next tick; guardStore counts and logs the failure
        void e
      })
    }
  }
}
