/**
 * SQLite store (better-sqlite3, WAL). The default: durable across restarts and kill -9, and
 * safe for several gateway processes on one host sharing the file (every check-and-set runs in
 * a `BEGIN IMMEDIATE` transaction, which takes SQLite's write lock before reading).
 * `synchronous = FULL` (the default) fsyncs the WAL at every commit, so what was answered survives
 * a power loss too; `NORMAL` survives a process crash only (store.acceptRisks must name it).
 *
 * Group commit: the request-path writes (fence, admit, claim, finish, renew, release, register,
 * unregister) asked for within one turn of the event loop run in one transaction, in the order
 * they were asked; their promises settle only after the COMMIT, so nothing is acknowledged before
 * it is durable. Each check-and-set stays atomic (the batch holds the write lock from its first
 * read to its commit). The attempt log is written in transactions of its own, between group
 * commits, never making a request wait (./attempt-log.ts).
 *
 * Another process's lock (another gateway, `fencegate audit`/`resolve`, a `sqlite3` shell):
 * better-sqlite3 is synchronous, so SQLite's own busy_timeout would wait on the event-loop
 * thread and stall every request of the process. Once the file is initialised the connection
 * runs with busy_timeout 0: a locked database answers SQLITE_BUSY at once, the batch is rolled
 * back and put back at the head of the queue (later calls never overtake it), and it is tried
 * again after a short pause (1 ms doubling to 20 ms) while the event loop serves everything
 * else. Each call fails with StoreError once `busyTimeoutMs` has passed since it was made.
 * Reads and the calls outside the group commit (resolve, acceptLoss, ping) retry the same way.
 *
 * The SQL text is in ./sql.ts, what each call does inside its transaction in ./operations.ts,
 * opening the file in ./file.ts, the group commit in ./group-commit.ts, the state markers and
 * the write sequence in ./markers.ts.
 */
import type { Database as Db } from 'better-sqlite3'
import { recordId } from '../shared/record-state.js'
import { storeCall } from '../shared/call.js'
import type { AdmitResult, FenceMark, FenceRequest, StateMarkers, ClaimRequest, ClaimResult, Completion, FenceResult, OlderWrites, ProbeTake, RecordKey, Registration, ReleaseResult, Resolution, ResolveResult, Settlement, SettleResult, Store, UnknownRecord } from '../contract/store.js'
import { busyWhy, retryWhileBusy } from './busy.js'
import { openFile } from './file.js'
import { GroupCommit } from './group-commit.js'
import { SqliteLeases } from './leases.js'
import type { Lease, LeaseChange, LeaseGrant } from '../contract/leases.js'
import { DiskWatch } from './disk.js'
import { Operations } from './operations.js'
import { SqliteAttemptLog } from './attempt-log.js'
import { WriteSequence } from '../state-loss/sequence.js'
import type { LossNote } from '../state-loss/note.js'
import type { AuditLog } from '../attempt-log/types.js'
import { Meta } from './markers.js'
import type { SqliteStoreOptions } from './options.js'

export type { SqliteStoreOptions } from './options.js'

export class SqliteStore implements Store {
  readonly kind = 'sqlite' as const
  /** false: a call may wait (on timers) for another process's lock, so guardStore races it */
  readonly inProcess = false
  /** this process's write sequence (../state-loss/sequence.ts): `seq` in fg_meta_v1, advanced by every write transaction */
  readonly sequence: WriteSequence
  /** set when the file was first initialised; a different value later means the file was replaced */
  readonly epoch: string
  readonly #path: string
  /** the file's inode when opened: another one at the path means the file was replaced */
  readonly #inode: number
  readonly #db: Db
  readonly #ops: Operations
  readonly #meta: Meta
  readonly #commits: GroupCommit
  readonly #pingTx: () => void
  readonly #resolveTx: (id: string, as: Resolution, ttlMs: number, now: number) => ResolveResult
  /** how long a call may wait for another process's lock, ms */
  readonly #busyTimeoutMs: number
  readonly #reaper?: NodeJS.Timeout
  #closed = false
  /** the attempt log: the fg_audit_v1 table, written in transactions of its own */
  readonly audit: AuditLog
  readonly #log: SqliteAttemptLog

  /** @throws StoreError when the file cannot be opened or initialised */
  constructor(options: SqliteStoreOptions) {
    const { path, busyTimeoutMs = 1000, synchronous = 'full', reapIntervalMs = 60_000, auditRetentionMs = 7 * 86_400_000 } = options
    if (typeof path !== 'string' || !path) throw new TypeError('options.path must be a non-empty string')
    if (!Number.isInteger(busyTimeoutMs) || busyTimeoutMs < 0) throw new TypeError('options.busyTimeoutMs must be a non-negative integer')
    this.#busyTimeoutMs = busyTimeoutMs
    this.sequence = options.sequence ?? new WriteSequence()
    const { db, epoch, inode } = openFile(path, busyTimeoutMs, synchronous)
    this.#db = db
    this.epoch = epoch
    this.#path = path
    this.#inode = inode
    this.#ops = new Operations(db)
    this.#leases = new SqliteLeases(db, this.#ops)
    this.#meta = new Meta(db, this.sequence)
    this.#commits = new GroupCommit(db, busyTimeoutMs, {
      begin: () => this.#advance('write'),
      committed: () => this.sequence.saw(this.#advanced),
      settled: () => this.#log.kick(),
      rollback: () => this.#rollback(),
      check: () => this.#meta.check('write'),
      refusal: (op, e) => this.disk.refusal(op, e),
    })
    this.#pingTx = db.transaction(() => {}).immediate
    this.#resolveTx = db.transaction((id: string, as: Resolution, ttlMs: number, now: number) => {
      this.#advance('resolve')
      return this.#ops.resolve(id, as, ttlMs, now)
    }).immediate
    this.audit = this.#log = new SqliteAttemptLog({
      db,
      busyTimeoutMs,
      retentionMs: auditRetentionMs,
      closed: () => this.#closed,
      writesWaiting: () => this.#commits.waiting,
      read: (op, fn) => this.#run(op, fn),
      rollback: () => this.#rollback(),
      refusal: (op, e) => this.disk.refusal(op, e),
    })
    if (reapIntervalMs > 0) {
      this.#reaper = setInterval(() => { try { this.reap(Date.now()) } catch { /* next round */ } }, reapIntervalMs)
      this.#reaper.unref()
    }
  }

  /**
   * Runs `fn` (a read, or a write in its own transaction) now; while another process holds the
   * lock, again after a pause, until `busyTimeoutMs` since the call has passed.
   * @throws StoreError when closed, when the time ran out, or what `fn` threw, wrapped
   */
  #run<T>(op: string, fn: () => T): Promise<T> {
    const queued = performance.now()
    return storeCall('sqlite', op, this.#closed, () => retryWhileBusy(fn, this.#busyTimeoutMs, () => this.#rollback(), queued), (e) => busyWhy(e, queued))
  }

  /**
   * Queues a request-path write for the next group commit (see the file's header).
   * @throws StoreError when closed, when its time ran out, or what `run` threw, wrapped
   */
  #write<T>(op: string, run: () => T): Promise<T> {
    const queued = performance.now()
    return storeCall('sqlite', op, this.#closed, () => this.#commits.add(run, queued, op), (e) => busyWhy(e, queued))
  }

  /** the disk's last refusal of a write (./disk.ts), for /readyz and `fencegate doctor` */
  readonly disk = new DiskWatch()

  /** the sequence the last transaction wrote; read after its COMMIT */
  #advanced = 0n

  /**
   * Inside a write transaction, before its first change: refuses when the file's sequence is
   * below what this process saw (an older copy of the file put back in place), else advances it.
   * @throws StoreWentBack, which rolls the transaction back
   */
  #advance(op: string): void {
    this.#advanced = this.#meta.check(op) + 1n
    this.#meta.advanceTo(this.#advanced)
  }

  writeRefused() {
    return this.disk.recent()
  }

  /** Ends a transaction a failed statement left open (better-sqlite3 normally has rolled it back). */
  #rollback(): void {
    try {
      if (this.#db.open && this.#db.inTransaction) this.#db.exec('ROLLBACK')
    } catch { /* nothing left to undo */ }
  }

  fence(resource: string, token: bigint, now = Date.now()): Promise<FenceResult> {
    return this.#write('fence', () => this.#ops.fence(resource, token, now))
  }

  /**
   * Fence and claim as one operation of the group commit: nothing else runs between them. When
   * the claim step fails while the file still answers, admit rejects with StoreError, no claim is
   * held, and the fence's decision stands (a raised mark stays raised, as a lone `fence` would
   * have left it) — without failing the other calls of the batch (Operations.admit).
   */
  admit(fence: FenceRequest, key: RecordKey, req: ClaimRequest, now: number): Promise<AdmitResult> {
    return this.#write('admit', () => this.#ops.admit(fence, recordId(key), req, now))
  }

  highest(resource: string): Promise<bigint | undefined> {
    return this.#run('highest', () => this.#ops.highest(resource))
  }

  mark(resource: string): Promise<FenceMark | undefined> {
    return this.#run('mark', () => this.#ops.mark(resource))
  }

  claim(key: RecordKey, req: ClaimRequest, now: number): Promise<ClaimResult> {
    return this.#write('claim', () => this.#ops.claim(recordId(key), req, now))
  }

  finish(key: RecordKey, claimId: string, done: Completion, ttlMs: number, now: number): Promise<void> {
    return this.#write('finish', () => this.#ops.finish(recordId(key), claimId, done, ttlMs, now))
  }

  renew(key: RecordKey, claimId: string, leaseMs: number, now: number): Promise<boolean> {
    return this.#write('renew', () => this.#ops.renew(recordId(key), claimId, now + leaseMs))
  }

  release(key: RecordKey, claimId: string): Promise<ReleaseResult> {
    return this.#write('release', () => this.#ops.release(recordId(key), claimId))
  }

  readonly #leases: SqliteLeases
  acquireLease(resource: string, holder: string, ttlMs: number, now: number): Promise<LeaseGrant> { return this.#write('lease_acquire', () => this.#leases.acquire(resource, holder, ttlMs, now)) }
  renewLease(resource: string, token: bigint, now: number): Promise<LeaseChange> { return this.#write('lease_renew', () => this.#leases.renew(resource, token, now)) }
  releaseLease(resource: string, token: bigint): Promise<LeaseChange> { return this.#write('lease_release', () => this.#leases.release(resource, token)) }
  readLease(resource: string, now: number): Promise<Lease | undefined> { return this.#run('lease_read', () => this.#leases.read(resource, now)) }

  takeProbe(key: RecordKey, p: { seen: number; afterMs: number; nextInMs: number }, now: number): Promise<ProbeTake> {
    return this.#write('take_probe', () => this.#ops.takeProbe(recordId(key), p, now))
  }

  settle(key: RecordKey, probes: number, as: Settlement, ttlMs: number, now: number): Promise<SettleResult> {
    return this.#write('settle', () => this.#ops.settle(recordId(key), probes, as, ttlMs, now))
  }

  resolve(key: RecordKey, as: Resolution, ttlMs: number, now: number): Promise<ResolveResult> {
    return this.#run('resolve', () => {
      const out = this.#resolveTx(recordId(key), as, ttlMs, now)
      this.sequence.saw(this.#advanced)
      return out
    })
  }

  /** Writes the note and a new epoch, in one transaction: every process sharing the file sees the loss (../state-loss/watch.ts). */
  retireEpoch(note: LossNote): Promise<void> {
    return this.#run('retire_epoch', () => this.#meta.retire(note))
  }

  unknowns(now: number, options: { route?: string; limit?: number } = {}): Promise<UnknownRecord[]> {
    const { route, limit = 1000 } = options
    return this.#run('unknowns', () => this.#ops.unknowns(now, route, limit))
  }

  unknownRecord(key: RecordKey, now: number): Promise<UnknownRecord | undefined> {
    return this.#run('unknown_record', () => this.#ops.unknownRecord(recordId(key), key, now))
  }

  /** The connection's own journal_mode and synchronous (0 off, 1 normal, 2 full, 3 extra): what `fencegate doctor` reports. */
  settings(): { journalMode: string; synchronous: number } {
    return { journalMode: String(this.#db.pragma('journal_mode', { simple: true })), synchronous: Number(this.#db.pragma('synchronous', { simple: true })) }
  }

  /**
   * Deletes up to 1000 expired records and 1000 expired registrations; returns how many.
   * @throws what SQLite threw (SQLITE_BUSY while another process holds the lock)
   */
  reap(now: number): number {
    return this.#ops.reap(now)
  }

  markers(): Promise<StateMarkers> {
    return this.#run('markers', () => this.#meta.read(this.#path, this.#inode))
  }

  acceptLoss(): Promise<string> {
    // one transaction: retried whole while another process holds the lock
    return this.#run('accept_loss', () => this.#meta.acceptLoss())
  }

  /** Takes and gives back the write lock: a read alone would pass while writers are locked out. */
  ping(): Promise<void> {
    return this.#run('ping', () => this.#pingTx())
  }

  /**
   * One operation of the group commit, in its BEGIN IMMEDIATE transaction: the mark read and the
   * registration written hold SQLite's write lock together, so no fence of any process sharing the
   * file runs between them.
   */
  register(resource: string, token: bigint, id: string, deadline: number, now: number): Promise<Registration> {
    return this.#write('register', () => this.#ops.register(resource, token, id, deadline, now))
  }

  olderRegistered(resource: string, token: bigint, now: number): Promise<OlderWrites> {
    return this.#run('older_registered', () => this.#ops.olderRegistered(resource, token, now))
  }

  unregister(resource: string, id: string, until = 0): Promise<void> {
    return this.#write('unregister', () => this.#ops.unregister(resource, id, until))
  }

  /**
   * Calls made from now on reject with StoreError; what was asked before still commits (or
   * fails once its time is up), the attempt log's appends included, then the file is closed.
   */
  async close(): Promise<void> {
    this.#closed = true
    if (this.#reaper) clearInterval(this.#reaper)
    await this.#commits.drain()
    await this.#log.drain()
    if (this.#db.open) this.#db.close()
  }
}
