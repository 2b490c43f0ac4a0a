/**
 * The group commit: the request-path writes asked for within one turn of the event loop run in
 * one `BEGIN IMMEDIATE` transaction, in the order they were asked, and their promises settle only
 * after the COMMIT (nothing is acknowledged before it is durable). A batch that finds the file
 * locked by another process is rolled back and put back at the head of the queue, ahead of any
 * call made since, and tried again after a pause (./busy.ts). A batch the disk refused (./disk.ts)
 * is run again call by call on reads alone: a call whose decision needs no write is answered, one
 * that needs a write fails with the disk's refusal.
 */
import type { Database as Db } from 'better-sqlite3'
import { isBusy, nextPause, Soon } from './busy.js'
import { refusesWrites, triedToWrite } from './disk.js'

/** One request-path write waiting for the next group commit. */
interface Pending {
  run: () => unknown
  resolve: (v: unknown) => void
  reject: (e: unknown) => void
  /** performance.now() when the call was made */
  queued: number
  /** the store operation, named in a disk refusal */
  op: string
  /** set inside the batch transaction, settled after COMMIT */
  result?: { ok: true; value: unknown } | { ok: false; error: unknown }
}

/** What the store does around each batch. */
export interface GroupCommitHooks {
  /** inside the transaction, before the first write (the write sequence's check and advance) */
  begin(): void
  /** after the COMMIT, before the calls settle (the write sequence seen) */
  committed(): void
  /** after a batch was settled, failed or put back: the attempt log's turn (SqliteAttemptLog.kick) */
  settled(): void
  /** ends a transaction a failed statement left open */
  rollback(): void
  /** before a batch the disk refused is run on reads alone (the write sequence's check, no advance) */
  check(): void
  /** what a call `op` fails with when the disk refused the write it needs (`e`: SQLite's error) */
  refusal(op: string, e: unknown): unknown
}

export class GroupCommit {
  #pending: Pending[] = []
  /** the group commit due next: on the next turn, or after a pause while the file is locked */
  readonly #soon = new Soon(() => this.flush())
  /** the pause before the next try of a locked batch, ms; 0 after a batch went through */
  #pause = 0
  readonly #db: Db
  readonly #batchTx: (batch: Pending[]) => void
  /** one call in a read transaction, under `PRAGMA query_only` */
  readonly #readTx: (run: () => unknown) => unknown

  /** @param busyTimeoutMs how long a call may wait for another process's lock, ms */
  constructor(db: Db, private readonly busyTimeoutMs: number, private readonly hooks: GroupCommitHooks) {
    this.#db = db
    // BEGIN IMMEDIATE: take the write lock before reading, so two processes cannot both read
    // the old state and then both write (and no deadlock upgrading a read lock).
    this.#batchTx = db.transaction((batch: Pending[]) => {
      hooks.begin()
      for (const p of batch) {
        try { p.result = { ok: true, value: p.run() } } catch (error) {
          // locked out mid-batch (a rollback journal spilling to the file), or SQLite rolled the
          // whole transaction back (disk full, I/O error): the batch waits, or fails, as one
          if (isBusy(error) || !db.inTransaction) throw error
          p.result = { ok: false, error }
        }
      }
    }).immediate
    this.#readTx = db.transaction((run: () => unknown) => run()).deferred
  }

  /** whether writes wait for the next group commit */
  get waiting(): boolean {
    return this.#pending.length > 0
  }

  /**
   * Queues `run` for the next group commit; settles after its COMMIT with what `run` returned or
   * threw, unwrapped (SQLITE_BUSY once `busyTimeoutMs` since `queued` has passed).
   * @param queued performance.now() when the call was made
   * @param op the store operation, named in a disk refusal
   */
  add<T>(run: () => T, queued: number, op: string): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      this.#pending.push({ run, resolve: resolve as (v: unknown) => void, reject, queued, op })
      if (!this.#soon.pending) this.#soon.schedule()
    })
  }

  /** Runs the writes waiting now, as one transaction. */
  flush(): void {
    this.#soon.cancel()
    const batch = this.#pending
    if (!batch.length) return
    this.#pending = []
    try {
      this.#batchTx(batch)
    } catch (e) {
      this.hooks.rollback()
      if (isBusy(e)) return this.#wait(batch, e)
      if (refusesWrites(e)) return this.#readOnly(batch, e)
      // the commit (or BEGIN) failed: nothing of the batch is durable, so nothing is acknowledged
      for (const p of batch) p.reject(e)
      this.hooks.settled()
      return
    }
    this.#pause = 0
    this.hooks.committed()
    for (const p of batch) {
      const r = p.result!
      if (r.ok) p.resolve(r.value)
      else p.reject(r.error)
    }
    // the log's turn, unless more writes came meanwhile
    this.hooks.settled()
  }

  /**
   * Another process holds the lock, and the batch was rolled back: its calls whose time is up
   * fail; the others go back to the head of the queue, ahead of any call made since, in their
   * order, and are tried again after a pause that ends no later than the first one's time.
   */
  #wait(batch: Pending[], e: unknown): void {
    const now = performance.now()
    const waiting: Pending[] = []
    for (const p of batch) {
      if (now - p.queued >= this.busyTimeoutMs) p.reject(e)
      else waiting.push(p)
    }
    this.#pending = waiting.concat(this.#pending)
    if (!this.#pending.length) return this.hooks.settled()
    this.#pause = nextPause(this.#pause)
    // the queue is in the order the calls were made: the first one's time runs out first
    this.#soon.schedule(Math.max(0, Math.min(this.#pause, this.#pending[0].queued + this.busyTimeoutMs - now)))
  }

  /**
   * The disk refused the batch (nothing of it is durable): each call runs again alone on reads,
   * and is answered when it wrote nothing; a call that needs a write fails with the refusal.
   */
  #readOnly(batch: Pending[], e: unknown): void {
    const db = this.#db
    try {
      this.hooks.check()
    } catch (wentBack) {
      for (const p of batch) p.reject(wentBack)
      return this.hooks.settled()
    }
    db.pragma('query_only = ON')
    try {
      for (const p of batch) {
        let value: unknown
        try {
          value = this.#readTx(p.run)
        } catch (inner) {
          p.reject(triedToWrite(inner) || refusesWrites(inner) ? this.hooks.refusal(p.op, e) : inner)
          continue
        }
        p.resolve(value)
      }
    } finally {
      db.pragma('query_only = OFF')
    }
    this.hooks.settled()
  }

  /** Commits what is queued (or fails it once its time is up), while the file is open. */
  async drain(): Promise<void> {
    while (this.#pending.length && this.#db.open) {
      this.flush()
      if (this.#pending.length) await new Promise((r) => setTimeout(r, this.#pause))
    }
  }
}
