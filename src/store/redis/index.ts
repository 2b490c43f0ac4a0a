/**
 * Redis store (ioredis), shared by every gateway replica that points at the same Redis: one
 * server (with or without replicas), or a Redis Cluster (`cluster: true`, `url` lists seed nodes).
 *
 * The parts, each in a file of its own beside this one:
 *   ./scripts.ts      the Lua scripts (every read-then-write is one, so Redis runs it atomically)
 *                     and how their answers map onto the `Store` results (../replies.ts)
 *   ./keys.ts         the key layout (every key its own hash tag) and the cluster slot of a key
 *   ./connection.ts   the ioredis client, what it retries, and a script sent to a slot's master
 *   ./replicas.ts     `replicas: N`: WAIT after the writes a request relies on; ReplicaShortfall
 *   ./attempt-log.ts  the attempt log in streams
 *   ./markers.ts      the state markers: the epoch (and its copies on a cluster), accept-loss
 *   ./unknowns.ts     the records in the unknown state, scanned on every master
 *   ./options.ts      what the store is opened with
 * and here the `Store` operations, which put those together.
 *
 * Fence and claim on one server run as one script, ADMIT (two keys, one round trip). On a
 * cluster the mark's key and the record's key sit in two slots, so `admit` runs FENCE and then,
 * when it accepts, CLAIM: two single-slot scripts. The record keeps its own slot rather than its
 * resource's, because a record is named by (route, scope, key) alone (contract §4): were it kept
 * in its resource's slot, the same key sent with another resource (another account in the path,
 * or a resource taken from a header, which the fingerprint does not cover) would find no record
 * there — a second forward instead of a 422 or a replay — and `resolve`, which knows no
 * resource, would have to scan every master to find it. The cost is one more round trip on
 * routes with both fencing and idempotency. A stale token still leaves the key untouched (CLAIM
 * runs only after FENCE accepted), and a newer token fenced between the two is what could
 * happen just after ADMIT too: the request is forwarded either way.
 */
import type { Cluster } from 'ioredis'
import { storeCall } from '../call.js'
import { resolveResult } from '../replies.js'
import { StoreError, type AdmitResult, type ClaimRequest, type ClaimResult, type Completion, type FenceMark, type FenceRequest, type FenceResult, type OlderWrites, type RecordKey, type Registration, type Resolution, type ResolveResult, type StateMarkers, type Store, type UnknownRecord } from '../types.js'
import type { AuditLog } from '../attempt-log/types.js'
import { streamLog } from './attempt-log.js'
import { StoreClock } from '../clock.js'
import { callScript, createClient, masters, type Conn } from './connection.js'
import { KeyNames } from './keys.js'
import { ReplicaShortfall, Writer } from './replicas.js'
import { WriteSequence } from '../sequence.js'
import { ReplicationHistory, replicationIds } from './history.js'
import { acceptLoss, initEpoch, readMarkers, retireEpoch } from './markers.js'
import { scanUnknowns } from './unknowns.js'
import type { RedisStoreOptions } from './options.js'
import { SCRIPTS, claimArgs, claimOf, fenceOf, type AdmitReply, type ClaimReply, type FenceReply } from './scripts.js'

export { AUDIT_STREAMS, MARKERS, SLOTS, keySlot } from './keys.js'
export { ReplicaShortfall } from './replicas.js'
export type { RedisStoreOptions } from './options.js'

/** TIME's answer (seconds, microseconds) as epoch ms. */
const timeOf = ([sec, usec]: (number | string)[]): number => Number(sec) * 1000 + Math.floor(Number(usec) / 1000)

export class RedisStore implements Store {
  readonly kind = 'redis' as const
  /** true when speaking to a Redis Cluster */
  readonly cluster: boolean
  readonly #redis: Conn
  readonly #keys: KeyNames
  readonly #writer: Writer
  readonly #replicas: number
  #lastError: Error | undefined
  #closed = false
  /** the attempt log: a stream under {fg:<prefix>:audit}, or 16 on a cluster */
  readonly audit: AuditLog
  /** the value written when this key prefix was first used (see `open`) */
  epoch = ''
  /** this process's write sequence (../sequence.ts); none on a cluster (a script reaches one slot only) */
  readonly sequence?: WriteSequence
  /** one server: the primary followed (./history.ts) */
  readonly #history: ReplicationHistory
  /** the check after a reconnection, which every call waits for */
  #verifying?: Promise<void>
  /** the server's clock against this process's (../clock.ts); on a cluster, the master furthest off */
  readonly clock: StoreClock

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
    this.#replicas = replicas
    this.#keys = new KeyNames(keyPrefix, cluster)
    const sentinels = options.sentinels?.map((a) => { const i = a.lastIndexOf(':'); return { host: a.slice(0, i), port: Number(a.slice(i + 1)) } })
    if (sentinels && (cluster || !options.sentinelName)) throw new TypeError('options.sentinels needs options.sentinelName, and no cluster')
    this.#redis = createClient({ urls, cluster, connectTimeoutMs, maxBackoffMs, commandTimeoutMs, sentinels, sentinelName: options.sentinelName })
    const sequence = options.sequence ?? new WriteSequence()
    if (!cluster) this.sequence = sequence
    this.#writer = new Writer(this.#redis, {
      cluster, replicas, replicasTimeoutMs: Math.max(1, Math.round(replicasTimeoutMs)), commandTimeoutMs,
      sequence: cluster ? undefined : { key: this.#keys.seq, seen: sequence },
    })
    this.#history = new ReplicationHistory(replicas === 0, sequence)
    // Without a listener ioredis prints every connection error; remember the last for ping().
    this.#redis.on('error', (e: Error) => { this.#lastError = e })
    this.#redis.on('node error', (e: Error) => { this.#lastError = e })
    this.#redis.on('ready', () => {
      this.#lastError = undefined
      // reconnected (a failover, followed through Sentinel or by a restart): before anything else
      // runs, make sure this is the primary the gateway knew, or one that may lack nothing
      if (!cluster && this.epoch) this.#verifying ??= this.#checkHistory('reconnect').finally(() => { this.#verifying = undefined })
    })
    this.clock = new StoreClock(() => this.#serverTime(), clock === 'caller')
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
      return readMarkers(this.#redis, this.#keys, this.cluster)
    })
  }

  /** See ./markers.ts. */
  async acceptLoss(): Promise<string> {
    return this.#run('accept_loss', () => acceptLoss(this.#redis, this.#keys, this.cluster))
  }

  /** One server: the replication ids now, against the primary known (./history.ts). @throws StoreWentBack */
  async #checkHistory(op: string): Promise<void> {
    this.#history.observe(await replicationIds(this.#redis), op)
  }

  /** Writes a new epoch: every gateway sharing the store sees the loss (../state-loss.ts). */
  retireEpoch(): Promise<void> {
    return this.#run('retire_epoch', () => retireEpoch(this.#redis, this.#keys))
  }

  /**
   * The server's TIME, epoch ms; on a cluster, the master whose clock is furthest from this
   * process's (each master keeps the leases of its own slots).
   */
  async #serverTime(): Promise<number> {
    const readings = await Promise.all(masters(this.#redis, this.cluster).map(async (n) => timeOf(await n.time())))
    const here = Date.now()
    return readings.reduce((far, t) => (Math.abs(t - here) > Math.abs(far - here) ? t : far))
  }

  /** `now` as a script's argument: '' (the server's TIME), or the caller's with `clock: 'caller'`. */
  #now(now: number): string {
    const n = this.clock.now(now)
    return n === undefined ? '' : String(n)
  }

  /** A claim's answer with its instants on this process's clock. */
  #localClaim(c: ClaimResult): ClaimResult {
    return c.kind === 'in_flight' ? { ...c, leaseUntil: this.clock.toLocal(c.leaseUntil) } : c
  }

  /** A fence's answer with `since` on this process's clock. */
  #localFence(f: FenceResult): FenceResult {
    return f.since === undefined ? f : { ...f, since: this.clock.toLocal(f.since) }
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

  fence(resource: string, token: bigint, now = Date.now()): Promise<FenceResult> {
    return this.#run('fence', async () => this.#localFence(fenceOf(await this.#writer.write<FenceReply>('fence', SCRIPTS.fgFence, this.#keys.fence(resource),
      [token.toString(), this.#replicas ? '1' : '0', this.#now(now)], false, (x) => Number(x[0]) === 1))))
  }

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

  claim(key: RecordKey, req: ClaimRequest, now: number): Promise<ClaimResult> {
    return this.#run('claim', () => this.#claim('claim', key, req, now))
  }

  /** CLAIM, waited for when it claimed; a claim the replicas did not acknowledge is given back. */
  async #claim(op: string, key: RecordKey, req: ClaimRequest, now: number): Promise<ClaimResult> {
    try {
      return this.#localClaim(claimOf(await this.#writer.write<ClaimReply>(op, SCRIPTS.fgClaim, [this.#keys.record(key)], claimArgs(req, this.#now(now)), true, (r) => r[0].toString() === 'claimed')))
    } catch (e) {
      if (e instanceof ReplicaShortfall) await this.#giveBack(key, req, now, claimOf(e.result as ClaimReply))
      throw e
    }
  }

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
  admit(fence: FenceRequest, key: RecordKey, req: ClaimRequest, now: number): Promise<AdmitResult> {
    return this.#run('admit', async () => {
      if (!this.cluster) {
        try {
          const [fenceKey, sinceKey] = this.#keys.fence(fence.resource)
          const r = await this.#writer.write<AdmitReply>('admit', SCRIPTS.fgAdmit, [fenceKey, this.#keys.record(key), sinceKey], [fence.token.toString(), ...claimArgs(req, this.#now(now))], true,
            (x) => Number(x[0]) === 1 && x[4].toString() === 'claimed')
          const fenced = this.#localFence(fenceOf([r[0], r[1], r[2], r[3]]))
          return fenced.accepted ? { fence: fenced, claim: this.#localClaim(claimOf(r.slice(4) as ClaimReply)) } : { fence: fenced }
        } catch (e) {
          if (e instanceof ReplicaShortfall) {
            const x = e.result as AdmitReply
            if (Number(x[0]) === 1) await this.#giveBack(key, req, now, claimOf(x.slice(4) as ClaimReply))
          }
          throw e
        }
      }
      const fenceArgs = [fence.token.toString(), this.#replicas ? '1' : '0', this.#now(now)]
      const sent = this.#replicas
        ? await this.#writer.send<FenceReply>(SCRIPTS.fgFence, this.#keys.fence(fence.resource), fenceArgs, false)
        : { conn: this.#redis, result: await this.#writer.call<FenceReply>(SCRIPTS.fgFence, this.#keys.fence(fence.resource), fenceArgs, false) }
      const fenced = this.#localFence(fenceOf(sent.result))
      if (!fenced.accepted) return { fence: fenced }
      const fenceAcked = this.#replicas ? this.#writer.acked('admit', sent.conn, sent.result) : undefined
      fenceAcked?.catch(() => { /* read below, or moot */ })
      const claim = await this.#claim('admit', key, req, now)
      if (fenceAcked && claim.kind === 'claimed') {
        try {
          await fenceAcked
        } catch (e) {
          await this.#giveBack(key, req, now, claim)
          throw e
        }
      }
      return { fence: fenced, claim }
    })
  }

  /**
   * A claim made but not acknowledged by enough replicas is given back before the StoreError
   * reaches the gateway (which does not forward): released, or — when it took over an attempt
   * whose outcome is unknown — put back as that unknown outcome, so the key reads as it did.
   */
  async #giveBack(key: RecordKey, req: ClaimRequest, now: number, claimed: ClaimResult): Promise<void> {
    if (claimed.kind !== 'claimed') return
    const k = this.#keys.record(key)
    await (claimed.after
      ? this.#writer.call(SCRIPTS.fgFinish, [k], [req.claimId, 'unknown', this.#now(now), String(Math.max(1, req.ttlMs)), '', '', '', claimed.after], false)
      : this.#writer.call(SCRIPTS.fgRelease, [k], [req.claimId], false)).catch(() => { /* the lease ends it: an unknown outcome (crash) */ })
  }

  finish(key: RecordKey, claimId: string, done: Completion, ttlMs: number, now: number): Promise<void> {
    return this.#run('finish', async () => {
      const status = done.kind === 'completed' ? String(done.response.status) : done.kind === 'not_stored' ? String(done.status) : ''
      await this.#writer.write<number>('finish', SCRIPTS.fgFinish, [this.#keys.record(key)], [claimId, done.kind, this.#now(now), String(Math.max(1, ttlMs)), status,
        done.kind === 'completed' ? JSON.stringify(done.response.headers) : '',
        done.kind === 'completed' ? done.response.body : '',
        done.kind === 'unknown' ? done.reason : ''], false, (n) => Number(n) === 1)
    })
  }

  /** No WAIT: a renewal lost in a failover only ends the lease sooner (an unknown outcome, reason crash). */
  renew(key: RecordKey, claimId: string, leaseMs: number, now: number): Promise<boolean> {
    return this.#run('renew', async () => Number(await this.#writer.call<number>(SCRIPTS.fgRenew, [this.#keys.record(key)], [claimId, String(Math.max(0, Math.round(leaseMs))), this.#now(now)], false, 'renew')) === 1)
  }

  release(key: RecordKey, claimId: string): Promise<void> {
    return this.#run('release', async () => {
      await this.#writer.write<number>('release', SCRIPTS.fgRelease, [this.#keys.record(key)], [claimId], false, (n) => Number(n) === 1)
    })
  }

  resolve(key: RecordKey, as: Resolution, ttlMs: number, now: number): Promise<ResolveResult> {
    return this.#run('resolve', async () => {
      const [kind, detail] = (await this.#writer.write<(string | Buffer)[]>('resolve', SCRIPTS.fgResolve, [this.#keys.record(key)], [as, this.#now(now), String(Math.max(1, ttlMs))], false,
        (x) => x[0].toString() === 'resolved')).map(String)
      return resolveResult(kind, detail)
    })
  }

  /**
   * SCANs the prefix's record keys (COUNT 1000 a step) — on a cluster on every master, after
   * checking that every slot has one — and reads each one's state (pipelined): O(records) on
   * the servers, so the gauge reads it at most every 15 s.
   */
  unknowns(now: number, options: { route?: string; limit?: number } = {}): Promise<UnknownRecord[]> {
    const { route, limit = 1000 } = options
    return this.#run('unknowns', () => scanUnknowns(this.#redis, this.cluster, this.#keys, async (node) => (this.clock.caller ? now : timeOf(await node.time())), route, limit))
  }

  // ------------------------------------------------- fencing.serialize: store (registrations)

  /** REGISTER (see there); with `replicas`, a registration counts once they have it too. */
  register(resource: string, token: bigint, id: string, deadline: number, now: number): Promise<Registration> {
    return this.#run('register', async () => {
      const r = await this.#writer.write<[number, string, number]>('register', SCRIPTS.fgRegister, [this.#keys.mark(resource), this.#keys.registrations(resource)],
        [token.toString(), id, String(Math.max(0, Math.round(deadline - now))), this.#now(now)], false, (x) => Number(x[0]) === 1)
      if (Number(r[0]) !== 1) return { registered: false, highest: BigInt(String(r[1])) }
      const oldest = String(r[1])
      return oldest === '' ? { registered: true, until: 0 } : { registered: true, oldest: BigInt(oldest), until: this.clock.toLocal(Number(r[2])) }
    })
  }

  /** OLDER: the registrations read against the server's clock, in one script. */
  olderRegistered(resource: string, token: bigint, now: number): Promise<OlderWrites> {
    return this.#run('older_registered', async () => {
      const [oldest, until] = (await callScript<(string | Buffer)[]>(this.#redis, SCRIPTS.fgOlder, [this.#keys.registrations(resource)], [token.toString(), this.#now(now)], false)).map(String)
      return oldest === '' ? { until: 0 } : { oldest: BigInt(oldest), until: this.clock.toLocal(Number(until)) }
    })
  }

  /** A hold (`until`) is waited for like a registration; a deletion is not (one lost in a failover only holds until its deadline). */
  unregister(resource: string, id: string, until = 0): Promise<void> {
    return this.#run('unregister', async () => {
      const now = Date.now()
      await this.#writer.write<number>('unregister', SCRIPTS.fgUnregister, [this.#keys.registrations(resource)], [id, until > 0 ? String(Math.floor(until - now) || 1) : '0', this.#now(now)], false,
        (n) => until > 0 && Number(n) === 1)
    })
  }

  // -------------------------------------------------------------- health

  /** One server: PING. Cluster: the cluster's own state is ok, every slot has a master, and every master answers. */
  ping(): Promise<void> {
    return this.#run('ping', async () => {
      if (!this.cluster) {
        await this.#redis.ping()
        return
      }
      const cluster = this.#redis as Cluster
      const info = String(await cluster.cluster('INFO'))
      if (!info.includes('cluster_state:ok')) throw new Error(`cluster_state is not ok (${/cluster_state:(\w+)/.exec(info)?.[1] ?? '?'})`)
      await Promise.all(masters(this.#redis, this.cluster).map((n) => n.ping()))
    })
  }

  async close(): Promise<void> {
    if (this.#closed) return
    this.#closed = true
    this.clock.stop()
    await this.#redis.quit().catch(() => this.#redis.disconnect())
  }
}
