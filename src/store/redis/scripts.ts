/**
 * The Lua scripts of the Redis store, as text (the build is plain `tsc`, which copies no .lua
 * file), and how their answers map onto the `Store` results (../replies.ts decodes them).
 *
 * Every operation that reads and then writes is one script, so Redis runs it atomically: no
 * other command (from this or another gateway) runs between its check and its write. They
 * implement the table of ../record-state.ts exactly; the conformance suite holds them to it.
 * Each gateway runs its own text by SHA, so gateways of several versions may share one Redis:
 * what a script answers may change between versions, what it stores may not.
 *
 * Tokens go to Lua as decimal strings and are compared by length, then byte by byte: Lua
 * numbers are doubles and would round above 2^53. Times are epoch ms: doubles hold them exactly.
 *
 * Clock: every instant a guarantee depends on — a lease's start and end, a record's expiry, a
 * registration's deadline, a mark's `since` — is read inside the script, from the server's
 * `TIME`, so gateways whose clocks disagree still agree on when a lease ends (as Redis's own key
 * expiry does). Callers pass durations; the one argument `now` is '' except for tests that drive
 * time themselves (the store's `clock: 'caller'`). Redis 5+ replicates a script by its effects,
 * so `TIME` followed by writes is allowed.
 *
 * A Lua runtime error (a key of another type, a command the ACL user may not run, a malformed
 * field) stops a script but does not undo what it wrote before it. CLAIM makes every read and
 * check before its first write, so ADMIT whose claim step fails holds no claim, and what its
 * FENCE wrote stands, as after a lone FENCE (the store's `admit` says why).
 */
import { createHash } from 'node:crypto'
import { claimResult, fenceResult, releaseResult } from '../shared/replies.js'
import type { ClaimRequest, ClaimResult, FenceResult, ReleaseResult } from '../contract/store.js'

// Lua: the instant of this script, epoch ms: the caller's \`now\` when it passes one (tests), else
// the server's TIME. Written out with %.0f: tostring would switch to exponent notation.
const NOW = `local function clock(given)
  if given and given ~= '' then return tonumber(given) end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function ms(x) return string.format('%.0f', x) end
`

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

// Lua: the index of unsettled records (one server, ./unknowns.ts): \`ix\` is its key, nil on a
// cluster (there it cannot share a record's slot). A record is in it, scored by its \`exp\`, from
// its claim until it is completed, not stored, released or resolved; an unknown one stays.
const INDEX = `local function unsettled(ix, k, exp) if ix then redis.call('ZADD', ix, exp, k) end end
local function settled(ix, k) if ix then redis.call('ZREM', ix, k) end end
`

// KEYS[1] = fence key, KEYS[2] = its since key; ARGV[1] = token (canonical decimal), ARGV[2] =
// '1': rewrite an equal mark (a write, so that a WAIT after it covers the mark), ARGV[3] = now
// ('' : the server's clock). Returns {accepted 0|1, highest, since ('' when unknown), raised 0|1}.
const FENCE = `
${DECIMAL_LT}${NOW}local function since(mark)
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
local now = ms(clock(ARGV[3]))
redis.call('SET', KEYS[1], t)
redis.call('SET', KEYS[2], t .. ' ' .. now)
return {1, t, now, 1}
`

// KEYS[1] = record key, KEYS[2] = the index (one server); ARGV = fingerprint, claimId, leaseMs, ttlMs,
// retry (1|0), now ('' : TIME).
// Answers CLAIM_FIELDS, one a position, '' where the kind has none (abandoned: '1' or '').
// A claim that finds the record in flight under its own claim id is this very call sent again
// (a cluster client resends a command whose connection closed before the reply): it answers as
// the first run did, from `after`/`ab`. Every read and check (HMGET first: a key of another
// type fails there) comes before the first write, so a claim that fails wrote nothing. Memory
// limits cannot split a script's writes: Redis refuses a write that may grow memory only while
// the script has written nothing yet, and never stops it midway (script.c scriptVerifyOOM).
const CLAIM = `
${NOW}${INDEX}local k, ix = KEYS[1], KEYS[2]
local fp, cid, ttl, retry, now = ARGV[1], ARGV[2], ARGV[4], ARGV[5] == '1', clock(ARGV[6])
local leaseUntil, expiresAt = ms(now + tonumber(ARGV[3])), ms(now + tonumber(ttl))
local function answer(a)
  return {a[1], a.after or '', a.abandoned and '1' or '', a.status or '', a.headers or '', a.body or '', a.lease or '', a.reason or ''}
end
local function fresh(after, abandoned)
  redis.call('DEL', k)
  redis.call('HSET', k, 'state', 'in_flight', 'fp', fp, 'cid', cid, 'lease', leaseUntil, 'exp', expiresAt)
  if after then redis.call('HSET', k, 'after', after, 'ab', abandoned) end
  redis.call('PEXPIRE', k, ttl)
  unsettled(ix, k, expiresAt)
end
local r = redis.call('HMGET', k, 'state', 'fp', 'lease', 'exp', 'reason', 'status', 'cid', 'after', 'ab')
local state = r[1]
if not state or tonumber(r[4]) <= now then
  fresh()
  return answer{'claimed'}
end
if state == 'in_flight' and r[7] == cid then
  redis.call('HSET', k, 'cid', cid)
  return answer{'claimed', after = r[8], abandoned = r[8] and r[9] == '1'}
end
if r[2] ~= fp then return answer{'mismatch'} end
if state == 'completed' then
  local resp = redis.call('HMGET', k, 'headers', 'body')
  return answer{'completed', status = r[6], headers = resp[1], body = resp[2]}
end
if state == 'not_stored' then return answer{'not_stored', status = r[6] or '0'} end
if state == 'in_flight' then
  if tonumber(r[3]) > now then return answer{'in_flight', lease = r[3]} end
  if retry then
    fresh('crash', '1')
    return answer{'claimed', after = 'crash', abandoned = true}
  end
  redis.call('HSET', k, 'state', 'unknown', 'reason', 'crash')
  -- already indexed when a gateway that keeps the index claimed it; else from now on
  unsettled(ix, k, r[4])
  return answer{'unknown', reason = 'crash', abandoned = true}
end
local reason = r[5] or 'crash'
if retry then
  fresh(reason, '0')
  return answer{'claimed', after = reason}
end
return answer{'unknown', reason = reason}
`

// KEYS[1] = fence key, KEYS[2] = record key, KEYS[3] = the fence's since key, KEYS[4] = the index
// of unsettled records; ARGV[1] = token,
// ARGV[2..7] = CLAIM's ARGV (ARGV[7] is now, '' for TIME, also for the since of a mark FENCE raises).
// FENCE, and CLAIM only when it accepts. Answers FENCE's four fields, then — when it accepted —
// CLAIM's. Its two keys hash to two cluster slots: one Redis (with replicas) runs it; on a
// cluster the store runs FENCE and CLAIM in turn instead. When CLAIM fails (a runtime error)
// the script fails, and what FENCE wrote stands, as after a lone FENCE: CLAIM fails before it
// writes (see there), so no claim is held.
const ADMIT = `
local function fence(KEYS, ARGV)
${FENCE}
end
local function claim(KEYS, ARGV)
${CLAIM}
end
local f = fence({KEYS[1], KEYS[3]}, {ARGV[1], '0', ARGV[7]})
if f[1] == 0 then return f end
local c = claim({KEYS[2], KEYS[4]}, {ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7]})
for i = 4, 1, -1 do table.insert(c, 1, f[i]) end
return c
`

// KEYS[1] = record key, KEYS[2] = the index (one server); ARGV = claimId, state, now ('' : TIME),
// ttlMs, status, headers, body, reason. Writes only while the record is in flight under claimId.
// Returns 1 when written.
const FINISH = `
${NOW}${INDEX}local k, ix = KEYS[1], KEYS[2]
local r = redis.call('HMGET', k, 'state', 'cid', 'fp')
if r[1] ~= 'in_flight' or r[2] ~= ARGV[1] then return 0 end
local exp = ms(clock(ARGV[3]) + tonumber(ARGV[4]))
redis.call('DEL', k)
redis.call('HSET', k, 'state', ARGV[2], 'fp', r[3], 'cid', ARGV[1], 'lease', '0', 'exp', exp)
if ARGV[2] == 'completed' then
  redis.call('HSET', k, 'status', ARGV[5], 'headers', ARGV[6], 'body', ARGV[7])
  settled(ix, k)
elseif ARGV[2] == 'not_stored' then
  redis.call('HSET', k, 'status', ARGV[5])
  settled(ix, k)
else
  redis.call('HSET', k, 'reason', ARGV[8])
  unsettled(ix, k, exp)
end
redis.call('PEXPIRE', k, ARGV[4])
return 1
`

// KEYS[1] = record key; ARGV = claimId, leaseMs, now ('' : TIME). 1 when renewed, 0 when no longer held.
// Only the lease changes: the record stays in the index of unsettled records as it is.
const RENEW = `
${NOW}local r = redis.call('HMGET', KEYS[1], 'state', 'cid')
if r[1] == 'in_flight' and r[2] == ARGV[1] then
  redis.call('HSET', KEYS[1], 'lease', ms(clock(ARGV[3]) + tonumber(ARGV[2])))
  return 1
end
return 0
`

// KEYS[1] = record key, KEYS[2] = the index (one server); ARGV[1] = claimId. Gives the claim back (../record-state.ts
// decideRelease): while the record is in flight under claimId, or is the unknown outcome (reason
// crash) that claim's own lapsed lease made — CLAIM keeps cid, lease and after then; FINISH and
// this script write lease 0 — it deletes the record, or puts back the unknown outcome the claim
// took over (`after`), keeping the key's expiry. Returns {released|restored|not_held, '1' when
// it undid a lapsed lease, else ''}.
const RELEASE = `
${INDEX}local k, ix = KEYS[1], KEYS[2]
local r = redis.call('HMGET', k, 'state', 'cid', 'after', 'lease', 'reason', 'exp')
if r[2] ~= ARGV[1] then return {'not_held', ''} end
local lapsed = r[1] == 'unknown' and (r[5] or 'crash') == 'crash' and tonumber(r[4] or '0') > 0
if r[1] ~= 'in_flight' and not lapsed then return {'not_held', ''} end
local l = lapsed and '1' or ''
if not r[3] then
  redis.call('DEL', k)
  settled(ix, k)
  return {'released', l}
end
redis.call('HSET', k, 'state', 'unknown', 'reason', r[3], 'lease', '0')
redis.call('HDEL', k, 'after', 'ab')
unsettled(ix, k, r[6] or '0')
return {'restored', l}
`

// KEYS[1] = record key, KEYS[2] = the index (one server); ARGV = as (completed|failed), now
// ('' : TIME), ttlMs. Returns {'resolved', reason} | {'not_found'} | {'refused', state}.
const RESOLVE = `
${NOW}${INDEX}local k, ix = KEYS[1], KEYS[2]
local now = clock(ARGV[2])
local r = redis.call('HMGET', k, 'state', 'lease', 'exp', 'reason', 'fp', 'cid')
local state = r[1]
if not state or tonumber(r[3]) <= now then return {'not_found'} end
local reason
if state == 'unknown' then reason = r[4] or 'crash'
elseif state == 'in_flight' and tonumber(r[2]) <= now then reason = 'crash'
else return {'refused', state} end
redis.call('DEL', k)
settled(ix, k)
if ARGV[1] == 'completed' then
  redis.call('HSET', k, 'state', 'not_stored', 'fp', r[5], 'cid', r[6], 'lease', '0', 'exp', ms(now + tonumber(ARGV[3])), 'status', '0')
  redis.call('PEXPIRE', k, ARGV[3])
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
// resource's registrations (same hash tag: one slot); ARGV = token, id, holdMs (the deadline,
// from now), now ('' : TIME).
// Registers `id` unless the mark is above the token — read in the same script, so no fence runs
// between the read and the write — deletes the expired registrations it comes across, and
// answers {1, lowest older token ('' none), latest deadline of the older ones (0 none)} or
// {0, highest}. Safe to run twice (the same id is written again).
const REGISTER = `
${DECIMAL_LT}${NOW}local t, now = ARGV[1], clock(ARGV[4])
local cur = redis.call('GET', KEYS[1])
if cur and lt(t, cur) then return {0, cur} end
redis.call('HSET', KEYS[2], ARGV[2], t .. ' ' .. ms(now + tonumber(ARGV[3])))
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
return {1, oldest or '', ms(untl)}
`

// KEYS[1] = the resource's registrations; ARGV = token, now ('' : TIME). Reads only: the lowest
// token below the given one whose deadline has not passed ('' none) and the latest such deadline (0 none).
const OLDER = `
${DECIMAL_LT}${NOW}local t, now = ARGV[1], clock(ARGV[2])
local all = redis.call('HGETALL', KEYS[1])
local oldest, untl = false, 0
for i = 1, #all, 2 do
  local v = all[i + 1]
  local sp = string.find(v, ' ', 1, true)
  if sp then
    local tok, dl = string.sub(v, 1, sp - 1), tonumber(string.sub(v, sp + 1))
    if dl > now and lt(tok, t) then
      if not oldest or lt(tok, oldest) then oldest = tok end
      if dl > untl then untl = dl end
    end
  end
end
return {oldest or '', ms(untl)}
`

// KEYS[1] = the resource's registrations; ARGV = id, holdMs ('0': delete), now ('' : TIME).
// Deletes the registration, or keeps it until holdMs from now. Returns 1 when it was there.
const UNREGISTER = `
${NOW}local v = redis.call('HGET', KEYS[1], ARGV[1])
if not v then return 0 end
if ARGV[2] == '0' then
  redis.call('HDEL', KEYS[1], ARGV[1])
  return 1
end
local sp = string.find(v, ' ', 1, true)
redis.call('HSET', KEYS[1], ARGV[1], string.sub(v, 1, sp - 1) .. ' ' .. ms(clock(ARGV[3]) + tonumber(ARGV[2])))
local want = math.floor(tonumber(ARGV[2])) + 60000
if want > 0 and redis.call('PTTL', KEYS[1]) < want then redis.call('PEXPIRE', KEYS[1], want) end
return 1
`

// KEYS[1] = the index of unsettled records, KEYS[2..] = record keys as SCAN found them (one
// server). Puts each one in flight or unknown into the index, scored by its expiry: read and
// written in one script, so no claim or finish of the same record runs in between. Returns how
// many it put in. Sent by ./unknowns.ts with EVALSHA (EVAL after NOSCRIPT), as many keys as a step.
const REINDEX = `
local n = 0
for i = 2, #KEYS do
  local r = redis.call('HMGET', KEYS[i], 'state', 'exp')
  if (r[1] == 'in_flight' or r[1] == 'unknown') and r[2] then
    redis.call('ZADD', KEYS[1], r[2], KEYS[i])
    n = n + 1
  end
end
return n
`

/**
 * A script: `name` names it (its SEQUENCED form on one server; the attempt log's is an ioredis
 * command by that name), `keys` how many of its arguments are keys on a cluster, `indexed` when
 * one server adds the index of unsettled records after them (KeyNames.recordKeys); `sha` is what
 * EVALSHA names it by (./connection.ts `callScript`, EVAL after NOSCRIPT).
 */
export interface Script { name: string; lua: string; sha: string; keys: number; indexed?: boolean }
const script = (name: string, lua: string, keys: number, indexed = false): Script =>
  ({ name, lua, keys, sha: createHash('sha1').update(lua).digest('hex'), ...(indexed ? { indexed } : {}) })

/** The rebuild of the index of unsettled records (REINDEX above): not an ioredis command, its key count varies. */
export const REINDEX_SCRIPT = script('fgReindex', REINDEX, 0)

// The write sequence (../sequence.ts), one server only (on a cluster a script reaches one slot):
// KEYS gets the sequence key and then the index's write count ({…:unsettled}n) last, ARGV the
// highest sequence the gateway has seen last ('' when none). A store whose sequence is below it
// answers the error `FGBACK <its sequence>` before the script writes anything; else the script
// runs on the other keys and arguments, the sequence and the write count are advanced, and the
// answer is {sequence, the script's own answer}. The sequence minus the count is then the writes
// of gateways that keep no index of unsettled records (an older version: ./unknowns.ts).
const sequenced = (lua: string): string => `
local seqKey, ixWrites, seen = KEYS[#KEYS - 1], KEYS[#KEYS], ARGV[#ARGV]
local cur = tonumber(redis.call('GET', seqKey) or '0')
if seen ~= '' and cur < tonumber(seen) then return redis.error_reply('FGBACK ' .. cur) end
local function body(KEYS, ARGV)
${lua}
end
local keys, argv = {}, {}
for i = 1, #KEYS - 2 do keys[i] = KEYS[i] end
for i = 1, #ARGV - 1 do argv[i] = ARGV[i] end
local r = body(keys, argv)
redis.call('INCR', ixWrites)
return {redis.call('INCR', seqKey), r}
`

/** Every script of the store, by its command name. */
export const SCRIPTS = {
  fgFence: script('fgFence', FENCE, 2),
  fgClaim: script('fgClaim', CLAIM, 1, true),
  fgAdmit: script('fgAdmit', ADMIT, 4),
  fgFinish: script('fgFinish', FINISH, 1, true),
  fgRelease: script('fgRelease', RELEASE, 1, true),
  fgRenew: script('fgRenew', RENEW, 1),
  fgResolve: script('fgResolve', RESOLVE, 1, true),
  fgAudit: script('fgAudit', AUDIT, 1),
  fgRegister: script('fgRegister', REGISTER, 2),
  fgOlder: script('fgOlder', OLDER, 1),
  fgUnregister: script('fgUnregister', UNREGISTER, 1),
} as const

/** Scripts that write nothing the guarantees rest on: no write sequence around them. */
const UNSEQUENCED = new Set(['fgAudit', 'fgOlder'])

/**
 * The scripts of one server: each of SCRIPTS but the attempt log's and the reads, under the same
 * name, with the write sequence around it (`sequenced`); the record scripts also take the index
 * of unsettled records.
 */
export const SEQUENCED: typeof SCRIPTS = Object.fromEntries(Object.entries(SCRIPTS).map(([name, s]) =>
  [name, UNSEQUENCED.has(name) ? s : script(s.name, sequenced(s.lua), s.keys + (s.indexed ? 1 : 0) + 2)])) as unknown as typeof SCRIPTS

/** A sequenced script's answer: the store's sequence after it, and the script's own answer. */
export type SequencedReply<T> = [number | string | Buffer, T]

// ------------------------------------------------------------------ arguments and answers

/** CLAIM's ARGV (ADMIT's ARGV[2..7]); `now` '' for the server's clock. */
export const claimArgs = (req: ClaimRequest, now: string): string[] => [
  req.fingerprint, req.claimId, String(Math.max(0, Math.round(req.leaseMs))), String(Math.max(1, Math.round(req.ttlMs))),
  req.retryUnknown ? '1' : '0', now,
]

/** FENCE's answer (ADMIT's first four fields): accepted 0|1, highest, since ('' when unknown), raised 0|1. */
export type FenceReply = [number, string | Buffer, string | Buffer, number]

/** FENCE's answer as a `FenceResult`. */
export const fenceOf = (r: FenceReply): FenceResult =>
  fenceResult({ accepted: Number(r[0]) === 1, highest: r[1].toString(), since: r[2].toString(), raised: Number(r[3]) === 1 })

/**
 * CLAIM's answer (ADMIT's from its fifth field), read as Buffers (a stored body is bytes): kind,
 * after, abandoned, status, headers, body, leaseUntil, reason; '' where the kind has none.
 */
export type ClaimReply = Buffer[]

/** CLAIM's answer as a `ClaimResult`. @throws Error on a kind this version does not know */
export const claimOf = (r: ClaimReply): ClaimResult => {
  const [kind, after, abandoned, status, headers, body, leaseUntil, reason] = r
  return claimResult({
    kind: kind.toString(), after: after.toString(), abandoned: abandoned.length > 0, status: status.toString(),
    headers: headers.length ? headers.toString() : null, body, leaseUntil: leaseUntil.toString(), reason: reason.toString(),
  })
}

/** RELEASE's answer: kind, and '1' when it undid a lapsed lease. */
export type ReleaseReply = (string | Buffer)[]

/** RELEASE's answer as a `ReleaseResult`. @throws Error on a kind this version does not know */
export const releaseOf = (r: ReleaseReply): ReleaseResult => releaseResult(r[0].toString(), r[1]?.toString() === '1')

/** ADMIT's answer: FENCE's fields, then CLAIM's when the fence accepted. */
export type AdmitReply = [...FenceReply, ...ClaimReply]
