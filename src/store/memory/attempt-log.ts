/**
 * The attempt log of the memory store: a ring buffer in this process. Lost on exit, like the
 * rest of the memory store. Entries older than the retention go first; when `capacity` entries
 * within the retention are held, a new entry is refused (StoreFull: the audit queue drops and
 * counts it) rather than an entry forgotten before its time, unless `evict` (`store.acceptRisks:
 * [maxAttempts]`) lets the oldest go, counted by `evicted`.
 */
import { storeCall } from '../shared/call.js'
import { StoreFull } from '../contract/store.js'
import { aggregate, fencedIn, inTimeline, type AuditCounts, type AuditEntry, type AuditLog, type TimelineFilter } from '../attempt-log/types.js'

export interface MemoryAuditLogOptions {
  /** most entries kept; default 100,000 (the memory store is for one process and short runs: a longer log belongs in a store that keeps it off the heap) */
  capacity?: number
  /** entries older than this are not reported, ms; default 7 days */
  retentionMs?: number
  /** when full, drop the oldest entry (counted in `evicted`) instead of refusing the new one */
  evict?: boolean
}

export class MemoryAuditLog implements AuditLog {
  readonly #ring: (AuditEntry | undefined)[]
  readonly #retentionMs: number
  readonly #evict: boolean
  #next = 0
  #size = 0
  #closed = false
  /** called for each entry dropped within the retention to make room (`evict`) */
  onEvict?: () => void

  constructor(options: MemoryAuditLogOptions = {}) {
    const { capacity = 100_000, retentionMs = 7 * 86_400_000 } = options
    if (!Number.isInteger(capacity) || capacity < 1) throw new TypeError('options.capacity must be a positive integer')
    this.#ring = new Array(capacity)
    this.#retentionMs = retentionMs
    this.#evict = options.evict ?? false
  }

  /** Runs one call of the log; after `close()` it rejects with StoreError, as every store's calls do. */
  #call<T>(op: string, fn: () => T): Promise<T> {
    return storeCall('memory', op, this.#closed, async () => fn())
  }

  /** @throws StoreFull when the log holds `capacity` entries within the retention (the entries that fit are kept) */
  append(batch: readonly AuditEntry[]): Promise<void> {
    return this.#call('audit_append', () => {
      const n = this.#ring.length
      const expired = Date.now() - this.#retentionMs
      for (let i = 0; i < batch.length; i++) {
        if (this.#size === n) {
          const oldest = this.#ring[this.#next]!
          if (oldest.time > expired) {
            if (!this.#evict) throw new StoreFull(`the memory store's attempt log holds ${n} entries within audit.retention (store.maxAttempts); ${batch.length - i} new entries were not written`, 'audit_append', 'max_attempts', n, oldest.time + this.#retentionMs, batch.length - i)
            this.onEvict?.()
          }
          this.#size--
        }
        this.#ring[this.#next] = batch[i]
        this.#next = (this.#next + 1) % n
        this.#size++
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
