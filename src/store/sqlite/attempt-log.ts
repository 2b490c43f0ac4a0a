/**
 * The SQLite store's attempt log, the fg_audit_v1 table, written off the request path.
 *
 * Appends never ride in the group commit of fences and claims (./index.ts): they commit in
 * transactions of their own, made on a later turn of the event loop when no request-path write
 * is waiting. While writes wait (queued, or waiting for another process's lock) the log waits for
 * their group commit, which hands it the next turn (`kick`). So that a gateway that is never
 * idle still writes its log, an append that has waited `LOG_PATIENCE_MS` takes that turn even
 * when more writes were queued meanwhile: they wait for one log transaction, which holds at most
 * `TX_ENTRIES` entries (one append at least) to keep it short.
 *
 * Appends commit in the order they were made. Each is its own savepoint: one the file refuses
 * fails alone, never another append nor a request's store call. Another process's lock is waited
 * for on timers, as the store's own calls wait; an append fails with StoreError once
 * `busyTimeoutMs` has passed since it was made.
 *
 * Entries past the retention are deleted in the same transactions, at most once a minute and
 * `PRUNE_ROWS` at a time (the rest in the next transactions), so a long backlog never stalls.
 */
import type { Database as Db, Statement, Transaction } from 'better-sqlite3'
import { storeCall } from '../shared/call.js'
import { auditQuerySql, auditRow, countsFromRows, entryFromRow, fencedSql, timelineSql } from '../attempt-log/sql.js'
import type { AuditCounts, AuditEntry, AuditLog, TimelineFilter } from '../attempt-log/types.js'
import { refusesWrites } from './disk.js'
import { busyWhy, isBusy, nextPause, Soon } from './busy.js'
import { AUDIT, AUDIT_TABLE } from './sql.js'

/** how long the log lets request-path writes go first before it takes the turn after a group commit, ms */
export const LOG_PATIENCE_MS = 20
/** most entries in one log transaction (an append is never split: a larger one goes alone) */
const TX_ENTRIES = 1000
/** how often entries past the retention are deleted, ms */
const PRUNE_EVERY_MS = 60_000
/** most entries deleted in one log transaction */
const PRUNE_ROWS = 5000

/** What the log needs of its store. */
export interface LogHost {
  db: Db
  /** how long an append waits for another process's lock, ms */
  busyTimeoutMs: number
  /** entries older than this are deleted, ms */
  retentionMs: number
  /** true once the store is closed: calls reject */
  closed(): boolean
  /** true while request-path writes wait for their group commit */
  writesWaiting(): boolean
  /** runs a read now, again while another process holds the lock; rejects with StoreError */
  read<T>(op: string, fn: () => T): Promise<T>
  /** ends a transaction a failed statement left open */
  rollback(): void
  /** what an append fails with when the disk refused its write (`e`: SQLite's error) */
  refusal(op: string, e: unknown): unknown
}

/** One `append` call waiting for its log transaction. */
interface Append {
  entries: readonly AuditEntry[]
  resolve: () => void
  reject: (e: unknown) => void
  /** performance.now() when the call was made */
  queued: number
}

export class SqliteAttemptLog implements AuditLog {
  readonly #host: LogHost
  readonly #query: Statement
  /** one log transaction: the appends' savepoints, then the prune's; returns the appends that failed and how many entries were deleted */
  readonly #tx: Transaction<(batch: Append[], pruneBefore: number | undefined) => { failed: Map<Append, unknown>; pruned?: number }>
  #queue: Append[] = []
  /** the log transaction due next: on the next turn, or after a pause */
  readonly #soon = new Soon(() => this.#flush())
  /** the pause before the next try while the file is locked, ms; 0 after a transaction went through */
  #pause = 0
  /** when entries past the retention were last deleted (Date.now()); 0: due at the next transaction */
  #pruned = 0
  /** set by `drain` (close): the log no longer yields to writes */
  #draining = false
  /** set by a `kick` that found the head of the queue waiting LOG_PATIENCE_MS: the next turn is the log's */
  #insist = false

  constructor(host: LogHost) {
    this.#host = host
    const { db } = host
    this.#query = db.prepare(auditQuerySql(AUDIT_TABLE, (n) => `@p${n}`))
    const insert = db.prepare(AUDIT.insert)
    const prune = db.prepare(AUDIT.prune)
    // nested in the log transaction: a savepoint each
    const appendOne = db.transaction((entries: readonly AuditEntry[]) => {
      for (const e of entries) insert.run(auditRow(e))
    })
    const pruneSome = db.transaction((before: number) => prune.run(before, PRUNE_ROWS).changes)
    this.#tx = db.transaction((batch: Append[], pruneBefore: number | undefined) => {
      const failed = new Map<Append, unknown>()
      for (const a of batch) {
        try { appendOne(a.entries) } catch (e) {
          // locked out mid-way, or SQLite rolled the whole transaction back: it fails as a whole
          if (isBusy(e) || !db.inTransaction) throw e
          failed.set(a, e)
        }
      }
      if (pruneBefore === undefined) return { failed }
      try {
        return { failed, pruned: pruneSome(pruneBefore) }
      } catch (e) {
        // the entries still commit; the prune is tried again in a minute
        if (isBusy(e) || !db.inTransaction) throw e
        return { failed, pruned: 0 }
      }
    })
  }

  /** Appends the entries in one transaction of the log, after the appends made before. */
  append(batch: readonly AuditEntry[]): Promise<void> {
    const queued = performance.now()
    return storeCall('sqlite', 'audit_append', this.#host.closed(), () => new Promise<void>((resolve, reject) => {
      const refused = (e: unknown) => reject(refusesWrites(e) ? this.#host.refusal('audit_append', e) : e)
      this.#queue.push({ entries: batch, resolve, reject: refused, queued })
      if (!this.#soon.pending) this.#soon.schedule()
    }), (e) => busyWhy(e, queued))
  }

  timeline(filter: TimelineFilter, since: number, limit: number): Promise<AuditEntry[]> {
    return this.#host.read('audit_timeline', () => {
      const q = timelineSql(AUDIT_TABLE, () => '?', filter, since, limit)
      return (this.#host.db.prepare(q.text).all(...q.values) as Record<string, unknown>[]).map(entryFromRow)
    })
  }

  fenced(since: number, until: number, route: string | undefined, limit: number): Promise<AuditEntry[]> {
    return this.#host.read('audit_fenced', () => {
      const q = fencedSql(AUDIT_TABLE, () => '?', since, until, route, limit)
      return (this.#host.db.prepare(q.text).all(...q.values) as Record<string, unknown>[]).map(entryFromRow)
    })
  }

  query(since: number, until: number, route?: string): Promise<AuditCounts[]> {
    return this.#host.read('audit_query', (): AuditCounts[] =>
      countsFromRows(this.#query.all({ p1: since, p2: until, p3: route ?? null }) as Record<string, unknown>[]))
  }

  /**
   * The store's group commit is done (committed, or failed): the log's turn is the next one,
   * taken when no write was queued meanwhile, or when the log has waited LOG_PATIENCE_MS.
   */
  kick(): void {
    if (!this.#queue.length) return
    this.#insist = performance.now() - this.#queue[0].queued >= LOG_PATIENCE_MS
    this.#soon.schedule()
  }

  /** Writes what was appended so far, waiting for another process's lock as appends do (close). */
  async drain(): Promise<void> {
    this.#draining = true
    while (this.#queue.length && this.#host.db.open) {
      this.#soon.cancel()
      this.#write()
      if (this.#queue.length) await new Promise((r) => setTimeout(r, this.#pause))
    }
    this.#soon.cancel()
  }

  #flush(): void {
    this.#soon.cancel()
    if (!this.#queue.length) return
    // request-path writes first: their group commit kicks the log once it is done
    if (this.#host.writesWaiting() && !this.#insist && !this.#draining) return
    this.#insist = false
    this.#write()
  }

  /** One log transaction: the appends at the head of the queue, up to TX_ENTRIES entries. */
  #write(): void {
    let n = 1
    for (let entries = this.#queue[0].entries.length; n < this.#queue.length; n++) {
      entries += this.#queue[n].entries.length
      if (entries > TX_ENTRIES) break
    }
    const batch = this.#queue.splice(0, n)
    const now = Date.now()
    const prune = now - this.#pruned >= PRUNE_EVERY_MS
    let done: { failed: Map<Append, unknown>; pruned?: number }
    try {
      done = this.#tx.immediate(batch, prune ? now - this.#host.retentionMs : undefined)
    } catch (e) {
      this.#host.rollback()
      if (isBusy(e)) return this.#wait(batch, e)
      // BEGIN or COMMIT failed: nothing of it is durable
      for (const a of batch) a.reject(e)
      return this.#next()
    }
    this.#pause = 0
    // a full prune leaves more behind: the next transaction goes on with it
    if (prune) this.#pruned = done.pruned! < PRUNE_ROWS ? now : 0
    for (const a of batch) {
      if (done.failed.has(a)) a.reject(done.failed.get(a))
      else a.resolve()
    }
    this.#next()
  }

  #next(): void {
    if (this.#queue.length && !this.#soon.pending && !this.#draining) this.#soon.schedule()
  }

  /**
   * Another process holds the lock and the transaction was rolled back: its appends whose time
   * is up fail; the others go back to the head of the queue, in their order, and are tried again
   * after a pause that ends no later than the first one's time.
   */
  #wait(batch: Append[], e: unknown): void {
    const now = performance.now()
    const waiting: Append[] = []
    for (const a of batch) {
      if (now - a.queued >= this.#host.busyTimeoutMs) a.reject(e)
      else waiting.push(a)
    }
    this.#queue = waiting.concat(this.#queue)
    if (!this.#queue.length) return
    this.#pause = nextPause(this.#pause)
    if (this.#draining) return
    this.#soon.schedule(Math.max(0, Math.min(this.#pause, this.#queue[0].queued + this.#host.busyTimeoutMs - now)))
  }
}
