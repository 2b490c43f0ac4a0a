/**
 * Watches the store for lost state (contract §3): a store that comes back without the data it
 * had — a Redis restarted without persistence, a failover that lost writes, a replaced SQLite
 * file — has a different or missing epoch marker. Forgetting a high-water mark silently would
 * let a stale token through, so the loss is logged, counted, reported on /readyz and, with
 * `store.onStateLoss: fail-closed` (the default), every route with fencing or idempotency
 * answers 503 store-state-lost until an operator runs `fencegate store accept-loss`.
 *
 * Detection is by polling (every `intervalMs`, and on /readyz), so requests in the interval
 * between the loss and its detection are decided on the store's new, empty state.
 *
 * A partial loss — a store that went back in time (./sequence.ts): a write refused because the
 * store's write sequence is below what this gateway saw, or a failover without store.replicas (a
 * new PostgreSQL timeline, a Redis replica promoted) — is the same state loss, seen at once by the
 * write that met it. This gateway then retires the epoch marker (writes a new one), so that every
 * gateway sharing the store sees the loss on its next poll.
 */
import type { Logger } from '../log.js'
import type { Metrics } from '../telemetry/metrics.js'
import type { Store } from './types.js'
import type { StoreWentBack } from './sequence.js'

export class StateWatch {
  /** true while a loss is detected and not yet accepted (fail-closed) */
  lost = false
  #known: string | undefined
  /** true once the store answered: `#known` holds the epoch of the first answer */
  #started = false
  #timer?: NodeJS.Timeout

  constructor(
    private readonly store: Store,
    private readonly policy: 'fail-closed' | 'accept',
    private readonly metrics: Metrics,
    private readonly log: Logger,
  ) {
    store.sequence?.onWentBack((e) => this.#wentBack(e))
  }

  /** What the last loss detected was, for the log, doctor and the audit claim; undefined while none is. */
  seen?: string

  /** A write met a store that went back in time: a loss, known to every gateway once the epoch is retired. */
  #wentBack(e: StoreWentBack): void {
    if (this.lost) return
    this.seen = e.seen
    this.metrics.storeStateLosses.inc({ store: this.store.kind })
    this.log.error('store went back in time: acknowledged writes are missing (high-water marks may have fallen back, idempotency records vanished)', {
      store: this.store.kind, policy: this.policy, seen: e.seen, op: e.op,
    })
    if (this.policy === 'accept') {
      this.store.sequence?.reset()
      return
    }
    this.lost = true
    this.metrics.storeStateLost.set({ store: this.store.kind }, 1)
    // every other gateway sees a new epoch on its next poll; failing that, this one stays lost anyway
    this.store.retireEpoch?.().catch(() => { /* logged and counted by the guard */ })
  }

  /**
   * Reads the epoch the gateway starts with, and polls every `intervalMs` after that. A store
   * that does not answer yet (down at start-up) is not an error: its first answer sets the epoch.
   */
  async start(intervalMs = 1000): Promise<void> {
    this.metrics.storeStateLost.set({ store: this.store.kind }, 0)
    this.#timer = setInterval(() => { this.check().catch(() => { /* store down: counted by the guard */ }) }, intervalMs)
    this.#timer.unref()
    await this.check().catch(() => { /* not reachable yet: the poll reads the epoch once it answers */ })
  }

  stop(): void {
    if (this.#timer) clearInterval(this.#timer)
  }

  /** Compares the store's markers with the epoch this gateway knows; rejects when the store cannot answer. */
  async check(): Promise<void> {
    const { epoch, accepted } = await this.store.markers()
    if (!this.#started) {
      // the first answer since start-up: the epoch this gateway knows from now on
      this.#started = true
      this.#known = epoch
      return
    }
    if (epoch !== undefined && epoch === this.#known) return
    if (epoch !== undefined && accepted === epoch) {
      // an operator accepted the loss: carry on with the store as it is now
      this.log.warn('store state loss accepted by an operator; serving again', { store: this.store.kind })
      this.#adopt(epoch)
      return
    }
    if (!this.lost) {
      this.seen = epoch === undefined ? 'the epoch marker is missing' : `epoch marker ${epoch} (was ${this.#known})`
      this.metrics.storeStateLosses.inc({ store: this.store.kind })
      this.log.error('store lost its state (epoch marker changed or missing): high-water marks and idempotency records may be gone', {
        store: this.store.kind, policy: this.policy, seen: this.seen,
      })
    }
    if (this.policy === 'accept') {
      this.#adopt(await this.store.acceptLoss())
      return
    }
    this.lost = true
    this.metrics.storeStateLost.set({ store: this.store.kind }, 1)
  }

  #adopt(epoch: string): void {
    this.#known = epoch
    this.lost = false
    this.seen = undefined
    this.store.sequence?.reset()
    this.metrics.storeStateLost.set({ store: this.store.kind }, 0)
  }
}
