/**
 * SQLite store (better-sqlite3, WAL). The default: durable across restarts and kill -9, and
 * safe for several gateway processes on one host sharing the file (every check-and-set runs in
 * a `BEGIN IMMEDIATE` transaction, which takes SQLite's write lock before reading).
 * `synchronous = NORMAL` in WAL mode survives a process crash; a power loss can lose the last
 * commits, so set `store.synchronous: full` where the host may lose power.
 */
import { mkdirSync } from 'node:fs'
import { dirname } from 'node:path'
import { randomUUID } from 'node:crypto'
import Database, { type Database as Db, type Statement } from 'better-sqlite3'
import { decideClaim, decideFinish, mayRelease, type IdemRecord } from './records.js'
import { recordId } from './memory.js'
import { StoreError, type ClaimRequest, type ClaimResult, type Completion, type FenceResult, type RecordKey, type Store } from './types.js'

export interface SqliteStoreOptions {
  /** database file; its folder is created when missing */
  path: string
  /** how long to wait for another process's write lock, ms; default 1000 */
  busyTimeoutMs?: number
  /** `normal` (default) survives a process crash, `full` also a power loss */
  synchronous?: 'normal' | 'full'
  /** how often expired records are deleted, ms; default 60000 (0 turns the reaper off) */
  reapIntervalMs?: number
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
  readonly #db: Db
  readonly #fenceUp: Statement
  readonly #fenceGet: Statement
  readonly #recGet: Statement
  readonly #recPut: Statement
  readonly #recDel: Statement
  readonly #reap: Statement
  readonly #fenceTx: (resource: string, token: bigint) => FenceResult
  readonly #claimTx: (id: string, req: ClaimRequest, now: number) => ClaimResult
  readonly #finishTx: (id: string, claimId: string, done: Completion, ttlMs: number, now: number) => void
  readonly #releaseTx: (id: string, claimId: string) => void
  readonly #reaper?: NodeJS.Timeout
  readonly #pingTx: () => void

  /** @throws StoreError when the file cannot be opened or initialised */
  constructor(options: SqliteStoreOptions) {
    const { path, busyTimeoutMs = 1000, synchronous = 'normal', reapIntervalMs = 60_000 } = options
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
    } catch (e) {
      throw new StoreError(`cannot open SQLite store at ${path}: ${(e as Error).message}`, 'open', { cause: e })
    }
    const db = this.#db
    // RETURNING yields no row when the WHERE refuses the update: the token was stale.
    this.#fenceUp = db.prepare(`INSERT INTO fg_fences_v1 (resource, highest) VALUES (?, ?)
      ON CONFLICT (resource) DO UPDATE SET highest = excluded.highest WHERE excluded.highest >= fg_fences_v1.highest
      RETURNING highest`).safeIntegers(true)
    this.#fenceGet = db.prepare('SELECT highest FROM fg_fences_v1 WHERE resource = ?').safeIntegers(true)
    this.#recGet = db.prepare('SELECT * FROM fg_records_v1 WHERE id = ?')
    this.#recPut = db.prepare(`INSERT OR REPLACE INTO fg_records_v1 (id, state, fingerprint, claim_id, lease_until, expires_at, status, headers, body, reason)
      VALUES (@id, @state, @fingerprint, @claim_id, @lease_until, @expires_at, @status, @headers, @body, @reason)`)
    this.#recDel = db.prepare('DELETE FROM fg_records_v1 WHERE id = ?')
    this.#reap = db.prepare('DELETE FROM fg_records_v1 WHERE id IN (SELECT id FROM fg_records_v1 WHERE expires_at <= ? LIMIT 1000)')

    const get = (id: string) => toRecord(this.#recGet.get(id) as RecordRow | undefined)
    const fenceTx = db.transaction((resource: string, token: bigint): FenceResult => {
      const row = this.#fenceUp.get(resource, token) as { highest: bigint } | undefined
      if (row) return { accepted: true, highest: row.highest }
      return { accepted: false, highest: (this.#fenceGet.get(resource) as { highest: bigint }).highest }
    })
    const claimTx = db.transaction((id: string, req: ClaimRequest, now: number): ClaimResult => {
      const { result, write } = decideClaim(get(id), req, now)
      if (write) this.#recPut.run(toRow(id, write))
      return result
    })
    const finishTx = db.transaction((id: string, claimId: string, done: Completion, ttlMs: number, now: number) => {
      const next = decideFinish(get(id), claimId, done, ttlMs, now)
      if (next) this.#recPut.run(toRow(id, next))
    })
    const releaseTx = db.transaction((id: string, claimId: string) => {
      if (mayRelease(get(id), claimId)) this.#recDel.run(id)
    })
    // BEGIN IMMEDIATE: take the write lock before reading, so two processes cannot both read
    // the old state and then both write (and no deadlock upgrading a read lock).
    this.#fenceTx = fenceTx.immediate
    this.#claimTx = claimTx.immediate
    this.#finishTx = finishTx.immediate
    this.#releaseTx = releaseTx.immediate
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

  fence(resource: string, token: bigint): Promise<FenceResult> {
    return this.#run('fence', () => this.#fenceTx(resource, token))
  }

  highest(resource: string): Promise<bigint | undefined> {
    return this.#run('highest', () => (this.#fenceGet.get(resource) as { highest: bigint } | undefined)?.highest)
  }

  claim(key: RecordKey, req: ClaimRequest, now: number): Promise<ClaimResult> {
    return this.#run('claim', () => this.#claimTx(recordId(key), req, now))
  }

  finish(key: RecordKey, claimId: string, done: Completion, ttlMs: number, now: number): Promise<void> {
    return this.#run('finish', () => this.#finishTx(recordId(key), claimId, done, ttlMs, now))
  }

  release(key: RecordKey, claimId: string): Promise<void> {
    return this.#run('release', () => this.#releaseTx(recordId(key), claimId))
  }

  /** Deletes up to 1000 expired records; returns how many. */
  reap(now: number): number {
    return this.#reap.run(now).changes
  }

  /** Takes and gives back the write lock: a read alone would pass while writers are locked out. */
  ping(): Promise<void> {
    return this.#run('ping', () => this.#pingTx())
  }

  async close(): Promise<void> {
    if (this.#reaper) clearInterval(this.#reaper)
    if (this.#db.open) this.#db.close()
  }
}
