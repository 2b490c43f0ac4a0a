/**
 * Redis store (ioredis), shared by every gateway replica that points at the same Redis: one
 * server (with or without replicas), or a Redis Cluster (`cluster: true`, `url` lists seed nodes).
 *
 * Every operation that reads and then writes is one Lua script, so Redis runs it atomically:
 * no other command (from this or another replica) runs between its check and its write. The
 * scripts implement the table of src/store/record-state.ts exactly; the conformance suite holds
 * them to it.
 *
 * Key layout (every key is its own hash tag, so records and marks spread over a cluster's slots
 * and every script but one touches exactly one key):
 *   {fg:<prefix>:f:<resource>}               string: the high-water mark, decimal; never expires
 *   {fg:<prefix>:f:<resource>}s              string: "<mark> <epoch ms>", when the mark was first
 *                                            accepted (same hash tag, so same slot); never expires;
 *                                            read only while its mark still matches (a mark raised
 *                                            by a gateway older than it leaves it behind)
 *   {fg:<prefix>:f:<resource>}w              hash: `fencing.serialize: store`'s registrations of
 *                                            the resource, id → "<token> <deadline ms>" (same hash
 *                                            tag as the mark: REGISTER reads the mark and writes
 *                                            here in one script, on a cluster too); PEXPIRE = its
 *                                            latest deadline + 60 s, so a crashed replica's go
 *   {fg:<prefix>:r:<route>:<scope>:<key>}    hash: one idempotency record; PEXPIRE = its ttl
 *   {fg:<prefix>:epoch}                      string: written once when the prefix is first used
 *   {fg:<prefix>:accepted}                   string: the epoch an operator accepted after a loss
 *   {fg:<prefix>:audit}                      stream: the attempt log (one server)
 * and on a cluster only:
 *   {fg:<prefix>:m:<n>}  × 256               string: the epoch again, one copy in each block of
 *                                            64 slots, so losing any master's data shows
 *   {fg:<prefix>:audit:<n>}  × 16            streams: the attempt log, one in each block of
 *                                            1024 slots, so it spreads over the masters
 * `%`, `{`, `}` and `:` inside the parts are percent-encoded, so no user value can end the hash
 * tag early or make two records share a key.
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
 *
 * Tokens go to Lua as decimal strings and are compared by length, then byte by byte: Lua
 * numbers are doubles and would round above 2^53.
 *
 * Failure (one server): no offline queue and no command retry, so a call made while the
 * connection is down rejects at once (StoreError, 503 upstream of here) instead of queueing;
 * in-flight calls on a connection that drops reject too. The client reconnects in the
 * background with capped exponential backoff.
 *
 * Failure (cluster): ioredis follows MOVED and ASK (resharding), and retries a command every
 * 100 ms after CLUSTERDOWN, TRYAGAIN or a closed node connection (a master that died), up to
 * `maxRedirections`, refreshing the slot map meanwhile; the gateway's `store.timeout` answers
 * the request 503 first. A command resent after its connection closed may have run before:
 * every script is safe to run twice (a fence is idempotent, a claim that finds its own claim id
 * answers `claimed` again, finish and release act only on their own claim). No replica reads:
 * a replica may lag, and a replay read there could miss a completed record.
 *
 * Replicas (`replicas: N`): after a write the request relies on — an accepted fence (an equal
 * token rewrites the mark, so the wait covers a mark another gateway wrote), a claim, a finish,
 * a release, a resolution — the store sends `WAIT N timeout` on the connection that carried the
 * write and answers only when N replicas acknowledged it; fewer is a StoreError (503), and a
 * claim it made is given back first. Concurrent writes on one connection share one WAIT (a WAIT
 * covers every earlier write of its connection), so a replica that stops answering costs each
 * request one timeout, not a queue of them. On a cluster the writes that need a WAIT are sent to
 * the slot's master's own connection (following MOVED and ASK here), so the WAIT goes where the
 * write went. WAIT narrows the window in which a failover loses an acknowledged write; it does
 * not close it (see the README, "Redis replicas and failover").
 */
import { createHash, randomUUID } from 'node:crypto'
import { setTimeout as sleep } from 'node:timers/promises'
import { Cluster, Redis, type RedisOptions } from 'ioredis'
import { StoreError, type AdmitResult, type FenceMark, type FenceRequest, type StateMarkers, type ClaimRequest, type ClaimResult, type Completion, type FenceResult, type RecordKey, type Resolution, type ResolveResult, type Store, type UnknownReason, type UnknownRecord } from '../types.js'
import { aggregate, fencedIn, inTimeline, type AuditCounts, type AuditEntry, type AuditLog } from '../attempt-log/types.js'
import type { OlderWrites, Registration } from '../types.js'
import { olderOf, type Registered } from '../registrations.js'

export interface RedisStoreOptions {
  /** redis:// or rediss:// URL; with `cluster`, several (the seed nodes), comma-separated */
  url: string
  /** `url` names seed nodes of a Redis Cluster; default false */
  cluster?: boolean
  /** namespace for every key, so several deployments (or test runs) share one Redis; default "fencegate" */
  keyPrefix?: string
  /** how long to wait for a TCP connection, ms; default 1000 */
  connectTimeoutMs?: number
  /** longest pause between reconnection attempts, ms; default 2000 */
  maxBackoffMs?: number
  /** attempt log entries older than this are trimmed from the stream, ms; default 7 days */
  auditRetentionMs?: number
  /** replicas that must acknowledge a write before it counts (WAIT); default 0: no wait */
  replicas?: number
  /** WAIT's timeout, ms; default 250 */
  replicasTimeoutMs?: number
  /**
   * cluster: a command not answered after this long (redirections and retries included) is
   * given up by the client, ms; default 2000. The gateway's `store.timeout` answers the request
   * before that; this only bounds what is left running.
   */
  commandTimeoutMs?: number
}

// Lua: a < b for canonical decimal strings (tokens up to 2^63-1, beyond Lua's exact numbers):
// the shorter is smaller, then byte by byte. Shared by the scripts that compare tokens.
const DECIMAL_LT = `local function lt(a, b)
  if #a ~= #b then return #a < #b end
  for i = 1, #a do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x < y end
  end
  return false
end
`

// KEYS[1] = fence key, KEYS[2] = its since key; ARGV[1] = token (canonical decimal), ARGV[2] =
// '1': rewrite an equal mark (a write, so that a WAIT after it covers the mark), ARGV[3] = now
// (epoch ms). Returns {accepted 0|1, highest, since ('' when unknown), raised 0|1}.
const FENCE = `
${DECIMAL_LT}local function since(mark)
  local v = redis.call('GET', KEYS[2])
  if not v then return '' end
  local sp = string.find(v, ' ', 1, true)
  if not sp or string.sub(v, 1, sp - 1) ~= mark then return '' end
  return string.sub(v, sp + 1)
end
local t = ARGV[1]
local cur = redis.call('GET', KEYS[1])
if cur then
  if lt(t, cur) then return {0, cur, since(cur), 0} end
  if t == cur then
    if ARGV[2] == '1' then redis.call('SET', KEYS[1], t) end
    return {1, cur, since(cur), 0}
  end
end
redis.call('SET', KEYS[1], t)
redis.call('SET', KEYS[2], t .. ' ' .. ARGV[3])
return {1, t, ARGV[3], 1}
`

// KEYS[1] = record key; ARGV = fingerprint, claimId, leaseUntil, expiresAt, ttlMs, retry (1|0), now.
// Returns {kind, ...}: claimed [after] [abandoned] | completed status headers body |
// not_stored status | in_flight leaseUntil | unknown reason [abandoned] | mismatch.
// Times are epoch ms: doubles hold them exactly. A claim that finds the record in flight under
// its own claim id is this very call sent again (a cluster client resends a command whose
// connection closed before the reply): it answers as the first run did, from `after`/`ab`.
const CLAIM = `
local k = KEYS[1]
local fp, cid, leaseUntil, expiresAt, ttl, retry, now = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6] == '1', tonumber(ARGV[7])
local function fresh(after, abandoned)
  redis.call('DEL', k)
  redis.call('HSET', k, 'state', 'in_flight', 'fp', fp, 'cid', cid, 'lease', leaseUntil, 'exp', expiresAt)
  if after then redis.call('HSET', k, 'after', after, 'ab', abandoned) end
  redis.call('PEXPIRE', k, ttl)
end
local r = redis.call('HMGET', k, 'state', 'fp', 'lease', 'exp', 'reason', 'status', 'cid', 'after', 'ab')
local state = r[1]
if not state or tonumber(r[4]) <= now then
  fresh()
  return {'claimed'}
end
if state == 'in_flight' and r[7] == cid then
  redis.call('HSET', k, 'cid', cid)
  if not r[8] then return {'claimed'} end
  if r[9] == '1' then return {'claimed', r[8], 'abandoned'} end
  return {'claimed', r[8]}
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
    fresh('crash', '1')
    return {'claimed', 'crash', 'abandoned'}
  end
  redis.call('HSET', k, 'state', 'unknown', 'reason', 'crash')
  return {'unknown', 'crash', 'abandoned'}
end
local reason = r[5] or 'crash'
if retry then
  fresh(reason, '0')
  return {'claimed', reason}
end
return {'unknown', reason}
`

// KEYS[1] = fence key, KEYS[2] = record key, KEYS[3] = the fence's since key; ARGV[1] = token,
// ARGV[2..8] = CLAIM's ARGV (ARGV[8] is now, also the since of a mark FENCE raises).
// FENCE, and CLAIM only when it accepts. Returns {accepted 0|1, highest, since, raised, CLAIM's answer...}.
// Its two keys hash to two cluster slots: one Redis (with replicas) runs it; on a cluster the
// store runs FENCE and CLAIM in turn instead.
const ADMIT = `
local function fence(KEYS, ARGV)
${FENCE}
end
local function claim(KEYS, ARGV)
${CLAIM}
end
local f = fence({KEYS[1], KEYS[3]}, {ARGV[1], '0', ARGV[8]})
if f[1] == 0 then return f end
local c = claim({KEYS[2]}, {ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[8]})
for i = 4, 1, -1 do table.insert(c, 1, f[i]) end
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

// KEYS[1] = record key; ARGV = claimId, leaseUntil. 1 when renewed, 0 when no longer held.
const RENEW = `
local r = redis.call('HMGET', KEYS[1], 'state', 'cid')
if r[1] == 'in_flight' and r[2] == ARGV[1] then
  redis.call('HSET', KEYS[1], 'lease', ARGV[2])
  return 1
end
return 0
`

// KEYS[1] = record key; ARGV[1] = claimId. Deletes only an in-flight record held by claimId.
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

// `fencing.serialize: store` (src/fencing/window.ts). KEYS[1] = fence key, KEYS[2] = the
// resource's registrations (same hash tag: one slot); ARGV = token, id, deadline, now.
// Registers `id` unless the mark is above the token — read in the same script, so no fence runs
// between the read and the write — deletes the expired registrations it comes across, and
// answers {1, lowest older token ('' none), latest deadline of the older ones (0 none)} or
// {0, highest}. Safe to run twice (the same id is written again).
const REGISTER = `
${DECIMAL_LT}local t, now = ARGV[1], tonumber(ARGV[4])
local cur = redis.call('GET', KEYS[1])
if cur and lt(t, cur) then return {0, cur} end
redis.call('HSET', KEYS[2], ARGV[2], t .. ' ' .. ARGV[3])
local all = redis.call('HGETALL', KEYS[2])
local oldest, untl, last = false, 0, 0
for i = 1, #all, 2 do
  local v = all[i + 1]
  local sp = string.find(v, ' ', 1, true)
  local tok, dl = string.sub(v, 1, sp - 1), tonumber(string.sub(v, sp + 1))
  if dl <= now then
    redis.call('HDEL', KEYS[2], all[i])
  else
    if dl > last then last = dl end
    if lt(tok, t) then
      if not oldest or lt(tok, oldest) then oldest = tok end
      if dl > untl then untl = dl end
    end
  end
end
if last > 0 then redis.call('PEXPIRE', KEYS[2], math.floor(last - now) + 60000) end
return {1, oldest or '', untl}
`

// KEYS[1] = the resource's registrations; ARGV = id, until ('0': delete), now. Deletes the
// registration, or keeps it until `until`. Returns 1 when it was there.
const UNREGISTER = `
local v = redis.call('HGET', KEYS[1], ARGV[1])
if not v then return 0 end
if ARGV[2] == '0' then
  redis.call('HDEL', KEYS[1], ARGV[1])
  return 1
end
local sp = string.find(v, ' ', 1, true)
redis.call('HSET', KEYS[1], ARGV[1], string.sub(v, 1, sp - 1) .. ' ' .. ARGV[2])
local want = math.floor(tonumber(ARGV[2]) - tonumber(ARGV[3])) + 60000
if redis.call('PTTL', KEYS[1]) < want then redis.call('PEXPIRE', KEYS[1], want) end
return 1
`

/** A script as the explicit cluster path sends it: EVALSHA, EVAL after NOSCRIPT. */
interface Script { name: string; lua: string; sha: string; keys: number }
const script = (name: string, lua: string, keys: number): Script => ({ name, lua, keys, sha: createHash('sha1').update(lua).digest('hex') })
const SCRIPTS = {
  fgFence: script('fgFence', FENCE, 2),
  fgClaim: script('fgClaim', CLAIM, 1),
  fgAdmit: script('fgAdmit', ADMIT, 3),
  fgFinish: script('fgFinish', FINISH, 1),
  fgRelease: script('fgRelease', RELEASE, 1),
  fgRenew: script('fgRenew', RENEW, 1),
  fgResolve: script('fgResolve', RESOLVE, 1),
  fgAudit: script('fgAudit', AUDIT, 1),
  fgRegister: script('fgRegister', REGISTER, 2),
  fgUnregister: script('fgUnregister', UNREGISTER, 1),
} as const

/** The scripts as ioredis commands: defineCommand loads each once, then EVALSHA (EVAL again on NOSCRIPT). */
interface ScriptCommands {
  fgFence(key: string, sinceKey: string, token: string, touch: string, now: string): Promise<FenceReply>
  fgClaimBuffer(key: string, ...args: string[]): Promise<Buffer[]>
  fgFinish(key: string, ...args: (string | Buffer)[]): Promise<number>
  fgAdmitBuffer(fenceKey: string, recordKey: string, sinceKey: string, ...args: string[]): Promise<[number, Buffer, Buffer, number, ...Buffer[]]>
  fgRelease(key: string, claimId: string): Promise<number>
  fgRenew(key: string, claimId: string, leaseUntil: string): Promise<number>
  fgAudit(key: string, minId: string, ...entries: string[]): Promise<number>
  fgResolve(key: string, ...args: string[]): Promise<string[]>
}

type Conn = (Redis | Cluster) & ScriptCommands

const KEY_SPECIAL = /[%{}:]/
/** Percent-encodes the characters that would end a hash tag or blur the parts of a key. */
const part = (s: string): string =>
  KEY_SPECIAL.test(s) ? s.replace(/[%{}:]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`) : s // most parts have none: no copy

/** The inverse of `part`. */
const unpart = (s: string): string => (s.includes('%') ? s.replace(/%([0-9A-F]{2})/g, (_, h: string) => String.fromCharCode(parseInt(h, 16))) : s)

// ------------------------------------------------------------------ cluster slots

export const SLOTS = 16384
const CRC16_TABLE = (() => {
  const t = new Uint16Array(256)
  for (let i = 0; i < 256; i++) {
    let c = i << 8
    for (let j = 0; j < 8; j++) c = c & 0x8000 ? (c << 1) ^ 0x1021 : c << 1
    t[i] = c & 0xffff
  }
  return t
})()

/** The Redis Cluster slot of a key: CRC16 (XMODEM) of its hash tag (the part inside the first `{…}`, when not empty), mod 16384. */
export function keySlot(key: string): number {
  let s = key
  const open = key.indexOf('{')
  if (open >= 0) {
    const close = key.indexOf('}', open + 1)
    if (close > open + 1) s = key.slice(open + 1, close)
  }
  let crc = 0
  for (const b of Buffer.from(s)) crc = ((crc << 8) & 0xffff) ^ CRC16_TABLE[((crc >> 8) ^ b) & 0xff]
  return crc % SLOTS
}

/** Marker copies of the epoch on a cluster: one in each block of SLOTS / MARKERS slots. */
export const MARKERS = 256
/** Streams of the attempt log on a cluster: one in each block of SLOTS / AUDIT_STREAMS slots. */
export const AUDIT_STREAMS = 16

/**
 * Key names `{<base><n>}`, one per block of SLOTS / blocks consecutive slots, in block order:
 * the first n (from 0) whose slot falls in each block. Deterministic, so every gateway and the
 * CLI derive the same names.
 */
function keysPerBlock(base: string, blocks: number): string[] {
  const size = SLOTS / blocks
  const out: (string | undefined)[] = new Array(blocks)
  let found = 0
  for (let n = 0; found < blocks; n++) {
    const k = `{${base}${n}}`
    const b = Math.floor(keySlot(k) / size)
    if (out[b] === undefined) { out[b] = k; found++ }
  }
  return out as string[]
}

// ------------------------------------------------------------------ replies

const REASONS = new Set<UnknownReason>(['timeout', 'reset', 'client_abort', 'crash'])
const asReason = (b: Buffer | string | undefined | null): UnknownReason => {
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

/** FENCE's answer: accepted, highest, since ('' unknown), raised. */
type FenceReply = [number, string | Buffer, string | Buffer, number]

/** FENCE's answer as a FenceResult. */
const fenceReply = (r: FenceReply): FenceResult => {
  const out: FenceResult = { accepted: Number(r[0]) === 1, highest: BigInt(r[1].toString()) }
  const since = r[2].toString()
  if (since !== '') out.since = Number(since)
  if (Number(r[3]) === 1) out.raised = true
  return out
}

// ------------------------------------------------------------------ WAIT

/** Fewer replicas than asked acknowledged a write in time. */
export class ReplicaShortfall extends StoreError {
  /** what the write did (the script's answer), for a caller that must undo it */
  result: unknown
  constructor(op: string, readonly acked: number, readonly wanted: number, timeoutMs: number, readonly node?: string, cause?: Error) {
    super(cause
      ? `redis ${op}: the write's WAIT for ${wanted} replica${wanted === 1 ? '' : 's'} failed (${cause.message})${node ? ` (master ${node})` : ''}; the request fails closed`
      : `redis ${op}: ${acked} of ${wanted} replica${wanted === 1 ? '' : 's'} acknowledged the write within ${timeoutMs} ms${node ? ` (master ${node})` : ''}; the request fails closed`, op, { cause })
    this.name = 'ReplicaShortfall'
  }
}

/**
 * `WAIT replicas timeout` on one connection, shared: a caller whose write has been answered
 * joins the WAIT sent next (one that is already running may have been sent before the write),
 * and at most one WAIT runs at a time, so the writes that arrive while it runs share the next.
 */
class Waiter {
  #running?: Promise<number>
  #next?: Promise<number>
  constructor(private readonly conn: Redis | Cluster, private readonly replicas: number, private readonly timeoutMs: number) {}

  /** Resolves with the replicas that acknowledged every write this connection made before the call. */
  acked(): Promise<number> {
    if (!this.#running) {
      const p = this.conn.wait(this.replicas, this.timeoutMs).then(Number)
      this.#running = p
      p.then(() => { this.#running = undefined }, () => { this.#running = undefined })
      return p
    }
    this.#next ??= this.#running.then(() => {}, () => {}).then(() => {
      this.#next = undefined
      return this.acked()
    })
    return this.#next
  }
}

/** Errors after which a cluster command was not run and may be sent again (or, connection closed, may have run: every script is safe to run twice). */
const TRANSIENT = /^(TRYAGAIN|CLUSTERDOWN|LOADING|MASTERDOWN)|Connection is closed|ECONNREFUSED|ECONNRESET|EPIPE|Stream isn't writeable/

// ------------------------------------------------------------------ the store

export class RedisStore implements Store {
  readonly kind = 'redis' as const
  /** true when speaking to a Redis Cluster */
  readonly cluster: boolean
  readonly #redis: Conn
  readonly #prefix: string
  #lastError: Error | undefined
  readonly #auditRetentionMs: number
  readonly #replicas: number
  readonly #replicasTimeoutMs: number
  readonly #commandTimeoutMs: number
  /** one WAIT queue per connection that carries writes (one server: the one connection; cluster: each master's) */
  readonly #waiters = new WeakMap<object, Waiter>()
  /** cluster: the epoch's copies, one per block of slots */
  readonly #markerKeys: string[]
  /** the attempt log's streams (one server: one) */
  readonly #auditKeys: string[]
  #auditNext = 0
  #closed = false
  /** the attempt log: a stream under {fg:<prefix>:audit}, or 16 on a cluster */
  readonly audit: AuditLog
  /** the value written when this key prefix was first used (see `open`) */
  epoch = ''

  /** Use `RedisStore.open`, which also waits for the first connection. */
  constructor(options: RedisStoreOptions) {
    const {
      url, cluster = false, keyPrefix = 'fencegate', connectTimeoutMs = 1000, maxBackoffMs = 2000, auditRetentionMs = 7 * 86_400_000,
      replicas = 0, replicasTimeoutMs = 250, commandTimeoutMs = 2000,
    } = options
    this.#auditRetentionMs = auditRetentionMs
    const urls = typeof url === 'string' ? url.split(',').map((u) => u.trim()).filter(Boolean) : []
    if (!urls.length || !urls.every((u) => /^rediss?:\/\//.test(u))) throw new TypeError('options.url must be a redis:// or rediss:// URL (several, comma-separated, for a cluster)')
    if (urls.length > 1 && !cluster) throw new TypeError('options.url names several nodes: set options.cluster for a Redis Cluster')
    if (typeof keyPrefix !== 'string' || !keyPrefix) throw new TypeError('options.keyPrefix must be a non-empty string')
    if (!Number.isInteger(replicas) || replicas < 0) throw new TypeError('options.replicas must be an integer ≥ 0')
    this.cluster = cluster
    this.#replicas = replicas
    this.#replicasTimeoutMs = Math.max(1, Math.round(replicasTimeoutMs))
    this.#commandTimeoutMs = commandTimeoutMs
    this.#prefix = `fg:${part(keyPrefix)}`
    this.#markerKeys = cluster ? keysPerBlock(`${this.#prefix}:m:`, MARKERS) : []
    this.#auditKeys = cluster ? keysPerBlock(`${this.#prefix}:audit:`, AUDIT_STREAMS) : [this.#key('audit')]
    const retryStrategy = (times: number) => Math.min(50 * 2 ** Math.min(times, 10), maxBackoffMs)
    if (cluster) {
      const first = new URL(urls[0])
      const nodeOptions: RedisOptions = {
        connectTimeout: connectTimeoutMs,
        // a node's commands are retried by the cluster client (below), not by the node's connection
        maxRetriesPerRequest: 0,
        // bounds what is left running after the gateway gave up on a call (store.timeout)
        commandTimeout: commandTimeoutMs,
        username: first.username ? decodeURIComponent(first.username) : undefined,
        password: first.password ? decodeURIComponent(first.password) : undefined,
        tls: first.protocol === 'rediss:' ? {} : undefined,
      }
      this.#redis = new Cluster(urls.map((u) => { const x = new URL(u); return { host: x.hostname, port: Number(x.port || 6379) } }), {
        lazyConnect: true,
        // no queue while the cluster is unreachable: a call then fails at once (503)
        enableOfflineQueue: false,
        enableReadyCheck: true,
        enableAutoPipelining: true,
        // never read from a replica: it may lag behind a write this or another gateway relies on
        scaleReads: 'master',
        // MOVED/ASK are followed at once; CLUSTERDOWN (a slot without a master), TRYAGAIN and a
        // closed node connection (a master that died) are retried every 100 ms, refreshing the
        // slot map meanwhile, until the command succeeds or `maxRedirections` tries were made.
        // 100 ms × 16 ≈ 1.6 s: longer than the default store.timeout, so a failover of ~2 s is
        // answered 503 by the gateway, while a quick MOVED after it is followed within the call.
        maxRedirections: 16,
        retryDelayOnMoved: 0,
        retryDelayOnFailover: 100,
        retryDelayOnClusterDown: 100,
        retryDelayOnTryAgain: 100,
        slotsRefreshTimeout: Math.max(connectTimeoutMs, 1000),
        // a failover is learnt from the first MOVED; this catches the rest
        slotsRefreshInterval: 2000,
        // every seed unreachable: reconnect with the same backoff as one server
        clusterRetryStrategy: retryStrategy,
        redisOptions: nodeOptions,
      }) as Cluster & ScriptCommands
    } else {
      this.#redis = new Redis(urls[0], {
        lazyConnect: true,
        enableOfflineQueue: false,
        maxRetriesPerRequest: 0,
        // commands issued in the same tick by concurrent requests share one write to the socket
        enableAutoPipelining: true,
        connectTimeout: connectTimeoutMs,
        retryStrategy,
        // a replica that became read-only after a failover: reconnect so we reach the new primary
        reconnectOnError: (e: Error) => e.message.startsWith('READONLY'),
      }) as Redis & ScriptCommands
    }
    // Without a listener ioredis prints every connection error; remember the last for ping().
    this.#redis.on('error', (e: Error) => { this.#lastError = e })
    this.#redis.on('node error', (e: Error) => { this.#lastError = e })
    this.#redis.on('ready', () => { this.#lastError = undefined })
    for (const s of Object.values(SCRIPTS)) this.#redis.defineCommand(s.name, { numberOfKeys: s.keys, lua: s.lua })
    this.audit = {
      append: (batch) => this.#auditAppend(batch),
      query: (since, until, route) => this.#auditQuery(since, until, route),
      timeline: (filter, since, limit) => this.#run('audit_timeline', async () => {
        const out: AuditEntry[] = []
        await this.#auditScan(since, (e) => { if (e.time >= since && inTimeline(e, filter)) out.push(e) })
        return out.sort((a, b) => a.time - b.time).slice(-limit)
      }),
      fenced: (since, until, route, limit) => this.#run('audit_fenced', async () => {
        const out: AuditEntry[] = []
        await this.#auditScan(since, (e) => { if (fencedIn(e, since, until, route)) out.push(e) })
        return out.sort((a, b) => a.time - b.time).slice(-limit)
      }),
    }
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
      }
      await r.set(store.#key('epoch'), randomUUID(), 'NX')
      store.epoch = (await r.get(store.#key('epoch'))) ?? ''
      if (store.cluster) {
        const copies = await Promise.all(store.#markerKeys.map((k) => r.get(k)))
        // a new prefix: copy the epoch into every block; copies already there (all, or only
        // some: a master lost its data) are left for markers() to report
        if (copies.every((c) => c === null)) await Promise.all(store.#markerKeys.map((k) => r.set(k, store.epoch, 'NX')))
      }
    } catch (e) {
      r.disconnect()
      const last = store.#lastError && store.#lastError.message !== (e as Error).message ? ` (last error: ${store.#lastError.message})` : ''
      throw new StoreError(`cannot connect to Redis${store.cluster ? ' Cluster' : ''}: ${(e as Error).message}${last}`, 'open', { cause: e })
    }
    return store
  }

  /**
   * One server: the epoch key. Cluster: the epoch key and its 256 copies, read from every master
   * that holds one; unless all are present and equal the epoch reads as missing (lost), so a
   * master that came back empty, or a replica promoted without the data, shows as a loss.
   */
  async markers(): Promise<StateMarkers> {
    return this.#run('markers', async () => {
      if (!this.cluster) {
        const [epoch, accepted] = await this.#redis.mget(this.#key('epoch'), this.#key('accepted'))
        return { epoch: epoch ?? undefined, accepted: accepted ?? undefined }
      }
      const [epoch, accepted, ...copies] = await Promise.all([this.#key('epoch'), this.#key('accepted'), ...this.#markerKeys].map((k) => this.#redis.get(k)))
      const whole = epoch !== null && copies.every((c) => c === epoch)
      return { epoch: whole ? epoch : undefined, accepted: accepted ?? undefined }
    })
  }

  /**
   * One server: writes a new epoch when none is left. Cluster: keeps the epoch when it and every
   * copy are intact, else writes a new one to the epoch key and every copy. Then marks it accepted.
   */
  async acceptLoss(): Promise<string> {
    return this.#run('accept_loss', async () => {
      const r = this.#redis
      let epoch: string
      if (!this.cluster) {
        await r.set(this.#key('epoch'), randomUUID(), 'NX')
        epoch = (await r.get(this.#key('epoch')))!
      } else {
        const [current, ...copies] = await Promise.all([this.#key('epoch'), ...this.#markerKeys].map((k) => r.get(k)))
        if (current !== null && copies.every((c) => c === current)) {
          epoch = current
        } else {
          epoch = randomUUID()
          await Promise.all([this.#key('epoch'), ...this.#markerKeys].map((k) => r.set(k, epoch)))
        }
      }
      await r.set(this.#key('accepted'), epoch)
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
      if (e instanceof StoreError) throw e
      const why = this.#redis.status === 'ready' ? (e as Error).message : `not connected (${this.#lastError?.message ?? this.#redis.status})`
      throw new StoreError(`redis ${op}: ${why}`, op, { cause: e })
    }
  }

  // -------------------------------------------------------------- writes and their WAIT

  /**
   * Runs `s` on the master of `key`'s slot. Without `replicas` through the client's own routing;
   * with them on a known connection (one server: the one; cluster: the slot master's, following
   * MOVED and ASK here), then — when `durable(result)` — WAIT on that same connection.
   * @throws ReplicaShortfall when fewer replicas acknowledged; `result` is then what the script did
   */
  async #write<T>(op: string, s: Script, keys: string[], args: (string | Buffer)[], buffer: boolean, durable: (r: T) => boolean): Promise<T> {
    if (this.#replicas === 0) return this.#call<T>(s, keys, args, buffer)
    const { conn, result } = await this.#send<T>(s, keys, args, buffer)
    if (durable(result)) await this.#acked(op, conn, result)
    return result
  }

  /** Sends a write on a known connection (see #write); resolves with the connection and the script's answer. */
  async #send<T>(s: Script, keys: string[], args: (string | Buffer)[], buffer: boolean): Promise<{ conn: Redis | Cluster; result: T }> {
    if (this.cluster) return this.#onMaster<T>(s, keys, args, buffer)
    return { conn: this.#redis, result: await this.#call<T>(s, keys, args, buffer) }
  }

  /**
   * Resolves once `replicas` replicas acknowledged every write made on `conn` so far.
   * @throws ReplicaShortfall (carrying `result`, what the write did) when fewer did in time
   */
  async #acked(op: string, conn: Redis | Cluster, result: unknown): Promise<void> {
    let waiter = this.#waiters.get(conn)
    if (!waiter) this.#waiters.set(conn, waiter = new Waiter(conn, this.#replicas, this.#replicasTimeoutMs))
    const node = conn instanceof Redis && this.cluster ? `${conn.options.host}:${conn.options.port}` : undefined
    let acked: number
    try {
      acked = await waiter.acked()
    } catch (cause) {
      // the connection failed under the WAIT (a master that died): not acknowledged either
      const e = new ReplicaShortfall(op, 0, this.#replicas, this.#replicasTimeoutMs, node, cause as Error)
      e.result = result
      throw e
    }
    if (acked < this.#replicas) {
      const e = new ReplicaShortfall(op, acked, this.#replicas, this.#replicasTimeoutMs, node)
      e.result = result
      throw e
    }
  }

  /** A script through the client's own routing (defineCommand: EVALSHA, EVAL after NOSCRIPT). */
  #call<T>(s: Script, keys: string[], args: (string | Buffer)[], buffer: boolean): Promise<T> {
    const r = this.#redis as unknown as Record<string, (...a: (string | Buffer)[]) => Promise<T>>
    return r[buffer ? `${s.name}Buffer` : s.name](...keys, ...args)
  }

  /**
   * Cluster: runs `s` on the connection of the master that serves its keys' slot, so that a WAIT
   * sent after it on that connection covers it. Follows MOVED (refreshing the slot map) and ASK
   * (ASKING on the importing master); retries every 100 ms after the transient errors of a
   * failover, up to 16 tries or `commandTimeoutMs`, like the client's own routing.
   */
  async #onMaster<T>(s: Script, keys: string[], args: (string | Buffer)[], buffer: boolean): Promise<{ conn: Redis; result: T }> {
    const cluster = this.#redis as Cluster
    const slot = keySlot(keys[0])
    const deadline = Date.now() + this.#commandTimeoutMs
    let target: string | undefined
    let asking = false
    let last: Error = new Error(`no master known for slot ${slot}`)
    for (let attempt = 0; attempt < 16 && Date.now() < deadline; attempt++) {
      const nodeKey = target ?? cluster.slots[slot]?.[0]
      const conn = nodeKey === undefined ? undefined : cluster.nodes('master').concat(cluster.nodes('slave')).find((n) => `${n.options.host}:${n.options.port}` === nodeKey)
      if (!conn) {
        await new Promise<void>((ok) => cluster.refreshSlotsCache(() => ok()))
        if (attempt > 0) await sleep(100)
        target = undefined
        continue
      }
      try {
        return { conn, result: await evalOn<T>(conn, s, keys, args, buffer, asking) }
      } catch (e) {
        last = e as Error
        const msg = last.message
        const moved = /^(MOVED|ASK) (\d+) (\S+)/.exec(msg)
        if (moved) {
          asking = moved[1] === 'ASK'
          target = moved[3]
          if (!asking) cluster.refreshSlotsCache()
          continue
        }
        if (!TRANSIENT.test(msg)) throw last
        target = undefined
        asking = false
        cluster.refreshSlotsCache()
        await sleep(100)
      }
    }
    throw last
  }

  // -------------------------------------------------------------- operations

  fence(resource: string, token: bigint, now = Date.now()): Promise<FenceResult> {
    return this.#run('fence', async () => {
      const r = await this.#write<FenceReply>('fence', SCRIPTS.fgFence, this.#fenceKeys(resource), [token.toString(), this.#replicas ? '1' : '0', String(now)], false, (x) => Number(x[0]) === 1)
      return fenceReply(r)
    })
  }

  /** The mark's key and its since key (one hash tag: one slot). */
  #fenceKeys(resource: string): [string, string] {
    const k = this.#key('f', resource)
    return [k, `${k}s`]
  }

  highest(resource: string): Promise<bigint | undefined> {
    return this.#run('highest', async () => {
      const v = await this.#redis.get(this.#key('f', resource))
      return v === null ? undefined : BigInt(v)
    })
  }

  /** One MGET (both keys in one slot); a since written for another mark is not this mark's. */
  mark(resource: string): Promise<FenceMark | undefined> {
    return this.#run('mark', async () => {
      const [v, s] = await this.#redis.mget(...this.#fenceKeys(resource))
      if (v === null) return undefined
      const sp = s?.indexOf(' ') ?? -1
      return sp > 0 && s!.slice(0, sp) === v ? { highest: BigInt(v), since: Number(s!.slice(sp + 1)) } : { highest: BigInt(v) }
    })
  }

  claim(key: RecordKey, req: ClaimRequest, now: number): Promise<ClaimResult> {
    return this.#run('claim', () => this.#claim('claim', key, req, now))
  }

  /** CLAIM, waited for when it claimed; a claim the replicas did not acknowledge is given back. */
  async #claim(op: string, key: RecordKey, req: ClaimRequest, now: number): Promise<ClaimResult> {
    try {
      return claimReply(await this.#write<Buffer[]>(op, SCRIPTS.fgClaim, [this.#recordKey(key)], claimArgs(req, now), true, (r) => r[0].toString() === 'claimed'))
    } catch (e) {
      if (e instanceof ReplicaShortfall) await this.#giveBack(key, req, now, claimReply(e.result as Buffer[]))
      throw e
    }
  }

  /**
   * One server: FENCE and CLAIM in one script, one round trip (see ADMIT). Cluster: FENCE, then
   * CLAIM when it accepted (two slots); with replicas the fence's WAIT runs alongside the claim.
   * The WAIT counts only when the key was claimed: a replay or a refusal forwards nothing.
   */
  admit(fence: FenceRequest, key: RecordKey, req: ClaimRequest, now: number): Promise<AdmitResult> {
    return this.#run('admit', async () => {
      if (!this.cluster) {
        try {
          const [fenceKey, sinceKey] = this.#fenceKeys(fence.resource)
          const r = await this.#write<[number, Buffer, Buffer, number, ...Buffer[]]>('admit', SCRIPTS.fgAdmit, [fenceKey, this.#recordKey(key), sinceKey], [fence.token.toString(), ...claimArgs(req, now)], true,
            (x) => Number(x[0]) === 1 && x[4].toString() === 'claimed')
          const result = fenceReply([r[0], r[1], r[2], r[3]])
          return result.accepted ? { fence: result, claim: claimReply(r.slice(4) as Buffer[]) } : { fence: result }
        } catch (e) {
          if (e instanceof ReplicaShortfall) {
            const x = e.result as Buffer[]
            if (Number(x[0]) === 1) await this.#giveBack(key, req, now, claimReply(x.slice(4)))
          }
          throw e
        }
      }
      const sent = this.#replicas
        ? await this.#send<FenceReply>(SCRIPTS.fgFence, this.#fenceKeys(fence.resource), [fence.token.toString(), '1', String(now)], false)
        : { conn: this.#redis, result: await this.#call<FenceReply>(SCRIPTS.fgFence, this.#fenceKeys(fence.resource), [fence.token.toString(), '0', String(now)], false) }
      const fenced = fenceReply(sent.result)
      if (!fenced.accepted) return { fence: fenced }
      const fenceAcked = this.#replicas ? this.#acked('admit', sent.conn, sent.result) : undefined
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
    const k = this.#recordKey(key)
    await (claimed.after
      ? this.#call(SCRIPTS.fgFinish, [k], [req.claimId, 'unknown', String(now + req.ttlMs), String(Math.max(1, req.ttlMs)), '', '', '', claimed.after], false)
      : this.#call(SCRIPTS.fgRelease, [k], [req.claimId], false)).catch(() => { /* the lease ends it: an unknown outcome (crash) */ })
  }

  finish(key: RecordKey, claimId: string, done: Completion, ttlMs: number, now: number): Promise<void> {
    return this.#run('finish', async () => {
      const status = done.kind === 'completed' ? String(done.response.status) : done.kind === 'not_stored' ? String(done.status) : ''
      await this.#write<number>('finish', SCRIPTS.fgFinish, [this.#recordKey(key)], [claimId, done.kind, String(now + ttlMs), String(Math.max(1, ttlMs)), status,
        done.kind === 'completed' ? JSON.stringify(done.response.headers) : '',
        done.kind === 'completed' ? done.response.body : '',
        done.kind === 'unknown' ? done.reason : ''], false, (n) => Number(n) === 1)
    })
  }

  /** No WAIT: a renewal lost in a failover only ends the lease sooner (an unknown outcome, reason crash). */
  renew(key: RecordKey, claimId: string, leaseMs: number, now: number): Promise<boolean> {
    return this.#run('renew', async () => (await this.#redis.fgRenew(this.#recordKey(key), claimId, String(now + leaseMs))) === 1)
  }

  release(key: RecordKey, claimId: string): Promise<void> {
    return this.#run('release', async () => {
      await this.#write<number>('release', SCRIPTS.fgRelease, [this.#recordKey(key)], [claimId], false, (n) => Number(n) === 1)
    })
  }

  resolve(key: RecordKey, as: Resolution, ttlMs: number, now: number): Promise<ResolveResult> {
    return this.#run('resolve', async () => {
      const r = (await this.#write<(string | Buffer)[]>('resolve', SCRIPTS.fgResolve, [this.#recordKey(key)], [as, String(now), String(now + ttlMs), String(Math.max(1, ttlMs))], false,
        (x) => x[0].toString() === 'resolved')).map(String)
      switch (r[0]) {
        case 'resolved': return { kind: 'resolved', reason: asReason(r[1]) }
        case 'not_found': return { kind: 'not_found' }
        case 'refused': return { kind: 'refused', state: r[1] as 'in_flight' | 'completed' | 'not_stored' }
        default: throw new Error(`resolve script answered ${r[0]}`)
      }
    })
  }

  /**
   * SCANs the prefix's record keys (COUNT 1000 a step) — on a cluster on every master, after
   * checking that every slot has one — and reads each one's state (pipelined): O(records) on
   * the servers, so the gauge reads it at most every 15 s.
   */
  unknowns(now: number, options: { route?: string; limit?: number } = {}): Promise<UnknownRecord[]> {
    const { route, limit = 1000 } = options
    return this.#run('unknowns', async () => {
      const head = `{${this.#prefix}:r:`
      const glob = (s: string) => s.replace(/[*?[\]\\]/g, (c) => `\\${c}`)
      const match = `${glob(head)}${route !== undefined ? `${glob(part(route))}:` : ''}*`
      const out: UnknownRecord[] = []
      const seen = new Set<string>()
      const read = async (keys: string[]) => {
        const fresh = keys.filter((k) => !seen.has(k))
        for (const k of fresh) seen.add(k)
        if (!fresh.length) return
        const replies = await Promise.all(fresh.map((k) => this.#redis.hmget(k, 'state', 'lease', 'exp', 'reason')))
        for (let i = 0; i < fresh.length && out.length < limit; i++) {
          const [state, lease, exp, reason] = replies[i]
          const leaseUntil = Number(lease ?? 0), expiresAt = Number(exp ?? 0)
          if (expiresAt <= now) continue
          const crashed = state === 'in_flight' && leaseUntil <= now
          if (state !== 'unknown' && !crashed) continue
          const [r, scope, key] = fresh[i].slice(head.length, -1).split(':').map(unpart)
          out.push({ key: { route: r, scope, key }, reason: crashed ? 'crash' : asReason(reason), leaseUntil, expiresAt })
        }
      }
      for (const node of this.#scanNodes()) {
        let cursor = '0'
        do {
          const [next, keys] = await node.scan(cursor, 'MATCH', match, 'COUNT', 1000)
          cursor = next
          await read(keys)
        } while (cursor !== '0' && out.length < limit)
        if (out.length >= limit) break
      }
      return out
    })
  }

  /**
   * The connections to SCAN: the one server, or every master of the cluster. Throws when a slot
   * has no master the client knows of: a list missing a master's records must not read as complete.
   */
  #scanNodes(): (Redis | Cluster)[] {
    if (!this.cluster) return [this.#redis]
    const cluster = this.#redis as Cluster
    const masters = cluster.nodes('master')
    const known = new Set(masters.map((n) => `${n.options.host}:${n.options.port}`))
    for (let s = 0; s < SLOTS; s++) {
      const k = cluster.slots[s]?.[0]
      if (k === undefined || !known.has(k)) throw new Error(`slot ${s} has no master reachable now`)
    }
    return masters
  }

  /**
   * Appends a batch to one stream (cluster: the next of 16, in turn, and when its master fails,
   * the one half the slot space away, on another master). Entries older than the retention are
   * trimmed (XTRIM MINID ~, by the stream's ms ids).
   */
  #auditAppend(batch: readonly AuditEntry[]): Promise<void> {
    return this.#run('audit_append', async () => {
      if (!batch.length) return
      const minId = String(Math.max(0, Date.now() - this.#auditRetentionMs))
      const entries = batch.map((e) => JSON.stringify(e))
      const n = this.#auditKeys.length
      const i = this.#auditNext++ % n
      try {
        await this.#redis.fgAudit(this.#auditKeys[i], minId, ...entries)
      } catch (e) {
        if (n === 1) throw e
        await this.#redis.fgAudit(this.#auditKeys[(i + n / 2) % n], minId, ...entries)
      }
    })
  }

  /**
   * Reads the streams from a minute before `since` (their ids are Redis's clock, the entries'
   * times the gateways'), 1000 entries at a time, and aggregates by the entries' own times.
   */
  #auditQuery(since: number, until: number, route?: string): Promise<AuditCounts[]> {
    return this.#run('audit_query', async () => {
      const entries: AuditEntry[] = []
      await this.#auditScan(since, (e) => entries.push(e))
      return aggregate(entries, since, until, route)
    })
  }

  /** Every entry of every stream from a minute before `since`, 1000 a page; a stream that cannot be read fails the whole read. */
  async #auditScan(since: number, each: (e: AuditEntry) => void): Promise<void> {
    await Promise.all(this.#auditKeys.map(async (key) => {
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
    }))
  }

  // ------------------------------------------------- fencing.serialize: store (registrations)

  /** The hash of `resource`'s registrations: the mark's hash tag, so one slot with it. */
  #registrationsKey(resource: string): string {
    return `${this.#key('f', resource)}w`
  }

  /** REGISTER (see there); with `replicas`, a registration counts once they have it too. */
  register(resource: string, token: bigint, id: string, deadline: number, now: number): Promise<Registration> {
    return this.#run('register', async () => {
      const r = await this.#write<[number, string, number]>('register', SCRIPTS.fgRegister, [this.#key('f', resource), this.#registrationsKey(resource)],
        [token.toString(), id, String(deadline), String(now)], false, (x) => Number(x[0]) === 1)
      if (Number(r[0]) !== 1) return { registered: false, highest: BigInt(String(r[1])) }
      const oldest = String(r[1])
      return oldest === '' ? { registered: true, until: 0 } : { registered: true, oldest: BigInt(oldest), until: Number(r[2]) }
    })
  }

  /** One HGETALL, read here. */
  olderRegistered(resource: string, token: bigint, now: number): Promise<OlderWrites> {
    return this.#run('older_registered', async () => {
      const all = await this.#redis.hgetall(this.#registrationsKey(resource))
      const writes: Registered[] = []
      for (const v of Object.values(all)) {
        const sp = v.indexOf(' ')
        if (sp > 0) writes.push({ token: BigInt(v.slice(0, sp)), deadline: Number(v.slice(sp + 1)) })
      }
      return olderOf(writes, token, now)
    })
  }

  /** A hold (`until`) is waited for like a registration; a deletion is not (one lost in a failover only holds until its deadline). */
  unregister(resource: string, id: string, until = 0): Promise<void> {
    return this.#run('unregister', async () => {
      await this.#write<number>('unregister', SCRIPTS.fgUnregister, [this.#registrationsKey(resource)], [id, String(Math.max(0, Math.floor(until))), String(Date.now())], false,
        (n) => until > 0 && Number(n) === 1)
    })
  }

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
      await Promise.all(this.#scanNodes().map((n) => n.ping()))
    })
  }

  async close(): Promise<void> {
    if (this.#closed) return
    this.#closed = true
    await this.#redis.quit().catch(() => this.#redis.disconnect())
  }
}

/**
 * Runs a script on one node connection: EVALSHA, EVAL after NOSCRIPT; after an ASK, as
 * `ASKING` + EVAL in one pipeline (ASKING holds for the next command only).
 */
async function evalOn<T>(conn: Redis, s: Script, keys: string[], args: (string | Buffer)[], buffer: boolean, asking: boolean): Promise<T> {
  const call = (cmd: 'EVALSHA' | 'EVAL') => {
    const a = [cmd === 'EVALSHA' ? s.sha : s.lua, String(keys.length), ...keys, ...args]
    return (buffer ? conn.callBuffer(cmd, a) : conn.call(cmd, a)) as Promise<T>
  }
  if (asking) {
    const p = conn.pipeline().asking()
    const a = [s.lua, String(keys.length), ...keys, ...args]
    if (buffer) p.callBuffer('EVAL', a)
    else p.call('EVAL', a)
    const replies = (await p.exec()) ?? []
    const [err, value] = replies[1] ?? [new Error('no reply to EVAL after ASKING')]
    if (err) throw err
    return value as T
  }
  try {
    return await call('EVALSHA')
  } catch (e) {
    if (!(e as Error).message.startsWith('NOSCRIPT')) throw e
    return call('EVAL')
  }
}
