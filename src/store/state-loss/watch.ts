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
 * write that met it. This gateway then retires the epoch marker: it writes a loss note (what it
 * saw, when, which process: ./note.ts) and a new epoch, so that every gateway sharing the
 * store sees the loss on its next poll, and one started later finds the note. A retirement the
 * store refused is tried again on every poll; this gateway stays lost meanwhile.
 */
import type { Logger } from '../../log.js'
import type { Metrics } from '../../telemetry/metrics.js'
import type { Store } from '../contract/store.js'
import type { StoreWentBack } from './sequence.js'
import { describeNote, noteOf, type LossNote } from './note.js'

/** How often a gateway polls the store's state by default, ms (a Redis Cluster's settle hold counts on it). */
export const STATE_POLL_MS = 1000

export class StateWatch {
  /** true while a loss is detected and not yet accepted (fail-closed) */
  lost = false
  #known: string | undefined
  /** true once the store answered: `#known` holds the epoch of the first answer */
  #started = false
  #timer?: NodeJS.Timeout
  /** a note this gateway still has to write (the store refused the retirement) */
  #unwritten?: LossNote

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
  /** The loss note behind it, this gateway's own or one read from the store; undefined while none is. */
  note?: LossNote

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
    this.note = noteOf(e)
    this.metrics.storeStateLost.set({ store: this.store.kind }, 1)
    this.#unwritten = this.note
    // on the next turn, not inside the call that met the loss: SQLite meets it inside the write
    // transaction it then rolls back, which would take a note written within it along
    setImmediate(() => { this.#retire().catch(() => { /* counted by the guard; tried again on the next poll */ }) })
  }

  /** Writes the note and a new epoch; stays due until the store took them. */
  async #retire(): Promise<void> {
    const note = this.#unwritten
    if (!note) return
    await this.store.retireEpoch(note)
    if (this.#unwritten === note) this.#unwritten = undefined
    this.log.warn('store epoch retired with a loss note: every gateway sharing the store refuses fenced and idempotent requests until `fencegate store accept-loss`', {
      store: this.store.kind, seen: note.seen, by: note.by,
    })
  }

  /**
   * Reads the epoch the gateway starts with, and polls every `intervalMs` after that. A store
   * that does not answer yet (down at start-up) is not an error: its first answer sets the epoch.
   */
  async start(intervalMs = STATE_POLL_MS): Promise<void> {
    this.metrics.storeStateLost.set({ store: this.store.kind }, 0)
    this.#timer = setInterval(() => { this.check().catch(() => { /* store down: counted by the guard */ }) }, intervalMs)
    this.#timer.unref()
    await this.check().catch(() => { /* not reachable yet: the poll reads the epoch once it answers */ })
  }

  stop(): void {
    if (this.#timer) clearInterval(this.#timer)
  }

  /**
   * Compares the store's markers with the epoch this gateway knows, and looks for a loss note;
   * first writes this gateway's own note when the store refused it before. Rejects when the store
   * cannot answer.
   */
  async check(): Promise<void> {
    await this.#retire()
    const { epoch, accepted, note } = await this.store.markers()
    const acceptedNow = epoch !== undefined && accepted === epoch
    if (note && !acceptedNow) {
      // a gateway noted a loss (this one, another, or one before this one started): lost until accept-loss
      this.#started = true
      this.#known ??= epoch
      return this.#lose(describeNote(note), note)
    }
    if (!this.#started) {
      // the first answer since start-up: the epoch this gateway knows from now on
      this.#started = true
      this.#known = epoch
      return
    }
    if (epoch !== undefined && epoch === this.#known) {
      // lost through a note under this same epoch, now deleted by accept-loss
      if (this.lost && acceptedNow && !this.#unwritten) this.#accepted(epoch)
      return
    }
    if (acceptedNow) {
      // an operator accepted the loss: carry on with the store as it is now
      this.#accepted(epoch)
      return
    }
    return this.#lose(epoch === undefined ? 'the epoch marker is missing' : `epoch marker ${epoch} (was ${this.#known})`)
  }

  async #lose(seen: string, note?: LossNote): Promise<void> {
    if (!this.lost) {
      this.seen = seen
      this.note = note
      this.metrics.storeStateLosses.inc({ store: this.store.kind })
      this.log.error('store lost its state (epoch marker changed or missing, or a loss noted): high-water marks and idempotency records may be gone', {
        store: this.store.kind, policy: this.policy, seen,
      })
    } else if (note && !this.note) {
      // the loss is the one another gateway noted: name what it saw
      this.seen = seen
      this.note = note
    }
    if (this.policy === 'accept') {
      this.#adopt(await this.store.acceptLoss())
      return
    }
    this.lost = true
    this.metrics.storeStateLost.set({ store: this.store.kind }, 1)
  }

  #accepted(epoch: string): void {
    this.log.warn('store state loss accepted by an operator; serving again', { store: this.store.kind })
    this.#adopt(epoch)
  }

  #adopt(epoch: string): void {
    this.#known = epoch
    this.lost = false
    this.seen = undefined
    this.note = undefined
    this.store.sequence?.reset()
    this.metrics.storeStateLost.set({ store: this.store.kind }, 0)
  }
}
