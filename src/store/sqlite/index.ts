/**
 * SQLite store (better-sqlite3, WAL). The default: durable across restarts and kill -9, and
 * safe for several gateway processes on one host sharing the file (every check-and-set runs in
 * a `BEGIN IMMEDIATE` transaction, which takes SQLite's write lock before reading).
 * `synchronous = NORMAL` in WAL mode survives a process crash; a power loss can lose the last
 * commits, so set `store.synchronous: full` where the host may lose power.
 *
 * Group commit: the operations asked for within one turn of the event loop run in one
 * transaction, in the order they were asked, attempt log entries included; their promises settle
 * only after the COMMIT, so nothing is acknowledged before it is durable. Each check-and-set
 * stays atomic (the batch holds the write lock from its first read to its commit).
 *
 * Another process's lock (another gateway, `fencegate audit`/`resolve`, a `sqlite3` shell):
 * better-sqlite3 is synchronous, so SQLite's own busy_timeout would wait on the event-loop
 * thread and stall every request of the process. Once the file is initialised the connection
 * runs with busy_timeout 0: a locked database answers SQLITE_BUSY at once, the batch is rolled
 * back and put back at the head of the queue (later calls never overtake it), and it is tried
 * again after a short pause (1 ms doubling to 20 ms) while the event loop serves everything
 * else. Each call fails with StoreError once `busyTimeoutMs` has passed since it was made.
 * Reads and the calls outside the group commit (resolve, acceptLoss, ping) retry the same way.
 */
import { mkdirSync, statSync } from 'node:fs'
import { dirname } from 'node:path'
import { randomUUID } from 'node:crypto'
import Database, { type Database as Db, type Statement } from 'better-sqlite3'
import { decideClaim, decideFinish, decideResolve, mayRelease, type IdemRecord } from '../record-state.js'
import { recordId, parseRecordId } from '../memory.js'
import { StoreError, type AdmitResult, type FenceMark, type FenceRequest, type StateMarkers, type ClaimRequest, type ClaimResult, type Completion, type FenceResult, type RecordKey, type Resolution, type ResolveResult, type Store, type UnknownRecord, type UnknownReason } from '../types.js'
import { AUDIT_COLUMNS, auditQuerySql, auditRow, countsFromRows, entryFromRow, fencedSql, timelineSql } from '../attempt-log/sql.js'
import type { AuditCounts, AuditEntry, AuditLog } from '../attempt-log/types.js'
import type { OlderWrites, Registration } from '../types.js'

export interface SqliteStoreOptions {
  /** database file; its folder is created when missing */
  path: string
  /**
   * how long a call waits for another process's lock before it fails with StoreError, ms;
   * default 1000. The wait is asynchronous (retries on timers), except when the file is opened
   * and initialised, which waits in the constructor.
   */
  busyTimeoutMs?: number
  /** `normal` (default) survives a process crash, `full` also a power loss */
  synchronous?: 'normal' | 'full'
  /** how often expired records are deleted, ms; default 60000 (0 turns the reaper off) */
  reapIntervalMs?: number
  /** attempt log entries older than this are deleted, ms; default 7 days */
  auditRetentionMs?: number
}

/** One operation waiting for the next group commit. */
interface Pending {
  op: string
  run: () => unknown
  resolve: (v: unknown) => void
  reject: (e: unknown) => void
  /** performance.now() when the call was made */
  queued: number
  /** set inside the batch transaction, settled after COMMIT */
  result?: { ok: true; value: unknown } | { ok: false; error: unknown }
}

interface RecordRow {
  state: IdemRecord['state']
  fingerprint: string
  claim_id: string
  lease_until: number
  expires_at: number
  status: number | null
  headers: string | null
  body: Buffer | null
  reason: IdemRecord['reason'] | null
}

// The schema version is in the table names, so a future layout can sit beside this one.
const SCHEMA = `
CREATE TABLE IF NOT EXISTS fg_meta_v1 (name TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS fg_fences_v1 (resource TEXT PRIMARY KEY, highest INTEGER NOT NULL, since INTEGER) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS fg_records_v1 (
  id TEXT PRIMARY KEY, state TEXT NOT NULL, fingerprint TEXT NOT NULL, claim_id TEXT NOT NULL,
  lease_until INTEGER NOT NULL, expires_at INTEGER NOT NULL,
  status INTEGER, headers TEXT, body BLOB, reason TEXT
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS fg_records_v1_expires ON fg_records_v1 (expires_at);
CREATE INDEX IF NOT EXISTS fg_records_v1_unsettled ON fg_records_v1 (state) WHERE state IN ('unknown', 'in_flight');
CREATE TABLE IF NOT EXISTS fg_audit_v1 (
  time INTEGER NOT NULL, kind TEXT NOT NULL, replica TEXT NOT NULL, route TEXT NOT NULL, method TEXT,
  resource TEXT, token TEXT, key_hash TEXT, fingerprint TEXT, outcome TEXT, result TEXT, unknown TEXT,
  abandoned INTEGER NOT NULL DEFAULT 0, duplicate INTEGER NOT NULL DEFAULT 0, overtaken INTEGER NOT NULL DEFAULT 0,
  status INTEGER, upstream_status INTEGER, duration_ms REAL, trace_id TEXT, resolution TEXT, request_id TEXT,
  reason TEXT, actor TEXT, upstream_ms REAL, late_ms REAL, highest_token TEXT
);
CREATE INDEX IF NOT EXISTS fg_audit_v1_time ON fg_audit_v1 (time);
CREATE INDEX IF NOT EXISTS fg_audit_v1_key ON fg_audit_v1 (route, key_hash, time);
`

// `fencing.serialize: store`: the forwarded fenced writes registered by every process sharing the
// file (src/fencing/window.ts); a row counts while its deadline (epoch ms) is ahead
const REGISTRATIONS_SCHEMA = `
CREATE TABLE IF NOT EXISTS fg_registrations_v1 (
  resource TEXT NOT NULL, id TEXT NOT NULL, token INTEGER NOT NULL, deadline INTEGER NOT NULL,
  PRIMARY KEY (resource, id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS fg_registrations_v1_deadline ON fg_registrations_v1 (deadline);
`

const toRecord = (r: RecordRow | undefined): IdemRecord | undefined => r && {
  state: r.state,
  fingerprint: r.fingerprint,
  claimId: r.claim_id,
  leaseUntil: r.lease_until,
  expiresAt: r.expires_at,
  status: r.status ?? undefined,
  reason: r.reason ?? undefined,
  response: r.state === 'completed' ? { status: r.status!, headers: JSON.parse(r.headers ?? '[]'), body: r.body ?? Buffer.alloc(0) } : undefined,
}

const toRow = (id: string, r: IdemRecord) => ({
  id,
  state: r.state,
  fingerprint: r.fingerprint,
  claim_id: r.claimId,
  lease_until: r.leaseUntil,
  expires_at: r.expiresAt,
  status: r.response?.status ?? r.status ?? null,
  headers: r.response ? JSON.stringify(r.response.headers) : null,
  body: r.response?.body ?? null,
  reason: r.reason ?? null,
})

/** SQLITE_BUSY and its extended codes: another connection holds a lock; worth trying again. */
const isBusy = (e: unknown): boolean => String((e as { code?: unknown } | null)?.code ?? '').startsWith('SQLITE_BUSY')
/** pauses between tries while the database is locked, ms: the first, and the longest */
const FIRST_PAUSE_MS = 1
const LONGEST_PAUSE_MS = 20

export class SqliteStore implements Store {
  readonly kind = 'sqlite' as const
  /** false: a call may wait (on timers) for another process's lock, so guardStore races it */
  readonly inProcess = false
  /** set when the file was first initialised; a different value later means the file was replaced */
  readonly epoch: string
  readonly #path: string
  /** the file's inode when opened: another one at the path means the file was replaced */
  readonly #inode: number
  readonly #metaGet: Statement
  readonly #metaPut: Statement
  readonly #db: Db
  readonly #fenceUp: Statement
  readonly #fenceGet: Statement
  readonly #markGet: Statement
  readonly #recGet: Statement
  readonly #recPut: Statement
  readonly #recDel: Statement
  readonly #renew: Statement
  readonly #unknowns: Statement
  readonly #reap: Statement
  readonly #fenceOp: (resource: string, token: bigint, now: number) => FenceResult
  readonly #claimOp: (id: string, req: ClaimRequest, now: number) => ClaimResult
  readonly #admitOp: (fence: FenceRequest, id: string, req: ClaimRequest, now: number) => AdmitResult
  readonly #finishOp: (id: string, claimId: string, done: Completion, ttlMs: number, now: number) => void
  readonly #releaseOp: (id: string, claimId: string) => void
  readonly #batchTx: (batch: Pending[]) => void
  #pending: Pending[] = []
  /** set while a flush is due (next turn, or after a pause while locked): cancels it */
  #cancelFlush?: () => void
  /** the pause before the next try of a locked batch, ms; 0 after a batch went through */
  #pause = 0
  /** how long a call may wait for another process's lock, ms */
  readonly #busyTimeoutMs: number
  readonly #reaper?: NodeJS.Timeout
  readonly #pingTx: () => void
  readonly #resolveTx: (id: string, as: Resolution, ttlMs: number, now: number) => ResolveResult
  /** the attempt log: the fg_audit_v1 table */
  readonly audit: AuditLog

  /** @throws StoreError when the file cannot be opened or initialised */
  constructor(options: SqliteStoreOptions) {
    const { path, busyTimeoutMs = 1000, synchronous = 'normal', reapIntervalMs = 60_000, auditRetentionMs = 7 * 86_400_000 } = options
    if (typeof path !== 'string' || !path) throw new TypeError('options.path must be a non-empty string')
    if (!Number.isInteger(busyTimeoutMs) || busyTimeoutMs < 0) throw new TypeError('options.busyTimeoutMs must be a non-negative integer')
    this.#busyTimeoutMs = busyTimeoutMs
    try {
      if (path !== ':memory:') mkdirSync(dirname(path), { recursive: true })
      this.#db = new Database(path, { timeout: busyTimeoutMs })
      this.#db.pragma('journal_mode = WAL')
      this.#db.pragma(`synchronous = ${synchronous === 'full' ? 'FULL' : 'NORMAL'}`)
      this.#db.exec(SCHEMA)
      this.#db.exec(REGISTRATIONS_SCHEMA)
      // a file made before the attempt log kept request ids, or operators' reasons
      const columns = new Set((this.#db.pragma('table_info(fg_audit_v1)') as { name: string }[]).map((c) => c.name))
      for (const c of ['request_id', 'reason', 'actor', 'highest_token']) if (!columns.has(c)) this.#db.exec(`ALTER TABLE fg_audit_v1 ADD COLUMN ${c} TEXT`)
      // … or effect durations and stale writers' lateness (fencegate leases)
      for (const c of ['upstream_ms', 'late_ms']) if (!columns.has(c)) this.#db.exec(`ALTER TABLE fg_audit_v1 ADD COLUMN ${c} REAL`)
      // a file made before the marks kept when they were first accepted: those marks have none
      const fenceColumns = new Set((this.#db.pragma('table_info(fg_fences_v1)') as { name: string }[]).map((c) => c.name))
      if (!fenceColumns.has('since')) this.#db.exec('ALTER TABLE fg_fences_v1 ADD COLUMN since INTEGER')
      this.#db.prepare('INSERT OR IGNORE INTO fg_meta_v1 (name, value) VALUES (?, ?)').run('epoch', randomUUID())
      this.epoch = (this.#db.prepare("SELECT value FROM fg_meta_v1 WHERE name = 'epoch'").get() as { value: string }).value
      this.#path = path
      this.#inode = path === ':memory:' ? 0 : statSync(path).ino
      // from here on a locked database answers SQLITE_BUSY at once, and the wait is on timers
      // (see the file's header): SQLite's busy handler would sleep on the event-loop thread
      this.#db.pragma('busy_timeout = 0')
    } catch (e) {
      throw new StoreError(`cannot open SQLite store at ${path}: ${(e as Error).message}`, 'open', { cause: e })
    }
    const db = this.#db
    this.#metaGet = db.prepare('SELECT value FROM fg_meta_v1 WHERE name = ?').pluck()
    this.#metaPut = db.prepare('INSERT OR REPLACE INTO fg_meta_v1 (name, value) VALUES (?, ?)')
    // run inside the batch's BEGIN IMMEDIATE transaction: the read and the write are one check-and-set
    this.#fenceUp = db.prepare('INSERT OR REPLACE INTO fg_fences_v1 (resource, highest, since) VALUES (?, ?, ?)')
    this.#fenceGet = db.prepare('SELECT highest FROM fg_fences_v1 WHERE resource = ?').safeIntegers(true)
    this.#markGet = db.prepare('SELECT highest, since FROM fg_fences_v1 WHERE resource = ?').safeIntegers(true)
    this.#recGet = db.prepare('SELECT * FROM fg_records_v1 WHERE id = ?')
    this.#recPut = db.prepare(`INSERT OR REPLACE INTO fg_records_v1 (id, state, fingerprint, claim_id, lease_until, expires_at, status, headers, body, reason)
      VALUES (@id, @state, @fingerprint, @claim_id, @lease_until, @expires_at, @status, @headers, @body, @reason)`)
    this.#recDel = db.prepare('DELETE FROM fg_records_v1 WHERE id = ?')
    // the route's records start with its name and a newline (recordId)
    this.#unknowns = db.prepare(`SELECT id, state, reason, lease_until, expires_at FROM fg_records_v1
      WHERE state IN ('unknown', 'in_flight') AND (state = 'unknown' OR lease_until <= @now) AND expires_at > @now
        AND (@route IS NULL OR substr(id, 1, length(@route) + 1) = @route || char(10)) LIMIT @limit`)
    this.#renew = db.prepare("UPDATE fg_records_v1 SET lease_until = ? WHERE id = ? AND claim_id = ? AND state = 'in_flight'")
    this.#reap = db.prepare('DELETE FROM fg_records_v1 WHERE id IN (SELECT id FROM fg_records_v1 WHERE expires_at <= ? LIMIT 1000)')

    const get = (id: string) => toRecord(this.#recGet.get(id) as RecordRow | undefined)
    // an equal token is accepted without a write: the mark and its since stay
    const fenceOp = (resource: string, token: bigint, now: number): FenceResult => {
      const row = this.#markGet.get(resource) as { highest: bigint; since: bigint | null } | undefined
      if (row && token <= row.highest) {
        const since = row.since === null ? undefined : Number(row.since)
        return { accepted: token === row.highest, highest: row.highest, since }
      }
      this.#fenceUp.run(resource, token, now)
      return { accepted: true, highest: token, since: now, raised: true }
    }
    const claimOp = (id: string, req: ClaimRequest, now: number): ClaimResult => {
      const { result, write } = decideClaim(get(id), req, now)
      if (write) this.#recPut.run(toRow(id, write))
      return result
    }
    this.#admitOp = (fence: FenceRequest, id: string, req: ClaimRequest, now: number): AdmitResult => {
      const result = fenceOp(fence.resource, fence.token, now)
      return result.accepted ? { fence: result, claim: claimOp(id, req, now) } : { fence: result }
    }
    const finishOp = (id: string, claimId: string, done: Completion, ttlMs: number, now: number) => {
      const next = decideFinish(get(id), claimId, done, ttlMs, now)
      if (next) this.#recPut.run(toRow(id, next))
    }
    const releaseOp = (id: string, claimId: string) => {
      if (mayRelease(get(id), claimId)) this.#recDel.run(id)
    }
    const resolveTx = db.transaction((id: string, as: Resolution, ttlMs: number, now: number): ResolveResult => {
      const { result, write } = decideResolve(get(id), as, ttlMs, now)
      if (write === null) this.#recDel.run(id)
      else if (write) this.#recPut.run(toRow(id, write))
      return result
    })
    this.#resolveTx = resolveTx.immediate
    this.audit = sqliteAuditLog(db, auditRetentionMs, (op, fn) => this.#run(op, fn), (op, fn) => this.#write(op, fn))
    // Run inside the batch transaction, without a savepoint each (they cost more than the
    // operations): a statement that fails is undone by SQLite alone, and each operation writes
    // with one statement (admit with two: a mark raised for a claim that then failed, as when
    // fence and claim are two calls), so the others still commit.
    this.#fenceOp = fenceOp
    this.#claimOp = claimOp
    this.#finishOp = finishOp
    this.#releaseOp = releaseOp
    // BEGIN IMMEDIATE: take the write lock before reading, so two processes cannot both read
    // the old state and then both write (and no deadlock upgrading a read lock).
    this.#batchTx = db.transaction((batch: Pending[]) => {
      for (const p of batch) {
        try { p.result = { ok: true, value: p.run() } } catch (error) {
          // locked out mid-batch (a rollback journal spilling to the file): the whole batch waits
          if (isBusy(error)) throw error
          p.result = { ok: false, error }
        }
      }
    }).immediate
    this.#pingTx = db.transaction(() => {}).immediate
    if (reapIntervalMs > 0) {
      this.#reaper = setInterval(() => { try { this.reap(Date.now()) } catch { /* next round */ } }, reapIntervalMs)
      this.#reaper.unref()
    }
  }

  /**
   * Runs `fn` (a read, or a write in its own transaction) now; while another process holds the
   * lock, again after a pause, until `busyTimeoutMs` since the call has passed.
   */
  #run<T>(op: string, fn: () => T): Promise<T> {
    const queued = performance.now()
    let pause = FIRST_PAUSE_MS
    return new Promise<T>((resolve, reject) => {
      const attempt = () => {
        try {
          resolve(fn())
        } catch (e) {
          this.#rollback()
          const left = queued + this.#busyTimeoutMs - performance.now()
          if (!isBusy(e) || left <= 0) return reject(this.#error(op, e, queued))
          setTimeout(attempt, Math.min(pause, left))
          pause = Math.min(pause * 2, LONGEST_PAUSE_MS)
        }
      }
      attempt()
    })
  }

  /** Queues a write for the next group commit (see the file's header). */
  #write<T>(op: string, run: () => T): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      this.#pending.push({ op, run, resolve: resolve as (v: unknown) => void, reject, queued: performance.now() })
      if (!this.#cancelFlush) this.#schedule()
    })
  }

  /** Flushes on the next turn of the event loop, or after `pauseMs`. */
  #schedule(pauseMs?: number): void {
    if (pauseMs === undefined) {
      const next = setImmediate(() => this.#flush())
      this.#cancelFlush = () => clearImmediate(next)
    } else {
      const next = setTimeout(() => this.#flush(), pauseMs)
      this.#cancelFlush = () => clearTimeout(next)
    }
  }

  #flush(): void {
    this.#cancelFlush?.()
    this.#cancelFlush = undefined
    const batch = this.#pending
    if (!batch.length) return
    this.#pending = []
    try {
      this.#batchTx(batch)
    } catch (e) {
      this.#rollback()
      if (isBusy(e)) return this.#wait(batch, e)
      // the commit (or BEGIN) failed: nothing of the batch is durable, so nothing is acknowledged
      for (const p of batch) p.reject(this.#error(p.op, e, p.queued))
      return
    }
    this.#pause = 0
    for (const p of batch) {
      const r = p.result!
      if (r.ok) p.resolve(r.value)
      else p.reject(this.#error(p.op, r.error, p.queued))
    }
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
      if (now - p.queued >= this.#busyTimeoutMs) p.reject(this.#error(p.op, e, p.queued))
      else waiting.push(p)
    }
    this.#pending = waiting.concat(this.#pending)
    if (!this.#pending.length) return
    this.#pause = Math.min(Math.max(this.#pause * 2, FIRST_PAUSE_MS), LONGEST_PAUSE_MS)
    // the queue is in the order the calls were made: the first one's time runs out first
    this.#schedule(Math.max(0, Math.min(this.#pause, this.#pending[0].queued + this.#busyTimeoutMs - now)))
  }

  /** Ends a transaction a failed statement left open (better-sqlite3 normally has rolled it back). */
  #rollback(): void {
    try {
      if (this.#db.open && this.#db.inTransaction) this.#db.exec('ROLLBACK')
    } catch { /* nothing left to undo */ }
  }

  #error(op: string, e: unknown, queued: number): StoreError {
    const why = isBusy(e)
      ? `the database is locked by another process (gave up after ${Math.round(performance.now() - queued)} ms)`
      : (e as Error).message
    return new StoreError(`sqlite ${op}: ${why}`, op, { cause: e })
  }

  fence(resource: string, token: bigint, now = Date.now()): Promise<FenceResult> {
    return this.#write('fence', () => this.#fenceOp(resource, token, now))
  }

  /** fence and claim as one operation of the group commit: nothing else runs between them */
  admit(fence: FenceRequest, key: RecordKey, req: ClaimRequest, now: number): Promise<AdmitResult> {
    return this.#write('admit', () => this.#admitOp(fence, recordId(key), req, now))
  }

  highest(resource: string): Promise<bigint | undefined> {
    return this.#run('highest', () => (this.#fenceGet.get(resource) as { highest: bigint } | undefined)?.highest)
  }

  mark(resource: string): Promise<FenceMark | undefined> {
    return this.#run('mark', () => {
      const row = this.#markGet.get(resource) as { highest: bigint; since: bigint | null } | undefined
      return row && { highest: row.highest, since: row.since === null ? undefined : Number(row.since) }
    })
  }

  claim(key: RecordKey, req: ClaimRequest, now: number): Promise<ClaimResult> {
    return this.#write('claim', () => this.#claimOp(recordId(key), req, now))
  }

  finish(key: RecordKey, claimId: string, done: Completion, ttlMs: number, now: number): Promise<void> {
    return this.#write('finish', () => this.#finishOp(recordId(key), claimId, done, ttlMs, now))
  }

  renew(key: RecordKey, claimId: string, leaseMs: number, now: number): Promise<boolean> {
    return this.#write('renew', () => this.#renew.run(now + leaseMs, recordId(key), claimId).changes > 0)
  }

  release(key: RecordKey, claimId: string): Promise<void> {
    return this.#write('release', () => this.#releaseOp(recordId(key), claimId))
  }

  resolve(key: RecordKey, as: Resolution, ttlMs: number, now: number): Promise<ResolveResult> {
    return this.#run('resolve', () => this.#resolveTx(recordId(key), as, ttlMs, now))
  }

  unknowns(now: number, options: { route?: string; limit?: number } = {}): Promise<UnknownRecord[]> {
    const { route, limit = 1000 } = options
    return this.#run('unknowns', () => {
      const rows = this.#unknowns.all({ now, route: route ?? null, limit }) as { id: string; state: string; reason: UnknownReason | null; lease_until: number; expires_at: number }[]
      return rows.map((r) => ({
        key: parseRecordId(r.id),
        reason: r.state === 'in_flight' ? 'crash' : r.reason ?? 'crash',
        leaseUntil: r.lease_until,
        expiresAt: r.expires_at,
      }))
    })
  }

  /** The connection's own journal_mode and synchronous (0 off, 1 normal, 2 full, 3 extra): what `fencegate doctor` reports. */
  settings(): { journalMode: string; synchronous: number } {
    return { journalMode: String(this.#db.pragma('journal_mode', { simple: true })), synchronous: Number(this.#db.pragma('synchronous', { simple: true })) }
  }

  /** Deletes up to 1000 expired records; returns how many. */
  reap(now: number): number {
    return this.#reap.run(now).changes + this.#registrations.reap.run(now).changes
  }

  markers(): Promise<StateMarkers> {
    return this.#run('markers', () => {
      if (this.#path !== ':memory:') {
        let inode: number | undefined
        try { inode = statSync(this.#path).ino } catch { /* deleted */ }
        // this process still writes to the old file, which no new process will read
        if (inode !== this.#inode) return {}
      }
      return { epoch: this.#metaGet.get('epoch') as string | undefined, accepted: this.#metaGet.get('accepted') as string | undefined }
    })
  }

  acceptLoss(): Promise<string> {
    // one transaction: retried whole while another process holds the lock
    return this.#run('accept_loss', () => this.#db.transaction(() => {
      const epoch = (this.#metaGet.get('epoch') as string | undefined) ?? randomUUID()
      this.#metaPut.run('epoch', epoch)
      this.#metaPut.run('accepted', epoch)
      return epoch
    }).immediate())
  }

  /** Takes and gives back the write lock: a read alone would pass while writers are locked out. */
  ping(): Promise<void> {
    return this.#run('ping', () => this.#pingTx())
  }

  /** `fencing.serialize: store`: its statements, prepared on first use */
  #registrationStatements?: RegistrationStatements
  get #registrations(): RegistrationStatements {
    return (this.#registrationStatements ??= registrationStatements(this.#db))
  }

  /**
   * One operation of the group commit, in its BEGIN IMMEDIATE transaction: the mark read and the
   * registration written hold SQLite's write lock together, so no fence of any process sharing the
   * file runs between them.
   */
  register(resource: string, token: bigint, id: string, deadline: number, now: number): Promise<Registration> {
    return this.#write('register', (): Registration => {
      const st = this.#registrations
      const highest = st.mark.get(resource) as bigint | undefined
      if (highest !== undefined && token < highest) return { registered: false, highest }
      st.dropExpired.run(resource, now)
      st.put.run(resource, id, token, deadline)
      return { registered: true, ...st.older(resource, token, now) }
    })
  }

  olderRegistered(resource: string, token: bigint, now: number): Promise<OlderWrites> {
    return this.#run('older_registered', () => this.#registrations.older(resource, token, now))
  }

  unregister(resource: string, id: string, until = 0): Promise<void> {
    return this.#write('unregister', () => {
      const st = this.#registrations
      if (until > 0) st.hold.run(until, resource, id)
      else st.drop.run(resource, id)
    })
  }

  async close(): Promise<void> {
    if (this.#reaper) clearInterval(this.#reaper)
    // what was asked before close() still commits, or fails once its time is up
    while (this.#pending.length && this.#db.open) {
      this.#flush()
      if (this.#pending.length) await new Promise((r) => setTimeout(r, this.#pause))
    }
    if (this.#db.open) this.#db.close()
  }
}

type RegistrationStatements = ReturnType<typeof registrationStatements>

/** The statements of `register`, `olderRegistered` and `unregister` (fg_registrations_v1). */
function registrationStatements(db: Db) {
  const older = db.prepare(`SELECT min(token) AS oldest, max(deadline) AS until FROM fg_registrations_v1
    WHERE resource = ? AND token < ? AND deadline > ?`).safeIntegers(true)
  return {
    mark: db.prepare('SELECT highest FROM fg_fences_v1 WHERE resource = ?').pluck().safeIntegers(true),
    dropExpired: db.prepare('DELETE FROM fg_registrations_v1 WHERE resource = ? AND deadline <= ?'),
    put: db.prepare(`INSERT INTO fg_registrations_v1 (resource, id, token, deadline) VALUES (?, ?, ?, ?)
      ON CONFLICT (resource, id) DO UPDATE SET token = excluded.token, deadline = excluded.deadline`),
    hold: db.prepare('UPDATE fg_registrations_v1 SET deadline = ? WHERE resource = ? AND id = ?'),
    drop: db.prepare('DELETE FROM fg_registrations_v1 WHERE resource = ? AND id = ?'),
    reap: db.prepare(`DELETE FROM fg_registrations_v1 WHERE (resource, id) IN (
      SELECT resource, id FROM fg_registrations_v1 WHERE deadline <= ? LIMIT 1000)`),
    older: (resource: string, token: bigint, now: number): OlderWrites => {
      const r = older.get(resource, token, now) as { oldest: bigint | null; until: bigint | null }
      return r.oldest === null ? { until: 0 } : { oldest: r.oldest, until: Number(r.until) }
    },
  }
}

/** The attempt log in the fg_audit_v1 table; entries past the retention are deleted once a minute while appending. */
function sqliteAuditLog(db: Db, retentionMs: number, run: <T>(op: string, fn: () => T) => Promise<T>, write: <T>(op: string, fn: () => T) => Promise<T>): AuditLog {
  const insert = db.prepare(`INSERT INTO fg_audit_v1 (${AUDIT_COLUMNS.join(', ')}) VALUES (${AUDIT_COLUMNS.map(() => '?').join(', ')})`)
  const prune = db.prepare('DELETE FROM fg_audit_v1 WHERE time < ?')
  const query = db.prepare(auditQuerySql('fg_audit_v1', (n) => `@p${n}`))
  let pruned = 0
  const append = (batch: readonly AuditEntry[]) => {
    for (const e of batch) insert.run(auditRow(e))
    const now = Date.now()
    if (now - pruned >= 60_000) { pruned = now; prune.run(now - retentionMs) }
  }
  return {
    // in the group commit with the records (one transaction per event-loop turn)
    append: (batch) => write('audit_append', () => append(batch)),
    timeline: (filter, since, limit) => run('audit_timeline', () => {
      const q = timelineSql('fg_audit_v1', () => '?', filter, since, limit)
      return (db.prepare(q.text).all(...q.values) as Record<string, unknown>[]).map(entryFromRow)
    }),
    fenced: (since, until, route, limit) => run('audit_fenced', () => {
      const q = fencedSql('fg_audit_v1', () => '?', since, until, route, limit)
      return (db.prepare(q.text).all(...q.values) as Record<string, unknown>[]).map(entryFromRow)
    }),
    query: (since, until, route) => run('audit_query', (): AuditCounts[] =>
      countsFromRows(query.all({ p1: since, p2: until, p3: route ?? null }) as Record<string, unknown>[])),
  }
}
