/**
 * Redis store (ioredis), shared by every gateway replica that points at the same Redis: one
 * server (with or without replicas), or a Redis Cluster (`cluster: true`, `url` lists seed nodes).
 *
 * The parts, each in a file of its own beside this one:
 *   ./lua.ts          the Lua scripts (every read-then-write is one, so Redis runs it atomically)
 *   ./scripts.ts      their names, SHAs and key counts, the write sequence around each write
 *   ./replies.ts      how their answers map onto the `Store` results (../shared/replies.ts)
 *   ./keys.ts         the key layout (every key its own hash tag) and the cluster slot of a key
 *   ./connection.ts   the ioredis client, what it retries, and a script sent to a slot's master;
 *                     the servers' TIME and PING
 *   ./replicas.ts     `replicas: N`: WAIT after the writes a request relies on; ReplicaShortfall
 *   ./attempt-log.ts  the attempt log in streams
 *   ./markers.ts      the state markers: the epoch (and its copies on a cluster), accept-loss
 *   ./unknowns.ts     the records in the unknown state: the index of unsettled records (one
 *                     server), or a SCAN of every master (cluster)
 *   ./options.ts      what the store is opened with
 *   ./admission.ts    fence, claim and admit (and a claim the replicas lack given back)
 *   ./records.ts      finish, renew, release and resolve of a claimed record
 *   ./serialize.ts    the registrations of `fencing.serialize: store`
 * and here the `Store` operations, which put those together.
 */
import { storeCall } from '../shared/call.js'
import { StoreError, type Lease, type LeaseChange, type LeaseGrant, type AdmitResult, type ClaimRequest, type ClaimResult, type Completion, type FenceMark, type FenceRequest, type FenceResult, type OlderWrites, type RecordKey, type Registration, type ReleaseResult, type ProbeTake, type Resolution, type Settlement, type SettleResult, type ResolveResult, type StateMarkers, type Store, type UnknownRecord } from '../contract/store.js'
import type { AuditLog } from '../attempt-log/types.js'
import { streamLog } from './attempt-log.js'
import { StoreClock } from '../shared/clock.js'
import { createClient, ping, serverTime, timeOf, type Conn } from './connection.js'
import { KeyNames } from './keys.js'
import { Writer } from './replicas.js'
import { WriteSequence } from '../state-loss/sequence.js'
import { ReplicationHistory, replicationIds } from './history.js'
import { ClusterHistory, settleHoldMs, shortfalls } from './cluster-history.js'
import type { Cluster } from 'ioredis'
import { acceptLoss, initEpoch, readMarkers, retireEpoch } from './markers.js'
import type { LossNote } from '../state-loss/note.js'
import { unknownRecord, unknownRecords, type NowOf } from './unknowns.js'
import type { RedisStoreOptions } from './options.js'
import { admit, claim, fence, type Admission } from './admission.js'
import { finish, release, renew, resolve, settle, takeProbe } from './records.js'
import { olderRegistered, register, unregister } from './serialize.js'
import { acquireLease, changeLease, readLease } from './leases.js'

export { AUDIT_STREAMS, MARKERS, SLOTS, keySlot } from './keys.js'
export { ReplicaShortfall } from './replicas.js'
export { commandTimeoutFor, type RedisStoreOptions } from './options.js'

export class RedisStore implements Store {
  readonly kind = 'redis' as const
  /** true when speaking to a Redis Cluster */
  readonly cluster: boolean
  readonly #redis: Conn
  readonly #keys: KeyNames
  readonly #writer: Writer
  #lastError: Error | undefined
  #closed = false
  /** the attempt log: a stream under {fg:<prefix>:audit}, or 16 on a cluster */
  readonly audit: AuditLog
  /** the value written when this key prefix was first used (see `open`) */
  epoch = ''
  /** this process's write sequence (../state-loss/sequence.ts); on a cluster one per slot (./cluster-history.ts), whose losses and reset go through it */
  readonly sequence: WriteSequence
  /** cluster: the masters followed and the slots' sequences (./cluster-history.ts) */
  readonly #masters?: ClusterHistory
  /** one server: the primary followed (./history.ts) */
  readonly #history: ReplicationHistory
  /** the check after a reconnection, which every call waits for */
  #verifying?: Promise<void>
  /** the server's clock against this process's (../shared/clock.ts); on a cluster, the master furthest off */
  readonly clock: StoreClock
  /** what ./admission.ts and ./serialize.ts run with */
  readonly #ops: Admission

  /**
   * Use `RedisStore.open`, which also waits for the first connection.
   * @throws TypeError on an invalid option
   */
  constructor(options: RedisStoreOptions) {
    const {
      url, cluster = false, keyPrefix = 'fencegate', connectTimeoutMs = 1000, maxBackoffMs = 2000, auditRetentionMs = 7 * 86_400_000,
      replicas = 0, replicasTimeoutMs = 250, commandTimeoutMs = 2000, clock = 'store',
    } = options
    // with Sentinels the url only carries credentials, TLS and the database: it may be left out
    const urls = typeof url === 'string' ? url.split(',').map((u) => u.trim()).filter(Boolean) : options.sentinels ? ['redis://sentinel'] : []
    if (!urls.length || !urls.every((u) => /^rediss?:\/\//.test(u))) throw new TypeError('options.url must be a redis:// or rediss:// URL (several, comma-separated, for a cluster)')
    if (urls.length > 1 && !cluster) throw new TypeError('options.url names several nodes: set options.cluster for a Redis Cluster')
    if (typeof keyPrefix !== 'string' || !keyPrefix) throw new TypeError('options.keyPrefix must be a non-empty string')
    if (!Number.isInteger(replicas) || replicas < 0) throw new TypeError('options.replicas must be an integer ≥ 0')
    this.cluster = cluster
    this.#keys = new KeyNames(keyPrefix, cluster)
    const sentinels = options.sentinels?.map((a) => { const i = a.lastIndexOf(':'); return { host: a.slice(0, i), port: Number(a.slice(i + 1)) } })
    if (sentinels && (cluster || !options.sentinelName)) throw new TypeError('options.sentinels needs options.sentinelName, and no cluster')
    this.#redis = createClient({ urls, cluster, connectTimeoutMs, maxBackoffMs, commandTimeoutMs, sentinels, sentinelName: options.sentinelName, tls: options.tls })
    const sequence = this.sequence = options.sequence ?? new WriteSequence()
    if (cluster) {
      const keys = this.#keys
      this.#masters = new ClusterHistory(this.#redis as Cluster, { failoverIsLoss: replicas === 0, settleMs: settleHoldMs(commandTimeoutMs), lookMs: commandTimeoutMs, sequence, seqKey: (slot) => keys.slotSeq(slot), noteKey: keys.lossNote })
    }
    this.#writer = new Writer(this.#redis, {
      cluster, replicas, replicasTimeoutMs: Math.max(1, Math.round(replicasTimeoutMs)), commandTimeoutMs,
      sequence: cluster ? undefined : { keys: [this.#keys.seq, this.#keys.unsettled!.writes], seen: sequence },
      slots: this.#masters,
    })
    this.#history = new ReplicationHistory(replicas === 0, sequence)
    // Without a listener ioredis prints every connection error; remember the last for ping().
    this.#redis.on('error', (e: Error) => { this.#lastError = e })
    this.#redis.on('node error', (e: Error) => { this.#lastError = e })
    this.#redis.on('ready', () => {
      this.#lastError = undefined
      // reconnected (a failover, followed through Sentinel or by a restart): before anything else
      // runs, make sure this is the primary the gateway knew, or one that may lack nothing
      if (!cluster && this.epoch && !this.#verifying) {
        const verifying = this.#checkHistory('reconnect').finally(() => { this.#verifying = undefined })
        // a loss found here is heard through the sequence's listeners (../state-loss/watch.ts) and fails
        // the next call that waits for this check; with no call waiting it must not surface as an
        // unhandled rejection (which ends a Node process)
        verifying.catch(() => {})
        this.#verifying = verifying
      }
    })
    this.clock = new StoreClock(() => serverTime(this.#redis, cluster), clock === 'caller')
    this.#ops = { redis: this.#redis, keys: this.#keys, writer: this.#writer, replicas, cluster, clock: this.clock }
    this.audit = streamLog(this.#redis, this.#keys.audit, auditRetentionMs, (op, fn) => this.#run(op, fn))
  }

  /**
   * Connects and records the prefix's epoch (on a cluster also its copies in every block of
   * slots, when the prefix is new).
   * @throws StoreError when Redis cannot be reached
   */
  static async open(options: RedisStoreOptions): Promise<RedisStore> {
    const store = new RedisStore(options)
    const r = store.#redis
    try {
      if (store.cluster) {
        // a cluster client retries its first connection in the background: bound the wait
        const limit = Math.max(options.connectTimeoutMs ?? 1000, 1000) * 3
        let timer: NodeJS.Timeout | undefined
        await Promise.race([
          r.connect(),
          new Promise((_, reject) => { timer = setTimeout(() => reject(new Error(`cluster not ready within ${limit} ms${store.#lastError ? ` (${store.#lastError.message})` : ''}`)), limit) }),
        ]).finally(() => clearTimeout(timer))
      } else {
        await r.connect()
        // a cluster node spoken to as one server would answer MOVED for most keys
        const info = await r.info('cluster').catch(() => '')
        if (/^cluster_enabled:1/m.test(info)) throw new Error('it is a Redis Cluster node: set store.cluster: true (and list seed nodes in store.url)')
        store.#history.observe(await replicationIds(r).catch(() => undefined), 'open')
      }
      if (store.cluster) store.#keys.buildSlotSeqs()
      // the masters as they are now: what a later failover is told apart from
      await store.#masters?.look('open').catch(() => { /* an unreadable master: the first poll looks again */ })
      store.epoch = await initEpoch(r, store.#keys, store.cluster)
      await store.clock.measure()
      store.clock.start()
    } catch (e) {
      r.disconnect()
      const last = store.#lastError && store.#lastError.message !== (e as Error).message ? ` (last error: ${store.#lastError.message})` : ''
      throw new StoreError(`cannot connect to Redis${store.cluster ? ' Cluster' : ''}: ${(e as Error).message}${last}`, 'open', { cause: e })
    }
    return store
  }

  /** The state markers (./markers.ts); one server: after checking the primary followed (./history.ts). */
  async markers(): Promise<StateMarkers> {
    return this.#run('markers', async () => {
      if (!this.cluster) await this.#checkHistory('markers')
      else await this.#masters!.look('markers')
      return readMarkers(this.#redis, this.#keys, this.cluster)
    })
  }

  /** See ./markers.ts. */
  async acceptLoss(): Promise<string> { return this.#run('accept_loss', () => acceptLoss(this.#redis, this.#keys, this.cluster)) }

  /** One server: the replication ids now, against the primary known (./history.ts). @throws StoreWentBack */
  async #checkHistory(op: string): Promise<void> {
    this.#history.observe(await replicationIds(this.#redis), op)
  }

  /**
   * Writes the loss note and a new epoch (./markers.ts). Not behind the check after a
   * reconnection: that check is what found the loss, and its rejection would stop the note.
   */
  retireEpoch(note: LossNote): Promise<void> {
    return storeCall('redis', 'retire_epoch', this.#closed, () => retireEpoch(this.#redis, this.#keys, note),
      () => (this.#redis.status === 'ready' ? undefined : `not connected (${this.#lastError?.message ?? this.#redis.status})`))
  }

  /**
   * Refuses after `close`; waits for the check after a reconnection; wraps what Redis threw as
   * StoreError, "not connected (…)" while the client is not ready.
   */
  #run<T>(op: string, fn: () => Promise<T>): Promise<T> {
    const verifying = this.#verifying
    const run = verifying ? () => verifying.then(fn) : fn
    return storeCall('redis', op, this.#closed, run,
      () => (this.#redis.status === 'ready' ? undefined : `not connected (${this.#lastError?.message ?? this.#redis.status})`))
  }

  // -------------------------------------------------------------- fencing

  fence(resource: string, token: bigint, now = Date.now()): Promise<FenceResult> { return this.#run('fence', () => fence(this.#ops, resource, token, now)) }

  highest(resource: string): Promise<bigint | undefined> {
    return this.#run('highest', async () => {
      const v = await this.#redis.get(this.#keys.mark(resource))
      return v === null ? undefined : BigInt(v)
    })
  }

  /** One MGET (both keys in one slot); a since written for another mark is not this mark's. */
  mark(resource: string): Promise<FenceMark | undefined> {
    return this.#run('mark', async () => {
      const [v, s] = await this.#redis.mget(...this.#keys.fence(resource))
      if (v === null) return undefined
      const sp = s?.indexOf(' ') ?? -1
      return sp > 0 && s!.slice(0, sp) === v ? { highest: BigInt(v), since: this.clock.toLocal(Number(s!.slice(sp + 1))) } : { highest: BigInt(v) }
    })
  }

  // -------------------------------------------------------------- idempotency records

  claim(key: RecordKey, req: ClaimRequest, now: number): Promise<ClaimResult> { return this.#run('claim', () => claim(this.#ops, 'claim', key, req, now)) }

  /**
   * One server: FENCE and CLAIM in one script, one round trip (see ADMIT). Cluster: FENCE, then
   * CLAIM when it accepted (two slots); with replicas the fence's WAIT runs alongside the claim.
   * The WAIT counts only when the key was claimed: a replay or a refusal forwards nothing.
   *
   * Half-failed: when the claim step fails while Redis answers (an error inside CLAIM), admit
   * rejects with StoreError and holds no claim (CLAIM fails before its first write), and the
   * mark stays as a lone `fence` leaves it (raised to the token when below), on one server and
   * on a cluster alike. Nothing lowers it: a lowered mark could let an older token in after a
   * newer one was forwarded. Redis not reached at all: nothing changed.
   */
  admit(fenceReq: FenceRequest, key: RecordKey, req: ClaimRequest, now: number): Promise<AdmitResult> { return this.#run('admit', () => admit(this.#ops, fenceReq, key, req, now)) }
  finish(key: RecordKey, claimId: string, done: Completion, ttlMs: number, now: number): Promise<void> { return this.#run('finish', () => finish(this.#ops, key, claimId, done, ttlMs, now)) }
  /** No WAIT (./records.ts). */
  renew(key: RecordKey, claimId: string, leaseMs: number, now: number): Promise<boolean> { return this.#run('renew', () => renew(this.#ops, key, claimId, leaseMs, now)) }
  release(key: RecordKey, claimId: string): Promise<ReleaseResult> { return this.#run('release', () => release(this.#ops, key, claimId)) }
  acquireLease(resource: string, holder: string, ttlMs: number, now: number): Promise<LeaseGrant> { return this.#run('lease_acquire', () => acquireLease(this.#ops, resource, holder, ttlMs, now)) }
  renewLease(resource: string, token: bigint, now: number): Promise<LeaseChange> { return this.#run('lease_renew', () => changeLease(this.#ops, resource, token, now, 'renew')) }
  releaseLease(resource: string, token: bigint, now: number): Promise<LeaseChange> { return this.#run('lease_release', () => changeLease(this.#ops, resource, token, now, 'release')) }
  readLease(resource: string, now: number): Promise<Lease | undefined> { return this.#run('lease_read', () => readLease(this.#ops, resource, now)) }
  takeProbe(key: RecordKey, p: { seen: number; afterMs: number; nextInMs: number }, now: number): Promise<ProbeTake> { return this.#run('take_probe', () => takeProbe(this.#ops, key, p, now)) }
  settle(key: RecordKey, probes: number, as: Settlement, ttlMs: number, now: number): Promise<SettleResult> { return this.#run('settle', () => settle(this.#ops, key, probes, as, ttlMs, now)) }
  resolve(key: RecordKey, as: Resolution, ttlMs: number, now: number): Promise<ResolveResult> { return this.#run('resolve', () => resolve(this.#ops, key, as, ttlMs, now)) }

  /**
   * One server: reads the index of unsettled records — O(records in flight or unknown) — built
   * first from a SCAN of every record when the store was never indexed or a gateway that keeps
   * no index wrote since (./unknowns.ts). Cluster: SCANs the record keys on every master, after
   * checking that every slot has one: O(records), so the gauge reads it at most every 15 s.
   */
  unknowns(now: number, options: { route?: string; limit?: number } = {}): Promise<UnknownRecord[]> {
    const { route, limit = 1000 } = options
    return this.#run('unknowns', () => unknownRecords(this.#redis, this.cluster, this.#keys, this.#nowOf(now), route, limit))
  }

  unknownRecord(key: RecordKey, now: number): Promise<UnknownRecord | undefined> { return this.#run('unknown_record', () => unknownRecord(this.#redis, this.#keys, this.#nowOf(now), key)) }

  /** The instant a node's records are judged at: the caller's `now`, or that node's TIME. */
  #nowOf(now: number): NowOf { return async (node) => (this.clock.caller ? now : timeOf(await node.time())) }

  // ------------------------------------------------- fencing.serialize: store (registrations)

  /** REGISTER (see there); with `replicas`, a registration counts once they have it too. */
  register(resource: string, token: bigint, id: string, deadline: number, now: number): Promise<Registration> { return this.#run('register', () => register(this.#ops, resource, token, id, deadline, now)) }

  /** OLDER: the registrations read against the server's clock, in one script. */
  olderRegistered(resource: string, token: bigint, now: number): Promise<OlderWrites> { return this.#run('older_registered', () => olderRegistered(this.#ops, resource, token, now)) }

  /** A hold (`until`) is waited for like a registration; a deletion is not (one lost in a failover only holds until its deadline). */
  unregister(resource: string, id: string, until = 0): Promise<void> { return this.#run('unregister', () => unregister(this.#ops, resource, id, until)) }

  // -------------------------------------------------------------- health

  /** See `Store.replicaShortfalls`; ./cluster-history.ts `shortfalls`. */
  replicaShortfalls(): string[] {
    return this.#masters ? shortfalls(this.#masters.last, this.#ops.replicas) : []
  }

  /** One server: PING. Cluster: the cluster's own state is ok, every slot has a master, and every master answers. */
  ping(): Promise<void> {
    return this.#run('ping', async () => {
      await ping(this.#redis, this.cluster)
    })
  }

  async close(): Promise<void> {
    if (this.#closed) return
    this.#closed = true
    this.clock.stop()
    await this.#redis.quit().catch(() => {})
    // quit leaves Sentinel's failover-detector subscriptions open, which keep a CLI process
    // alive (redis/ioredis#1362); disconnect closes them
    this.#redis.disconnect()
  }
}
