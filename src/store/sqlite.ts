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
 */
import { mkdirSync, statSync } from 'node:fs'
import { dirname } from 'node:path'
import { randomUUID } from 'node:crypto'
import Database, { type Database as Db, type Statement } from 'better-sqlite3'
import { decideClaim, decideFinish, decideResolve, mayRelease, type IdemRecord } from './records.js'
import { recordId } from './memory.js'
import { StoreError, type AdmitResult, type FenceRequest, type StateMarkers, type ClaimRequest, type ClaimResult, type Completion, type FenceResult, type RecordKey, type Resolution, type ResolveResult, type Store } from './types.js'
import { AUDIT_COLUMNS, auditQuerySql, auditRow, countsFromRows } from '../audit/sql.js'
import type { AuditCounts, AuditEntry, AuditLog } from '../audit/types.js'

export interface SqliteStoreOptions {
  /** database file; its folder is created when missing */
  path: string
  /** how long to wait for another process's write lock, ms; default 1000 */
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
CREATE TABLE IF NOT EXISTS fg_fences_v1 (resource TEXT PRIMARY KEY, highest INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS fg_records_v1 (
  id TEXT PRIMARY KEY, state TEXT NOT NULL, fingerprint TEXT NOT NULL, claim_id TEXT NOT NULL,
  lease_until INTEGER NOT NULL, expires_at INTEGER NOT NULL,
  status INTEGER, headers TEXT, body BLOB, reason TEXT
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS fg_records_v1_expires ON fg_records_v1 (expires_at);
CREATE TABLE IF NOT EXISTS fg_audit_v1 (
  time INTEGER NOT NULL, kind TEXT NOT NULL, replica TEXT NOT NULL, route TEXT NOT NULL, method TEXT,
  resource TEXT, token TEXT, key_hash TEXT, fingerprint TEXT, outcome TEXT, result TEXT, unknown TEXT,
  abandoned INTEGER NOT NULL DEFAULT 0, duplicate INTEGER NOT NULL DEFAULT 0, overtaken INTEGER NOT NULL DEFAULT 0,
  status INTEGER, upstream_status INTEGER, duration_ms REAL, trace_id TEXT, resolution TEXT
);
CREATE INDEX IF NOT EXISTS fg_audit_v1_time ON fg_audit_v1 (time);
CREATE INDEX IF NOT EXISTS fg_audit_v1_key ON fg_audit_v1 (route, key_hash, time);
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

export class SqliteStore implements Store {
  readonly kind = 'sqlite' as const
  readonly inProcess = true
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
  readonly #recGet: Statement
  readonly #recPut: Statement
  readonly #recDel: Statement
  readonly #renew: Statement
  readonly #reap: Statement
  readonly #fenceOp: (resource: string, token: bigint) => FenceResult
  readonly #claimOp: (id: string, req: ClaimRequest, now: number) => ClaimResult
  readonly #admitOp: (fence: FenceRequest, id: string, req: ClaimRequest, now: number) => AdmitResult
  readonly #finishOp: (id: string, claimId: string, done: Completion, ttlMs: number, now: number) => void
  readonly #releaseOp: (id: string, claimId: string) => void
  readonly #batchTx: (batch: Pending[]) => void
  #pending: Pending[] = []
  #flushing = false
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
    try {
      if (path !== ':memory:') mkdirSync(dirname(path), { recursive: true })
      this.#db = new Database(path, { timeout: busyTimeoutMs })
      this.#db.pragma('journal_mode = WAL')
      this.#db.pragma(`synchronous = ${synchronous === 'full' ? 'FULL' : 'NORMAL'}`)
      this.#db.exec(SCHEMA)
      this.#db.prepare('INSERT OR IGNORE INTO fg_meta_v1 (name, value) VALUES (?, ?)').run('epoch', randomUUID())
      this.epoch = (this.#db.prepare("SELECT value FROM fg_meta_v1 WHERE name = 'epoch'").get() as { value: string }).value
      this.#path = path
      this.#inode = path === ':memory:' ? 0 : statSync(path).ino
    } catch (e) {
      throw new StoreError(`cannot open SQLite store at ${path}: ${(e as Error).message}`, 'open', { cause: e })
    }
    const db = this.#db
    this.#metaGet = db.prepare('SELECT value FROM fg_meta_v1 WHERE name = ?').pluck()
    this.#metaPut = db.prepare('INSERT OR REPLACE INTO fg_meta_v1 (name, value) VALUES (?, ?)')
    // RETURNING yields no row when the WHERE refuses the update: the token was stale.
    this.#fenceUp = db.prepare(`INSERT INTO fg_fences_v1 (resource, highest) VALUES (?, ?)
      ON CONFLICT (resource) DO UPDATE SET highest = excluded.highest WHERE excluded.highest >= fg_fences_v1.highest
      RETURNING highest`).safeIntegers(true)
    this.#fenceGet = db.prepare('SELECT highest FROM fg_fences_v1 WHERE resource = ?').safeIntegers(true)
    this.#recGet = db.prepare('SELECT * FROM fg_records_v1 WHERE id = ?')
    this.#recPut = db.prepare(`INSERT OR REPLACE INTO fg_records_v1 (id, state, fingerprint, claim_id, lease_until, expires_at, status, headers, body, reason)
      VALUES (@id, @state, @fingerprint, @claim_id, @lease_until, @expires_at, @status, @headers, @body, @reason)`)
    this.#recDel = db.prepare('DELETE FROM fg_records_v1 WHERE id = ?')
    this.#renew = db.prepare("UPDATE fg_records_v1 SET lease_until = ? WHERE id = ? AND claim_id = ? AND state = 'in_flight'")
    this.#reap = db.prepare('DELETE FROM fg_records_v1 WHERE id IN (SELECT id FROM fg_records_v1 WHERE expires_at <= ? LIMIT 1000)')

    const get = (id: string) => toRecord(this.#recGet.get(id) as RecordRow | undefined)
    const fenceOp = (resource: string, token: bigint): FenceResult => {
      const row = this.#fenceUp.get(resource, token) as { highest: bigint } | undefined
      if (row) return { accepted: true, highest: row.highest }
      return { accepted: false, highest: (this.#fenceGet.get(resource) as { highest: bigint }).highest }
    }
    const claimOp = (id: string, req: ClaimRequest, now: number): ClaimResult => {
      const { result, write } = decideClaim(get(id), req, now)
      if (write) this.#recPut.run(toRow(id, write))
      return result
    }
    this.#admitOp = (fence: FenceRequest, id: string, req: ClaimRequest, now: number): AdmitResult => {
      const result = fenceOp(fence.resource, fence.token)
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
        try { p.result = { ok: true, value: p.run() } } catch (error) { p.result = { ok: false, error } }
      }
    }).immediate
    this.#pingTx = db.transaction(() => {}).immediate
    if (reapIntervalMs > 0) {
      this.#reaper = setInterval(() => { try { this.reap(Date.now()) } catch { /* next round */ } }, reapIntervalMs)
      this.#reaper.unref()
    }
  }

  #run<T>(op: string, fn: () => T): Promise<T> {
    try {
      return Promise.resolve(fn())
    } catch (e) {
      return Promise.reject(new StoreError(`sqlite ${op}: ${(e as Error).message}`, op, { cause: e }))
    }
  }

  /** Queues a write for the next group commit (see the file's header). */
  #write<T>(op: string, run: () => T): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      this.#pending.push({ op, run, resolve: resolve as (v: unknown) => void, reject })
      if (!this.#flushing) {
        this.#flushing = true
        setImmediate(() => this.#flush())
      }
    })
  }

  #flush(): void {
    this.#flushing = false
    const batch = this.#pending
    this.#pending = []
    try {
      this.#batchTx(batch)
    } catch (e) {
      // the commit (or BEGIN) failed: nothing of the batch is durable, so nothing is acknowledged
      for (const p of batch) p.reject(new StoreError(`sqlite ${p.op}: ${(e as Error).message}`, p.op, { cause: e }))
      return
    }
    for (const p of batch) {
      const r = p.result!
      if (r.ok) p.resolve(r.value)
      else p.reject(new StoreError(`sqlite ${p.op}: ${(r.error as Error).message}`, p.op, { cause: r.error }))
    }
  }

  fence(resource: string, token: bigint): Promise<FenceResult> {
    return this.#write('fence', () => this.#fenceOp(resource, token))
  }

  /** fence and claim as one operation of the group commit: nothing else runs between them */
  admit(fence: FenceRequest, key: RecordKey, req: ClaimRequest, now: number): Promise<AdmitResult> {
    return this.#write('admit', () => this.#admitOp(fence, recordId(key), req, now))
  }

  highest(resource: string): Promise<bigint | undefined> {
    return this.#run('highest', () => (this.#fenceGet.get(resource) as { highest: bigint } | undefined)?.highest)
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

  /** Deletes up to 1000 expired records; returns how many. */
  reap(now: number): number {
    return this.#reap.run(now).changes
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
    return this.#run('accept_loss', () => {
      const epoch = (this.#metaGet.get('epoch') as string | undefined) ?? randomUUID()
      this.#metaPut.run('epoch', epoch)
      this.#metaPut.run('accepted', epoch)
      return epoch
    })
  }

  /** Takes and gives back the write lock: a read alone would pass while writers are locked out. */
  ping(): Promise<void> {
    return this.#run('ping', () => this.#pingTx())
  }

  async close(): Promise<void> {
    if (this.#reaper) clearInterval(this.#reaper)
    if (this.#pending.length) this.#flush()
    if (this.#db.open) this.#db.close()
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
    query: (since, until, route) => run('audit_query', (): AuditCounts[] =>
      countsFromRows(query.all({ p1: since, p2: until, p3: route ?? null }) as Record<string, unknown>[])),
  }
}
