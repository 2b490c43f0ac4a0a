/**
 * Redis store (ioredis), shared by every gateway replica that points at the same Redis.
 *
 * Every operation that reads and then writes is one Lua script, so Redis runs it atomically:
 * no other command (from this or another replica) runs between its check and its write. The
 * scripts implement the table of src/store/records.ts exactly; the conformance suite holds
 * them to it.
 *
 * Key layout (Redis Cluster ready: every script but ADMIT touches exactly one key, and the whole
 * key is its own hash tag, so records and marks spread over the slots; ADMIT, fence and claim in
 * one round trip, touches two, which one Redis allows and a Cluster would not):
 *   {fg:<prefix>:f:<resource>}               string: the high-water mark, decimal; never expires
 *   {fg:<prefix>:r:<route>:<scope>:<key>}    hash: one idempotency record; PEXPIRE = its ttl
 *   {fg:<prefix>:epoch}                      string: written once when the prefix is first used
 *   {fg:<prefix>:audit}                      stream: the attempt log, one JSON entry per message,
 *                                            trimmed to the retention with XADD MINID ~
 * `%`, `{`, `}` and `:` inside the parts are percent-encoded, so no user value can end the hash
 * tag early or make two records share a key.
 *
 * Tokens go to Lua as decimal strings and are compared by length, then byte by byte: Lua
 * numbers are doubles and would round above 2^53.
 *
 * Failure: no offline queue and no command retry, so a call made while the connection is down
 * rejects at once (StoreError, 503 upstream of here) instead of queueing; in-flight calls on a
 * connection that drops reject too (a replayed claim could report our own claim as in flight).
 * The client reconnects in the background with capped exponential backoff.
 */
import { randomUUID } from 'node:crypto'
import { Redis } from 'ioredis'
import { StoreError, type AdmitResult, type FenceRequest, type StateMarkers, type ClaimRequest, type ClaimResult, type Completion, type FenceResult, type RecordKey, type Resolution, type ResolveResult, type Store, type UnknownReason, type UnknownRecord } from './types.js'
import { aggregate, inTimeline, type AuditCounts, type AuditEntry, type AuditLog, type TimelineFilter } from '../audit/types.js'

export interface RedisStoreOptions {
  /** redis:// or rediss:// URL */
  url: string
  /** namespace for every key, so several deployments (or test runs) share one Redis; default "fencegate" */
  keyPrefix?: string
  /** how long to wait for a TCP connection, ms; default 1000 */
  connectTimeoutMs?: number
  /** longest pause between reconnection attempts, ms; default 2000 */
  maxBackoffMs?: number
  /** attempt log entries older than this are trimmed from the stream, ms; default 7 days */
  auditRetentionMs?: number
}

// KEYS[1] = fence key; ARGV[1] = token (canonical decimal). Returns {accepted 0|1, highest}.
const FENCE = `
local function lt(a, b)
  if #a ~= #b then return #a < #b end
  for i = 1, #a do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x < y end
  end
  return false
end
local t = ARGV[1]
local cur = redis.call('GET', KEYS[1])
if cur then
  if lt(t, cur) then return {0, cur} end
  if t == cur then return {1, cur} end
end
redis.call('SET', KEYS[1], t)
return {1, t}
`

// KEYS[1] = record key; ARGV = fingerprint, claimId, leaseUntil, expiresAt, ttlMs, retry (1|0), now.
// Returns {kind, ...}: claimed [after] [abandoned] | completed status headers body |
// not_stored status | in_flight leaseUntil | unknown reason [abandoned] | mismatch.
// Times are epoch ms: doubles hold them exactly.
const CLAIM = `
local k = KEYS[1]
local fp, cid, leaseUntil, expiresAt, ttl, retry, now = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6] == '1', tonumber(ARGV[7])
local function fresh()
  redis.call('DEL', k)
  redis.call('HSET', k, 'state', 'in_flight', 'fp', fp, 'cid', cid, 'lease', leaseUntil, 'exp', expiresAt)
  redis.call('PEXPIRE', k, ttl)
end
local r = redis.call('HMGET', k, 'state', 'fp', 'lease', 'exp', 'reason', 'status')
local state = r[1]
if not state or tonumber(r[4]) <= now then
  fresh()
  return {'claimed'}
end
if r[2] ~= fp then return {'mismatch'} end
if state == 'completed' then
  local resp = redis.call('HMGET', k, 'headers', 'body')
  return {'completed', r[6], resp[1], resp[2] or ''}
end
if state == 'not_stored' then return {'not_stored', r[6] or '0'} end
if state == 'in_flight' then
  if tonumber(r[3]) > now then return {'in_flight', r[3]} end
  if retry then
    fresh()
    return {'claimed', 'crash', 'abandoned'}
  end
  redis.call('HSET', k, 'state', 'unknown', 'reason', 'crash')
  return {'unknown', 'crash', 'abandoned'}
end
local reason = r[5] or 'crash'
if retry then
  fresh()
  return {'claimed', reason}
end
return {'unknown', reason}
`

// KEYS[1] = fence key, KEYS[2] = record key; ARGV[1] = token, ARGV[2..8] = CLAIM's ARGV.
// FENCE, and CLAIM only when it accepts. Returns {accepted 0|1, highest, CLAIM's answer...}.
// Its two keys hash to two cluster slots: one Redis (with replicas) runs it; a Redis Cluster
// client would make FENCE and CLAIM in turn instead.
const ADMIT = `
local function fence(KEYS, ARGV)
${FENCE}
end
local function claim(KEYS, ARGV)
${CLAIM}
end
local f = fence({KEYS[1]}, {ARGV[1]})
if f[1] == 0 then return f end
local c = claim({KEYS[2]}, {ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[8]})
table.insert(c, 1, f[2])
table.insert(c, 1, f[1])
return c
`

// KEYS[1] = record key; ARGV = claimId, state, expiresAt, ttlMs, status, headers, body, reason.
// Writes only while the record is in flight under claimId. Returns 1 when written.
const FINISH = `
local k = KEYS[1]
local r = redis.call('HMGET', k, 'state', 'cid', 'fp')
if r[1] ~= 'in_flight' or r[2] ~= ARGV[1] then return 0 end
redis.call('DEL', k)
redis.call('HSET', k, 'state', ARGV[2], 'fp', r[3], 'cid', ARGV[1], 'lease', '0', 'exp', ARGV[3])
if ARGV[2] == 'completed' then
  redis.call('HSET', k, 'status', ARGV[5], 'headers', ARGV[6], 'body', ARGV[7])
elseif ARGV[2] == 'not_stored' then
  redis.call('HSET', k, 'status', ARGV[5])
else
  redis.call('HSET', k, 'reason', ARGV[8])
end
redis.call('PEXPIRE', k, ARGV[4])
return 1
`

// KEYS[1] = record key; ARGV[1] = claimId. Deletes only an in-flight record held by claimId.
// KEYS[1] = record key; ARGV = claimId, leaseUntil. 1 when renewed, 0 when no longer held.
const RENEW = `
local r = redis.call('HMGET', KEYS[1], 'state', 'cid')
if r[1] == 'in_flight' and r[2] == ARGV[1] then
  redis.call('HSET', KEYS[1], 'lease', ARGV[2])
  return 1
end
return 0
`

const RELEASE = `
local r = redis.call('HMGET', KEYS[1], 'state', 'cid')
if r[1] == 'in_flight' and r[2] == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
`

// KEYS[1] = record key; ARGV = as (completed|failed), now, expiresAt, ttlMs.
// Returns {'resolved', reason} | {'not_found'} | {'refused', state}.
const RESOLVE = `
local k = KEYS[1]
local now = tonumber(ARGV[2])
local r = redis.call('HMGET', k, 'state', 'lease', 'exp', 'reason', 'fp', 'cid')
local state = r[1]
if not state or tonumber(r[3]) <= now then return {'not_found'} end
local reason
if state == 'unknown' then reason = r[4] or 'crash'
elseif state == 'in_flight' and tonumber(r[2]) <= now then reason = 'crash'
else return {'refused', state} end
redis.call('DEL', k)
if ARGV[1] == 'completed' then
  redis.call('HSET', k, 'state', 'not_stored', 'fp', r[5], 'cid', r[6], 'lease', '0', 'exp', ARGV[3], 'status', '0')
  redis.call('PEXPIRE', k, ARGV[4])
end
return {'resolved', reason}
`

// KEYS[1] = audit stream; ARGV[1] = oldest id to keep (ms), ARGV[2..] = entries (JSON).
// One command for a whole batch of the attempt log, instead of an XADD each.
const AUDIT = `
for i = 2, #ARGV do redis.call('XADD', KEYS[1], '*', 'e', ARGV[i]) end
redis.call('XTRIM', KEYS[1], 'MINID', '~', ARGV[1])
return #ARGV - 1
`

/** The scripts as ioredis commands: defineCommand loads each once, then EVALSHA (EVAL again on NOSCRIPT). */
interface ScriptCommands {
  fgFence(key: string, token: string): Promise<[number, string]>
  fgClaimBuffer(key: string, ...args: string[]): Promise<Buffer[]>
  fgFinish(key: string, ...args: (string | Buffer)[]): Promise<number>
  fgAdmitBuffer(fenceKey: string, recordKey: string, ...args: string[]): Promise<[number, Buffer, ...Buffer[]]>
  fgRelease(key: string, claimId: string): Promise<number>
  fgRenew(key: string, claimId: string, leaseUntil: string): Promise<number>
  fgAudit(key: string, minId: string, ...entries: string[]): Promise<number>
  fgResolve(key: string, ...args: string[]): Promise<string[]>
}

const KEY_SPECIAL = /[%{}:]/
/** Percent-encodes the characters that would end a hash tag or blur the parts of a key. */
const part = (s: string): string =>
  KEY_SPECIAL.test(s) ? s.replace(/[%{}:]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`) : s // most parts have none: no copy

/** The inverse of `part`. */
const unpart = (s: string): string => (s.includes('%') ? s.replace(/%([0-9A-F]{2})/g, (_, h: string) => String.fromCharCode(parseInt(h, 16))) : s)

const REASONS = new Set<UnknownReason>(['timeout', 'reset', 'client_abort', 'crash'])
const asReason = (b: Buffer | undefined): UnknownReason => {
  const s = b?.toString() as UnknownReason
  return REASONS.has(s) ? s : 'crash'
}

/** CLAIM's ARGV. */
const claimArgs = (req: ClaimRequest, now: number): string[] => [
  req.fingerprint, req.claimId, String(now + req.leaseMs), String(now + req.ttlMs),
  String(Math.max(1, req.ttlMs)), req.retryUnknown ? '1' : '0', String(now),
]

/** CLAIM's answer as a ClaimResult. */
function claimReply(r: Buffer[]): ClaimResult {
  const kind = r[0].toString()
  switch (kind) {
    case 'claimed': {
      const out: ClaimResult = { kind: 'claimed' }
      if (r[1]) out.after = asReason(r[1])
      if (r[2]) out.abandoned = true
      return out
    }
    case 'completed':
      return { kind: 'completed', response: { status: Number(r[1].toString()), headers: JSON.parse(r[2].toString()), body: Buffer.from(r[3]) } }
    case 'not_stored':
      return { kind: 'not_stored', status: Number(r[1].toString()) }
    case 'in_flight':
      return { kind: 'in_flight', leaseUntil: Number(r[1].toString()) }
    case 'unknown':
      return r[2] ? { kind: 'unknown', reason: asReason(r[1]), abandoned: true } : { kind: 'unknown', reason: asReason(r[1]) }
    case 'mismatch':
      return { kind: 'mismatch' }
    default:
      throw new Error(`claim script answered ${kind}`)
  }
}

export class RedisStore implements Store {
  readonly kind = 'redis' as const
  readonly #redis: Redis & ScriptCommands
  readonly #prefix: string
  #lastError: Error | undefined
  readonly #auditRetentionMs: number
  #closed = false
  /** the attempt log: a stream under {fg:<prefix>:audit} */
  readonly audit: AuditLog
  /** the value written when this key prefix was first used (see `open`) */
  epoch = ''

  /** Use `RedisStore.open`, which also waits for the first connection. */
  constructor(options: RedisStoreOptions) {
    const { url, keyPrefix = 'fencegate', connectTimeoutMs = 1000, maxBackoffMs = 2000, auditRetentionMs = 7 * 86_400_000 } = options
    this.#auditRetentionMs = auditRetentionMs
    if (typeof url !== 'string' || !/^rediss?:\/\//.test(url)) throw new TypeError('options.url must be a redis:// or rediss:// URL')
    if (typeof keyPrefix !== 'string' || !keyPrefix) throw new TypeError('options.keyPrefix must be a non-empty string')
    this.#prefix = `fg:${part(keyPrefix)}`
    this.#redis = new Redis(url, {
      lazyConnect: true,
      enableOfflineQueue: false,
      maxRetriesPerRequest: 0,
      // commands issued in the same tick by concurrent requests share one write to the socket
      enableAutoPipelining: true,
      connectTimeout: connectTimeoutMs,
      retryStrategy: (times: number) => Math.min(50 * 2 ** Math.min(times, 10), maxBackoffMs),
      // a replica that became read-only after a failover: reconnect so we reach the new primary
      reconnectOnError: (e: Error) => e.message.startsWith('READONLY'),
    }) as Redis & ScriptCommands
    // Without a listener ioredis prints every connection error; remember the last for ping().
    this.#redis.on('error', (e: Error) => { this.#lastError = e })
    this.#redis.on('ready', () => { this.#lastError = undefined })
    this.#redis.defineCommand('fgFence', { numberOfKeys: 1, lua: FENCE })
    this.#redis.defineCommand('fgClaim', { numberOfKeys: 1, lua: CLAIM })
    this.#redis.defineCommand('fgAdmit', { numberOfKeys: 2, lua: ADMIT })
    this.#redis.defineCommand('fgFinish', { numberOfKeys: 1, lua: FINISH })
    this.#redis.defineCommand('fgRelease', { numberOfKeys: 1, lua: RELEASE })
    this.#redis.defineCommand('fgRenew', { numberOfKeys: 1, lua: RENEW })
    this.#redis.defineCommand('fgResolve', { numberOfKeys: 1, lua: RESOLVE })
    this.#redis.defineCommand('fgAudit', { numberOfKeys: 1, lua: AUDIT })
    this.audit = {
      append: (batch) => this.#auditAppend(batch),
      query: (since, until, route) => this.#auditQuery(since, until, route),
      timeline: (filter, since, limit) => this.#run('audit_timeline', async () => {
        const out: AuditEntry[] = []
        await this.#auditScan(since, (e) => { if (e.time >= since && inTimeline(e, filter)) out.push(e) })
        return out.sort((a, b) => a.time - b.time).slice(-limit)
      }),
    }
  }

  /**
   * Connects and records the prefix's epoch.
   * @throws StoreError when Redis cannot be reached
   */
  static async open(options: RedisStoreOptions): Promise<RedisStore> {
    const store = new RedisStore(options)
    try {
      await store.#redis.connect()
      await store.#redis.set(store.#key('epoch'), randomUUID(), 'NX')
      store.epoch = (await store.#redis.get(store.#key('epoch'))) ?? ''
    } catch (e) {
      store.#redis.disconnect()
      throw new StoreError(`cannot connect to Redis: ${(e as Error).message}`, 'open', { cause: e })
    }
    return store
  }

  async markers(): Promise<StateMarkers> {
    return this.#run('markers', async () => {
      const [epoch, accepted] = await this.#redis.mget(this.#key('epoch'), this.#key('accepted'))
      return { epoch: epoch ?? undefined, accepted: accepted ?? undefined }
    })
  }

  async acceptLoss(): Promise<string> {
    return this.#run('accept_loss', async () => {
      await this.#redis.set(this.#key('epoch'), randomUUID(), 'NX')
      const epoch = (await this.#redis.get(this.#key('epoch')))!
      await this.#redis.set(this.#key('accepted'), epoch)
      return epoch
    })
  }

  #key(...parts: string[]): string {
    return `{${this.#prefix}:${parts.map(part).join(':')}}`
  }

  #recordKey(k: RecordKey): string {
    return this.#key('r', k.route, k.scope, k.key)
  }

  async #run<T>(op: string, fn: () => Promise<T>): Promise<T> {
    if (this.#closed) throw new StoreError('store is closed', op)
    try {
      return await fn()
    } catch (e) {
      const why = this.#redis.status === 'ready' ? (e as Error).message : `not connected (${this.#lastError?.message ?? this.#redis.status})`
      throw new StoreError(`redis ${op}: ${why}`, op, { cause: e })
    }
  }

  fence(resource: string, token: bigint): Promise<FenceResult> {
    return this.#run('fence', async () => {
      const [accepted, highest] = await this.#redis.fgFence(this.#key('f', resource), token.toString())
      return { accepted: accepted === 1, highest: BigInt(highest) }
    })
  }

  highest(resource: string): Promise<bigint | undefined> {
    return this.#run('highest', async () => {
      const v = await this.#redis.get(this.#key('f', resource))
      return v === null ? undefined : BigInt(v)
    })
  }

  claim(key: RecordKey, req: ClaimRequest, now: number): Promise<ClaimResult> {
    return this.#run('claim', async () => claimReply(await this.#redis.fgClaimBuffer(this.#recordKey(key), ...claimArgs(req, now))))
  }

  /** FENCE and CLAIM in one script: one round trip (see ADMIT). */
  admit(fence: FenceRequest, key: RecordKey, req: ClaimRequest, now: number): Promise<AdmitResult> {
    return this.#run('admit', async () => {
      const r = await this.#redis.fgAdmitBuffer(this.#key('f', fence.resource), this.#recordKey(key), fence.token.toString(), ...claimArgs(req, now))
      const result = { accepted: r[0] === 1, highest: BigInt(r[1].toString()) }
      return result.accepted ? { fence: result, claim: claimReply(r.slice(2) as Buffer[]) } : { fence: result }
    })
  }

  finish(key: RecordKey, claimId: string, done: Completion, ttlMs: number, now: number): Promise<void> {
    return this.#run('finish', async () => {
      const status = done.kind === 'completed' ? String(done.response.status) : done.kind === 'not_stored' ? String(done.status) : ''
      await this.#redis.fgFinish(this.#recordKey(key), claimId, done.kind, String(now + ttlMs), String(Math.max(1, ttlMs)), status,
        done.kind === 'completed' ? JSON.stringify(done.response.headers) : '',
        done.kind === 'completed' ? done.response.body : '',
        done.kind === 'unknown' ? done.reason : '')
    })
  }

  renew(key: RecordKey, claimId: string, leaseMs: number, now: number): Promise<boolean> {
    return this.#run('renew', async () => (await this.#redis.fgRenew(this.#recordKey(key), claimId, String(now + leaseMs))) === 1)
  }

  release(key: RecordKey, claimId: string): Promise<void> {
    return this.#run('release', async () => {
      await this.#redis.fgRelease(this.#recordKey(key), claimId)
    })
  }

  resolve(key: RecordKey, as: Resolution, ttlMs: number, now: number): Promise<ResolveResult> {
    return this.#run('resolve', async () => {
      const r = await this.#redis.fgResolve(this.#recordKey(key), as, String(now), String(now + ttlMs), String(Math.max(1, ttlMs)))
      switch (r[0]) {
        case 'resolved': return { kind: 'resolved', reason: asReason(Buffer.from(r[1])) }
        case 'not_found': return { kind: 'not_found' }
        case 'refused': return { kind: 'refused', state: r[1] as 'in_flight' | 'completed' | 'not_stored' }
        default: throw new Error(`resolve script answered ${r[0]}`)
      }
    })
  }

  /**
   * SCANs the prefix's record keys (COUNT 1000 a step) and reads each one's state in one
   * pipeline per step: O(records) on the server, so the gauge reads it at most every 15 s.
   */
  unknowns(now: number, options: { route?: string; limit?: number } = {}): Promise<UnknownRecord[]> {
    const { route, limit = 1000 } = options
    return this.#run('unknowns', async () => {
      const head = `{${this.#prefix}:r:`
      const match = `${head.replace(/[*?[\]\\]/g, (c) => `\\${c}`)}${route !== undefined ? `${part(route).replace(/[*?[\]\\]/g, (c) => `\\${c}`)}:` : ''}*`
      const out: UnknownRecord[] = []
      let cursor = '0'
      do {
        const [next, keys] = await this.#redis.scan(cursor, 'MATCH', match, 'COUNT', 1000)
        cursor = next
        if (!keys.length) continue
        const pipe = this.#redis.pipeline()
        for (const k of keys) pipe.hmget(k, 'state', 'lease', 'exp', 'reason')
        const replies = (await pipe.exec()) ?? []
        for (let i = 0; i < keys.length && out.length < limit; i++) {
          const [err, v] = replies[i] ?? []
          if (err || !v) continue
          const [state, lease, exp, reason] = v as (string | null)[]
          const leaseUntil = Number(lease ?? 0), expiresAt = Number(exp ?? 0)
          if (expiresAt <= now) continue
          const crashed = state === 'in_flight' && leaseUntil <= now
          if (state !== 'unknown' && !crashed) continue
          const [r, scope, key] = keys[i].slice(head.length, -1).split(':').map(unpart)
          out.push({ key: { route: r, scope, key }, reason: crashed ? 'crash' : asReason(reason === null ? undefined : Buffer.from(reason)), leaseUntil, expiresAt })
        }
      } while (cursor !== '0' && out.length < limit)
      return out
    })
  }

  /** XADD per entry; the last one trims entries older than the retention (MINID ~, by the stream's ms ids). */
  #auditAppend(batch: readonly AuditEntry[]): Promise<void> {
    return this.#run('audit_append', async () => {
      if (!batch.length) return
      const key = this.#key('audit')
      const minId = String(Math.max(0, Date.now() - this.#auditRetentionMs))
      await this.#redis.fgAudit(key, minId, ...batch.map((e) => JSON.stringify(e)))
    })
  }

  /**
   * Reads the stream from a minute before `since` (its ids are Redis's clock, the entries'
   * times the gateways'), 1000 entries at a time, and aggregates by the entries' own times.
   */
  #auditQuery(since: number, until: number, route?: string): Promise<AuditCounts[]> {
    return this.#run('audit_query', async () => {
      const entries: AuditEntry[] = []
      await this.#auditScan(since, (e) => entries.push(e))
      return aggregate(entries, since, until, route)
    })
  }

  /** Every entry of the stream from a minute before `since` (its ids are Redis's clock), 1000 a page. */
  async #auditScan(since: number, each: (e: AuditEntry) => void): Promise<void> {
    const key = this.#key('audit')
    let start = String(Math.max(0, since - 60_000))
    for (;;) {
      const page = await this.#redis.xrange(key, start, '+', 'COUNT', 1000)
      for (const [, fields] of page) {
        const i = fields.indexOf('e')
        if (i >= 0) try { each(JSON.parse(fields[i + 1]) as AuditEntry) } catch { /* not ours */ }
      }
      if (page.length < 1000) break
      start = `(${page[page.length - 1][0]}`
    }
  }

  ping(): Promise<void> {
    return this.#run('ping', async () => {
      await this.#redis.ping()
    })
  }

  async close(): Promise<void> {
    if (this.#closed) return
    this.#closed = true
    await this.#redis.quit().catch(() => this.#redis.disconnect())
  }
}
