/**
 * The bounded, asynchronous writer of the attempt log. `push` never blocks and never throws:
 * it puts the entry on an in-memory queue and returns; a flush scheduled with setImmediate
 * appends up to `batchSize` entries at a time to the store's AuditLog, one batch in flight at
 * once. When the queue holds `capacity` entries, a new one is dropped and counted
 * (`fencegate_audit_dropped_total{reason="queue_full"}`); a batch the store refuses is dropped
 * and counted too (`reason="store_error"`, or `log_full` for the entries a full memory attempt
 * log refused, logged once a minute). A request never waits for, or fails because of, the log.
 */
import type { Counter } from 'prom-client'
import type { Logger } from '../log.js'
import { StoreFull, type AuditEntry, type AuditLog } from '../store/index.js'

export interface AuditQueueOptions {
  /** most entries waiting; default 10,000 */
  capacity?: number
  /** most entries per append; default 500 */
  batchSize?: number
  /** also write each entry as one JSON line here (audit.stdout) */
  stdout?: NodeJS.WritableStream
  /** counts dropped entries by reason */
  dropped?: Counter<'reason'>
  log?: Logger
}

export class AuditQueue {
  readonly #log: AuditLog
  readonly #capacity: number
  readonly #batchSize: number
  readonly #stdout?: NodeJS.WritableStream
  readonly #dropped?: Counter<'reason'>
  readonly #logger?: Logger
  #queue: AuditEntry[] = []
  #scheduled = false
  #writing: Promise<void> | undefined
  #lastError = -Infinity
  #lastFull = -Infinity

  constructor(log: AuditLog, options: AuditQueueOptions = {}) {
    const { capacity = 10_000, batchSize = 500 } = options
    if (!Number.isInteger(capacity) || capacity < 1) throw new TypeError('options.capacity must be a positive integer')
    if (!Number.isInteger(batchSize) || batchSize < 1) throw new TypeError('options.batchSize must be a positive integer')
    this.#log = log
    this.#capacity = capacity
    this.#batchSize = batchSize
    this.#stdout = options.stdout
    this.#dropped = options.dropped
    this.#logger = options.log
  }

  /** Entries waiting to be written. */
  get size(): number {
    return this.#queue.length
  }

  /** Queues an entry; false when the queue was full and it was dropped. */
  push(entry: AuditEntry): boolean {
    if (this.#stdout) {
      // ISO 8601 time, as in every other line the gateway prints; the store keeps epoch ms
      try { this.#stdout.write(`${JSON.stringify({ ...entry, time: new Date(entry.time).toISOString() })}\n`) } catch { /* stdout closed: the store still gets it */ }
    }
    if (this.#queue.length >= this.#capacity) {
      this.#dropped?.inc({ reason: 'queue_full' })
      return false
    }
    this.#queue.push(entry)
    this.#schedule()
    return true
  }

  #schedule(): void {
    if (this.#scheduled || this.#writing) return
    this.#scheduled = true
    setImmediate(() => {
      this.#scheduled = false
      void this.#drain()
    })
  }

  /** Writes batches until the queue is empty; one batch in flight at a time. */
  #drain(): Promise<void> {
    if (this.#writing) return this.#writing
    this.#writing = (async () => {
      while (this.#queue.length) {
        const batch = this.#queue.splice(0, this.#batchSize)
        try {
          await this.#log.append(batch)
        } catch (e) {
          const now = Date.now()
          if (e instanceof StoreFull && e.limit !== 'disk') {
            this.#dropped?.inc({ reason: 'log_full' }, e.refused)
            if (now - this.#lastFull >= 60_000) {
              this.#lastFull = now
              this.#logger?.error('attempt log full: new entries dropped rather than older ones forgotten within audit.retention', { count: e.refused, error: e.message })
            }
            continue
          }
          this.#dropped?.inc({ reason: 'store_error' }, batch.length)
          // a full disk lasts: its cause once a minute, any other failure once a second
          if (now - this.#lastError >= (e instanceof StoreFull ? 60_000 : 1000)) {
            this.#lastError = now
            this.#logger?.error('attempt log entries not written; dropped', { count: batch.length, error: (e as Error).message })
          }
        }
      }
    })().finally(() => {
      this.#writing = undefined
      // an entry pushed while the last batch was being written found #writing set: wake for it
      if (this.#queue.length) this.#schedule()
    })
    return this.#writing
  }

  /** Writes everything queued so far (shutdown, tests); resolves once it is appended or dropped. */
  async flush(): Promise<void> {
    while (this.#queue.length || this.#writing) {
      await (this.#writing ?? this.#drain())
    }
  }
}
