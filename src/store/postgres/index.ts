/**
 * PostgreSQL store (pg), shared by every gateway replica that points at the same database.
 *
 * Tables carry the schema version in their names (like the SQLite store) and live in
 * `store.schema`; `fencegate migrate` creates them (./migrate.ts), and so does start-up unless
 * `store.migrate: false`. The SQL text — tables, plpgsql functions, statements — is in ./sql.ts.
 * The attempt log's table is read and written in ./attempt-log.ts; the state markers (the epoch,
 * accept-loss) and the timeline are read in ./markers.ts, and the operators' reads (a mark, the
 * unknown outcomes) in ./reads.ts, renew and resolve in ./records.ts; the registrations of
 * `fencing.serialize: store` in ./serialize.ts.
 * The request path's operations (fence, claim, admit, finish, release) are group-committed
 * (./batches.ts): the calls of one operation made in one event-loop turn, or while earlier
 * batches of it run, go as one call of a `*_many` function — one round trip and one transaction
 * for all of them — which applies each call as its single-call form would:
 * - fence: `INSERT … ON CONFLICT … DO UPDATE … WHERE highest < token RETURNING`, and when that
 *   returns no row (equal or stale token) a read of the mark, both in one plpgsql function so
 *   the second statement sees the row the first one compared against (or a later one);
 * - claim: a plpgsql function that inserts the record (`ON CONFLICT DO NOTHING`), or else locks
 *   the existing row (`SELECT … FOR UPDATE`) and applies the table of src/store/shared/record-state.ts;
 * - admit: the fence and, when it accepts, the claim, in one function;
 * - finish: one `UPDATE` guarded by claim_id and state = 'in_flight'; release: a plpgsql function
 *   that locks the row held by claim_id and applies decideRelease of src/store/shared/record-state.ts.
 * Tokens travel as decimal text and are stored as BIGINT: never a JS number.
 * A reaper deletes expired records in batches of 1000 (`FOR UPDATE SKIP LOCKED`, so replicas
 * reaping at once do not queue behind each other; ./reaping.ts).
 *
 * Failure: the pool never waits for a connection longer than `connectTimeoutMs`, statements are
 * cancelled by the server after `statementTimeoutMs`, and a connection the server ends (restart,
 * pg_terminate_backend, network) is dropped from the pool without crashing the process; the
 * calls that needed it reject with StoreError (503).
 */
import type pg from 'pg'
import { changeOf, grantOf, leaseBatches, leaseQueries, readLease, type LeaseCall } from './lease-functions.js'
import { StoreError, type Lease, type LeaseChange, type LeaseGrant, type AdmitResult, type FenceMark, type FenceRequest, type StateMarkers, type ClaimRequest, type ClaimResult, type Completion, type FenceResult, type RecordKey, type ReleaseResult, type ProbeTake, type Resolution, type Settlement, type SettleResult, type ResolveResult, type Store, type UnknownRecord } from '../contract/store.js'
import type { AuditLog } from '../attempt-log/types.js'
import { reapLog, tableLog } from './attempt-log.js'
import type { OlderWrites, Registration } from '../contract/store.js'
import { withSince } from '../contract/fences.js'
import { storeCall } from '../shared/call.js'
import { StoreClock } from '../shared/clock.js'
import { groupCommit, type GroupCommit } from './batches.js'
import { raisedByServer, registrationsMissing } from './errors.js'
import { migratePostgres, quoted, schemaMissing } from './migrate.js'
import { queries, type Named, type Queries } from './queries.js'
import { sequencedQuery, Timeline, type SequencedQuery } from './sequence.js'
import { WriteSequence } from '../state-loss/sequence.js'
import { StandbyWatch } from './standbys.js'
import { createPool, type PostgresStoreOptions } from './pool.js'
import { acceptLoss, readEpoch, readMarkers, readTimeline, retireEpoch } from './markers.js'
import type { LossNote } from '../state-loss/note.js'
import { readHighest, readMark, readUnknowns, readUnknownRecord } from './reads.js'
import { olderRegistered, register } from './serialize.js'
import { reapIn } from './reaping.js'
import { renew, resolve, settle, takeProbe } from './records.js'

export { migratePostgres }
export type { PostgresStoreOptions } from './pool.js'

export class PostgresStore implements Store {
  readonly kind = 'postgres' as const
  readonly #pool: pg.Pool
  /** the schema, quoted */
  readonly #schema: string
  /** the statements, for this store's schema */
  readonly #q: Queries
  readonly #batches: GroupCommit
  /** a write statement with the sequence around it (and, with store.replicas, refused while too few standbys are configured) */
  readonly #write: SequencedQuery
  /** store.replicas: the synchronous standbys configured (./standbys.ts) */
  readonly #standbys?: StandbyWatch
  readonly #reaper?: NodeJS.Timeout
  readonly #auditRetentionMs: number
  #closed = false
  /** the attempt log: the fg_audit_v1 table */
  readonly audit: AuditLog
  /** the value written when the schema was first created */
  epoch = ''
  /** this process's write sequence (./sequence.ts) */
  readonly sequence: WriteSequence
  /** the timeline followed (./sequence.ts) */
  readonly #timeline: Timeline
  /** the server's clock against this process's (../shared/clock.ts) */
  readonly clock: StoreClock

  /** Use `PostgresStore.open`, which also checks that the schema is there. */
  constructor(options: PostgresStoreOptions) {
    const { url, schema = 'public', pool = 10, statementTimeoutMs = 5000, connectTimeoutMs = 1000, reapIntervalMs = 60_000, auditRetentionMs = 7 * 86_400_000, clock = 'store' } = options
    this.#auditRetentionMs = auditRetentionMs
    if (typeof url !== 'string' || !/^postgres(ql)?:\/\//.test(url)) throw new TypeError('options.url must be a postgres:// or postgresql:// URL')
    if (!Number.isInteger(pool) || pool < 1) throw new TypeError('options.pool must be a positive integer')
    if (!Number.isInteger(statementTimeoutMs) || statementTimeoutMs < 1) throw new TypeError('options.statementTimeoutMs must be a positive integer')
    this.#schema = quoted(schema)
    this.#q = queries(this.#schema)
    this.#lq = leaseQueries(this.#schema)
    this.#pool = createPool({ url, pool, statementTimeoutMs, connectTimeoutMs, tls: options.tls }, () => {})
    this.sequence = options.sequence ?? new WriteSequence()
    this.#timeline = new Timeline((options.replicas ?? 0) === 0, this.sequence)
    const sequenced = sequencedQuery(this.#pool, quoted(schema), this.sequence, this.#timeline)
    const standbys = this.#standbys = (options.replicas ?? 0) > 0 ? new StandbyWatch(this.#pool, options.replicas ?? 0) : undefined
    this.#write = standbys ? (q, values) => { standbys.refuseIfShort(q.name); return sequenced(q, values) } : sequenced
    this.#batches = groupCommit(this.#pool, this.#q, this.#write)
    this.clock = new StoreClock(async () => Number((await this.#pool.query<{ ms: number }>(this.#q.clock)).rows[0].ms), clock === 'caller')
    this.audit = tableLog(this.#pool, this.#q, (op, fn) => this.#run(op, fn))
    if (reapIntervalMs > 0) {
      this.#reaper = setInterval(() => {
        // records and registrations by the server's clock; the attempt log's times are the gateways'
        this.reap(Date.now()).catch(() => { /* next round */ })
        this.reapAudit(Date.now()).catch(() => { /* next round */ })
        this.reapRegistrations(Date.now()).catch(() => { /* next round */ })
      }, reapIntervalMs)
      this.#reaper.unref()
    }
  }

  /**
   * Connects, runs the migration when `migrate` is true, and reads the epoch.
   * @throws StoreError when the database cannot be reached, or the schema is missing or made by an older fencegate
   */
  static async open(options: PostgresStoreOptions & { migrate?: boolean }): Promise<PostgresStore> {
    if (options.migrate) await migratePostgres(options)
    const store = new PostgresStore(options)
    const q = store.#q
    try {
      store.epoch = await readEpoch(store.#pool, q)
      store.#timeline.known ??= await readTimeline(store.#pool).catch(() => undefined)
      await store.#standbys?.start()
      const lacks = await schemaMissing(store.#pool, q, options.schema ?? 'public')
      if (lacks.length) {
        await store.close()
        throw new StoreError(`PostgreSQL schema ${options.schema ?? 'public'} was made by an older fencegate: run \`fencegate migrate --config PATH\` (or set store.migrate: true); it lacks ${lacks.join(', ')}`, 'open')
      }
      await store.clock.measure()
      store.clock.start()
    } catch (e) {
      if (e instanceof StoreError) throw e
      await store.close()
      const missing = (e as { code?: string }).code === '42P01'
      throw new StoreError(missing
        ? `PostgreSQL schema ${options.schema ?? 'public'} has no fencegate tables: run \`fencegate migrate --config PATH\` or set store.migrate: true`
        : `cannot reach PostgreSQL: ${(e as Error).message}`, 'open', { cause: e })
    }
    return store
  }

  /** Writes the loss note and a new epoch: every gateway sharing the store sees the loss (../state-loss/watch.ts). */
  retireEpoch(note: LossNote): Promise<void> {
    return this.#run('retire_epoch', () => retireEpoch(this.#pool, this.#q, note))
  }

  /** Also looks at the timeline: a new one without store.replicas is reported (StoreWentBack). */
  async markers(): Promise<StateMarkers> {
    return this.#run('markers', () => readMarkers(this.#pool, this.#q, this.#timeline))
  }

  async acceptLoss(): Promise<string> {
    return this.#run('accept_loss', () => acceptLoss(this.#pool, this.#q))
  }

  #run<T>(op: string, fn: () => Promise<T>): Promise<T> {
    return storeCall('postgres', op, this.#closed, fn)
  }

  /** `now` for a function: null (the server's clock), or the caller's with `clock: 'caller'`. */
  #now(now: number): number | null {
    return this.clock.now(now) ?? null
  }

  #localFence(f: FenceResult): FenceResult {
    return f.since === undefined ? f : withSince(f, this.clock.toLocal(f.since))
  }

  #localClaim(c: ClaimResult): ClaimResult {
    return c.kind === 'in_flight' ? { kind: 'in_flight', leaseUntil: this.clock.toLocal(c.leaseUntil) } : c
  }

  fence(resource: string, token: bigint, now = Date.now()): Promise<FenceResult> {
    return this.#run('fence', async () => this.#localFence(await this.#batches.fence({ resource, token, now: this.#now(now) })))
  }

  /**
   * `Store.admit`: one call of the admit batch, fence and claim in one transaction.
   * @throws StoreError when the store cannot answer. When the server raised an error while the
   *   store still answers, the fence's decision stands (the mark as a lone `fence` leaves it) and
   *   no claim is held; when it could not be reached or timed out, nothing is known to have changed.
   */
  admit(fence: FenceRequest, key: RecordKey, req: ClaimRequest, now: number): Promise<AdmitResult> {
    return this.#run('admit', () => this.#batches.admit({ fence, key, req, now: this.#now(now) }).then((r) => ({
      fence: this.#localFence(r.fence), ...(r.claim ? { claim: this.#localClaim(r.claim) } : {}),
    }), async (e: unknown) => {
      // The transaction rolled the fence back with the failed claim, but every store leaves the
      // fence's decision standing (../contract/store.ts `admit`): on a Redis Cluster the fence is on another
      // slot, and nothing may lower a mark (an older token could get in after a newer one was
      // forwarded). So the lone fence is made again, here and not in the SQL functions, which
      // gateways of the previous version still call during a rolling upgrade. Not when the store
      // could not answer (a timeout, a lost connection): what happened is unknown, and a second
      // statement would only wait as well.
      if (raisedByServer(e)) await this.#batches.fence({ ...fence, now: this.#now(now) }).catch(() => { /* the admit's error says it */ })
      throw e
    }))
  }

  highest(resource: string): Promise<bigint | undefined> { return this.#run('highest', () => readHighest(this.#pool, this.#q, resource)) }

  mark(resource: string): Promise<FenceMark | undefined> { return this.#run('mark', () => readMark(this.#pool, this.#q, this.clock, resource)) }

  claim(key: RecordKey, req: ClaimRequest, now: number): Promise<ClaimResult> { return this.#run('claim', async () => this.#localClaim(await this.#batches.claim({ key, req, now: this.#now(now) }))) }

  finish(key: RecordKey, claimId: string, done: Completion, ttlMs: number, now: number): Promise<void> { return this.#run('finish', async () => { await this.#batches.settle({ key, claimId, done, ttlMs, now: this.#now(now) }) }) }

  release(key: RecordKey, claimId: string): Promise<ReleaseResult> {
    return this.#run('release', async () => (await this.#batches.settle({ key, claimId, now: null }))!)
  }

  /** One guarded UPDATE, outside the group commit: renewals are rare (a quarter lease apart). */
  renew(key: RecordKey, claimId: string, leaseMs: number, now: number): Promise<boolean> {
    return this.#run('renew', () => renew(this.#pool, this.#q, key, claimId, leaseMs, this.#now(now)))
  }

  readonly #lq: ReturnType<typeof leaseQueries>
  #leases?: (call: LeaseCall) => ReturnType<ReturnType<typeof leaseBatches>>
  #lease(call: LeaseCall) { return (this.#leases ??= leaseBatches(this.#pool, this.#lq, this.#write))(call) }
  acquireLease(resource: string, holder: string, ttlMs: number, now: number): Promise<LeaseGrant> { return this.#run('lease_acquire', async () => grantOf(this.clock, resource, await this.#lease({ op: 'acquire', resource, holder, ttlMs, now: this.#now(now) }))) }
  renewLease(resource: string, token: bigint, now: number): Promise<LeaseChange> { return this.#run('lease_renew', async () => changeOf(this.clock, resource, await this.#lease({ op: 'renew', resource, token, now: this.#now(now) }))) }
  releaseLease(resource: string, token: bigint, now: number): Promise<LeaseChange> { return this.#run('lease_release', async () => changeOf(this.clock, resource, await this.#lease({ op: 'release', resource, token, now: this.#now(now) }))) }
  readLease(resource: string, now: number): Promise<Lease | undefined> { return this.#run('lease_read', () => readLease(this.#pool, this.#lq, this.clock, resource, this.#now(now))) }

  takeProbe(key: RecordKey, p: { seen: number; afterMs: number; nextInMs: number }, now: number): Promise<ProbeTake> { return this.#run('take_probe', () => takeProbe(this.#write, this.#q, key, p, this.#now(now))) }
  settle(key: RecordKey, probes: number, as: Settlement, ttlMs: number, now: number): Promise<SettleResult> { return this.#run('settle', () => settle(this.#write, this.#q, key, probes, as, ttlMs, this.#now(now))) }

  resolve(key: RecordKey, as: Resolution, ttlMs: number, now: number): Promise<ResolveResult> { return this.#run('resolve', () => resolve(this.#write, this.#q, key, as, ttlMs, this.#now(now))) }

  unknowns(now: number, options: { route?: string; limit?: number } = {}): Promise<UnknownRecord[]> {
    const { route, limit = 1000 } = options
    return this.#run('unknowns', () => readUnknowns(this.#pool, this.#q, this.#now(now), route, limit))
  }

  unknownRecord(key: RecordKey, now: number): Promise<UnknownRecord | undefined> {
    return this.#run('unknown_record', () => readUnknownRecord(this.#pool, this.#q, this.#now(now), key))
  }

  /** Deletes attempt log entries older than the retention; returns how many. */
  reapAudit(now: number): Promise<number> {
    return reapLog(this.#pool, this.#q, now - this.#auditRetentionMs)
  }

  /**
   * Deletes expired records, `batch` at a time, at most `maxBatches` batches; returns how many.
   * Rows another transaction holds are skipped, not waited for. Expired by the server's clock
   * (`now` counts only with `clock: 'caller'`).
   */
  reap(now: number, batch = 1000, maxBatches = 10): Promise<number> {
    return this.#reapIn(this.#q.reap, now, batch, maxBatches)
  }

  #reapIn(query: Named, now: number, batch: number, maxBatches: number): Promise<number> {
    return reapIn(this.#pool, query, this.#now(now), batch, maxBatches, () => this.#closed)
  }

  // ------------------------------------------------- fencing.serialize: store (registrations)

  /** See `Store.register` and registrationsSchemaSql (./sql.ts). Group-committed like the fences. */
  register(resource: string, token: bigint, id: string, deadline: number, now: number): Promise<Registration> {
    return this.#run('register', () => register(this.#batches, this.clock, { resource, token, id, holdMs: deadline - now, now: this.#now(now) }))
  }

  olderRegistered(resource: string, token: bigint, now: number): Promise<OlderWrites> {
    return this.#run('older_registered', () => olderRegistered(this.#pool, this.#q, this.clock, resource, token, this.#now(now)))
  }

  unregister(resource: string, id: string, until = 0): Promise<void> {
    const now = Date.now()
    return this.#run('unregister', () => this.#batches.unregister({ resource, id, holdMs: until > 0 ? Math.floor(until - now) : null, now: this.#now(now) })
      .catch((e) => { throw registrationsMissing(e) }))
  }

  /** Deletes expired registrations (a crashed replica's), `batch` at a time, skipping rows another transaction holds. */
  reapRegistrations(now: number, batch = 1000, maxBatches = 10): Promise<number> {
    return this.#reapIn(this.#q.registrationsReap, now, batch, maxBatches)
  }

  /** A round trip that also proves the tables are there. */
  ping(): Promise<void> {
    return this.#run('ping', async () => {
      await this.#pool.query(this.#q.ping)
    })
  }

  async close(): Promise<void> {
    if (this.#closed) return
    this.#closed = true
    this.clock.stop()
    if (this.#reaper) clearInterval(this.#reaper)
    this.#standbys?.stop()
    await this.#pool.end().catch(() => {})
  }
}
