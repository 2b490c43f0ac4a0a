/**
 * A store that went back in time (contract §3, state loss): every write the request path makes
 * advances a per-store write sequence inside the same script, function or transaction, and
 * answers it. Each gateway process remembers the highest it has seen and hands it to every write;
 * a store whose sequence is below it — a failover to a replica that lacked the last writes, a
 * restore from an older backup, a restart that lost the last second — refuses before it changes
 * anything (`StoreWentBack`), so nothing is forwarded on the lost state.
 *
 * What it cannot see: writes this gateway never saw answered. A loss that only other gateways had
 * seen is caught by them (they retire the epoch marker: ./watch.ts), or by the failover
 * itself (a new PostgreSQL timeline, a new Redis replication id: `StateMarkers.history`).
 */
import { StoreError } from '../contract/errors.js'

/** Which signal showed the store went back: its write sequence, a new PostgreSQL timeline, a promoted Redis replica. */
export type LossSignal = 'sequence' | 'timeline' | 'replication-id'

/** The signal and its two values behind a refusal, for the loss note (./note.ts). */
export interface WentBackFacts {
  signal: LossSignal
  /** the store's value now: its sequence, timeline id or replication id */
  now: string
  /** the value this gateway had seen */
  was: string
}

/** A write refused because the store is behind what this gateway saw, or on another history. */
export class StoreWentBack extends StoreError {
  constructor(
    op: string,
    /** what was seen, for the log line: "sequence 41 after 57 was seen", "timeline 00000002 after 00000001" */
    readonly seen: string,
    facts: WentBackFacts,
  ) {
    super(`the store went back in time (${seen}): acknowledged writes are missing; nothing was changed or forwarded`, op)
    this.name = 'StoreWentBack'
    this.signal = facts.signal
    this.now = facts.now
    this.was = facts.was
  }

  readonly signal: LossSignal
  readonly now: string
  readonly was: string
}

/** The highest write sequence one gateway process has seen its store answer. */
export class WriteSequence {
  /** 0n before the first write answered */
  #seen = 0n
  readonly #listeners: ((e: StoreWentBack) => void)[] = []

  /** the highest sequence answered so far; what a write hands the store */
  get seen(): bigint {
    return this.#seen
  }

  /** A write answered `n`. */
  saw(n: bigint | string | number): void {
    const v = BigInt(n)
    if (v > this.#seen) this.#seen = v
  }

  readonly #resets: (() => void)[] = []

  /** After an operator accepted a loss: the store's sequence from now on is the one to follow. */
  reset(): void {
    this.#seen = 0n
    for (const r of this.#resets) r()
  }

  /** Calls `fn` on every `reset` (a cluster's per-slot sequences: ../redis/cluster-history.ts). */
  onReset(fn: () => void): void {
    this.#resets.push(fn)
  }

  /** Calls `fn` with every refusal (the state watch: ./watch.ts). */
  onWentBack(fn: (e: StoreWentBack) => void): void {
    this.#listeners.push(fn)
  }

  /** A write was refused: tells the listeners, and answers the error to throw. */
  wentBack(op: string, seen: string, facts: WentBackFacts): StoreWentBack {
    const e = new StoreWentBack(op, seen, facts)
    for (const l of this.#listeners) l(e)
    return e
  }
}
