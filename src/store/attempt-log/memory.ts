/**
 * The attempt log of the memory store: a ring buffer in this process. Lost on exit, like the
 * rest of the memory store; the oldest entries go first when it is full or past the retention.
 */
import { storeCall } from '../call.js'
import { aggregate, fencedIn, inTimeline, type AuditCounts, type AuditEntry, type AuditLog, type TimelineFilter } from './types.js'

export interface MemoryAuditLogOptions {
  /** most entries kept; default 10,000 (the memory store is for one process and short runs: a longer log belongs in a store that keeps it off the heap) */
  capacity?: number
  /** entries older than this are not reported, ms; default 7 days */
  retentionMs?: number
}

export class MemoryAuditLog implements AuditLog {
  readonly #ring: (AuditEntry | undefined)[]
  readonly #retentionMs: number
  #next = 0
  #size = 0
  #closed = false

  constructor(options: MemoryAuditLogOptions = {}) {
    const { capacity = 10_000, retentionMs = 7 * 86_400_000 } = options
    if (!Number.isInteger(capacity) || capacity < 1) throw new TypeError('options.capacity must be a positive integer')
    this.#ring = new Array(capacity)
    this.#retentionMs = retentionMs
  }

  /** Runs one call of the log; after `close()` it rejects with StoreError, as every store's calls do. */
  #call<T>(op: string, fn: () => T): Promise<T> {
    return storeCall('memory', op, this.#closed, async () => fn())
  }

  append(batch: readonly AuditEntry[]): Promise<void> {
    return this.#call('audit_append', () => {
      for (const e of batch) {
        this.#ring[this.#next] = e
        this.#next = (this.#next + 1) % this.#ring.length
        this.#size = Math.min(this.#size + 1, this.#ring.length)
      }
    })
  }

  *#entries(): Generator<AuditEntry> {
    const n = this.#ring.length
    for (let i = 0; i < this.#size; i++) yield this.#ring[(this.#next - this.#size + i + n) % n]!
  }

  timeline(filter: TimelineFilter, since: number, limit: number): Promise<AuditEntry[]> {
    return this.#call('audit_timeline', () => {
      const out: AuditEntry[] = []
      for (const e of this.#entries()) {
        if (e.time >= since && inTimeline(e, filter)) out.push(e)
      }
      return out.slice(-limit)
    })
  }

  fenced(since: number, until: number, route: string | undefined, limit: number): Promise<AuditEntry[]> {
    return this.#call('audit_fenced', () => {
      const out: AuditEntry[] = []
      const from = Math.max(since, Date.now() - this.#retentionMs)
      for (const e of this.#entries()) if (fencedIn(e, from, until, route)) out.push(e)
      return out.slice(-limit)
    })
  }

  query(since: number, until: number, route?: string): Promise<AuditCounts[]> {
    return this.#call('audit_query', () => aggregate(this.#entries(), Math.max(since, Date.now() - this.#retentionMs), until, route))
  }

  /** Closed with its store (`MemoryStore.close`): every later call rejects with StoreError. */
  close(): void {
    this.#closed = true
  }
}
