/**
 * What a store call rejects with when the store cannot answer. Every engine's own errors
 * become a StoreError (../shared/call.ts); the request path fails closed on them.
 */
import { TracelessError } from '../../traceless-error.js'
import type { StoreLimit, WriteRefusalReason } from '../../outcomes.js'

/**
 * The store could not answer: down, too slow (guardStore's `store.timeout`), full, closed, or
 * failing inside (the claim step of a half-failed `admit`). Callers fail closed (503).
 */
export class StoreError extends TracelessError {
  /**
   * The call never left this process (the store closed, or not connected since start-up), so it
   * wrote nothing: a claim it was to make needs no give-back. False when that is not known.
   */
  readonly unsent: boolean
  /** a write the store refused on purpose, counted in fencegate_store_writes_refused_total by this reason */
  readonly refusal?: WriteRefusalReason

  constructor(
    message: string,
    /** the store operation that failed, the `op` label in metrics */
    readonly op: string,
    options?: { cause?: unknown; unsent?: boolean; refusal?: WriteRefusalReason },
  ) {
    super(message, options)
    this.name = 'StoreError'
    this.unsent = options?.unsent === true
    if (options?.refusal) this.refusal = options.refusal
  }
}

export type { StoreLimit }

/**
 * The store holds as many unexpired entries as it may (the memory store's `store.maxRecords`,
 * `store.maxResources`, `store.maxAttempts`) and refuses a new one rather than forget one before
 * its time, or its disk refuses writes (SQLite: limit `disk`, `max` 0): the request fails closed
 * (503 store-unavailable, the detail naming the limit).
 */
export class StoreFull extends StoreError {
  constructor(
    message: string,
    op: string,
    readonly limit: StoreLimit,
    /** the configured limit */
    readonly max: number,
    /** when an entry expires at the earliest, epoch ms (the 503's Retry-After), when known */
    readonly until?: number,
    /** how many of the entries asked for were not written (an attempt log batch) */
    readonly refused = 1,
  ) {
    super(message, op)
    this.name = 'StoreFull'
  }
}
