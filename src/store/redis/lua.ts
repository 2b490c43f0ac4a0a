/**
 * The Lua scripts of the Redis store, as text (the build is plain `tsc`, which copies no .lua
 * file). ./scripts.ts names them and sends them; ./replies.ts reads their answers.
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

// Lua: the instant of this script, epoch ms: the caller's `now` when it passes one (tests), else
// the server's TIME. Written out with %.0f: tostring would switch to exponent notation.
export const NOW = `local function clock(given)
  if given and given ~= '' then return tonumber(given) end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function ms(x) return string.format('%.0f', x) end
`

// Lua: a < b for canonical decimal strings (tokens up to 2^63-1, beyond Lua's exact numbers):
// the shorter is smaller, then byte by byte. Shared by the scripts that compare tokens.
export const DECIMAL_LT = `local function lt(a, b)
  if #a ~= #b then return #a < #b end
  for i = 1, #a do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x < y end
  end
  return false
end
`

// Lua: the index of unsettled records (one server, ./unknowns.ts): `ix` is its key, nil on a
// cluster (there it cannot share a record's slot). A record is in it, scored by its `exp`, from
// its claim until it is completed, not stored, released or resolved; an unknown one stays.
const INDEX = `local function unsettled(ix, k, exp) if ix then redis.call('ZADD', ix, exp, k) end end
local function settled(ix, k) if ix then redis.call('ZREM', ix, k) end end
`

// KEYS[1] = fence key, KEYS[2] = its since key; ARGV[1] = token (canonical decimal), ARGV[2] =
// '1': rewrite an equal mark (a write, so that a WAIT after it covers the mark), ARGV[3] = now
// ('' : the server's clock). Returns {accepted 0|1, highest, since ('' when unknown), raised 0|1}.
export const FENCE = `
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
// retry (1|0), now ('' : TIME), probe (`idempotency.settle`'s filled probe request, '' or absent:
// none — an older gateway sends six). The record keeps `probe` while in flight or unknown; a
// takeover keeps the probe fields of the outcome it took over (`aprobe`, `aprobes`, `anp`) for
// RELEASE to put back.
// Answers CLAIM_FIELDS, one a position, '' where the kind has none (abandoned: '1' or '').
// A claim that finds the record in flight under its own claim id is this very call sent again
// (a cluster client resends a command whose connection closed before the reply): it answers as
// the first run did, from `after`/`ab`. Every read and check (HMGET first: a key of another
// type fails there) comes before the first write, so a claim that fails wrote nothing. Memory
// limits cannot split a script's writes: Redis refuses a write that may grow memory only while
// the script has written nothing yet, and never stops it midway (script.c scriptVerifyOOM).
export const CLAIM = `
${NOW}${INDEX}local k, ix = KEYS[1], KEYS[2]
local fp, cid, ttl, retry, now, probe = ARGV[1], ARGV[2], ARGV[4], ARGV[5] == '1', clock(ARGV[6]), ARGV[7] or ''
local leaseUntil, expiresAt = ms(now + tonumber(ARGV[3])), ms(now + tonumber(ttl))
local function answer(a)
  return {a[1], a.after or '', a.abandoned and '1' or '', a.status or '', a.headers or '', a.body or '', a.lease or '', a.reason or ''}
end
local r = redis.call('HMGET', k, 'state', 'fp', 'lease', 'exp', 'reason', 'status', 'cid', 'after', 'ab', 'probe', 'probes', 'np')
local function fresh(after, abandoned)
  redis.call('DEL', k)
  redis.call('HSET', k, 'state', 'in_flight', 'fp', fp, 'cid', cid, 'lease', leaseUntil, 'exp', expiresAt)
  if probe ~= '' then redis.call('HSET', k, 'probe', probe) end
  if after then
    redis.call('HSET', k, 'after', after, 'ab', abandoned)
    if r[10] then redis.call('HSET', k, 'aprobe', r[10]) end
    if r[11] then redis.call('HSET', k, 'aprobes', r[11]) end
    if r[12] then redis.call('HSET', k, 'anp', r[12]) end
  end
  redis.call('PEXPIRE', k, ttl)
  unsettled(ix, k, expiresAt)
end
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
// ARGV[2..8] = CLAIM's ARGV (ARGV[7] is now, '' for TIME, also for the since of a mark FENCE raises;
// ARGV[8] the probe).
// FENCE, and CLAIM only when it accepts. Answers FENCE's four fields, then — when it accepted —
// CLAIM's. Its two keys hash to two cluster slots: one Redis (with replicas) runs it; on a
// cluster the store runs FENCE and CLAIM in turn instead. When CLAIM fails (a runtime error)
// the script fails, and what FENCE wrote stands, as after a lone FENCE: CLAIM fails before it
// writes (see there), so no claim is held.
export const ADMIT = `
local function fence(KEYS, ARGV)
${FENCE}
end
local function claim(KEYS, ARGV)
${CLAIM}
end
local f = fence({KEYS[1], KEYS[3]}, {ARGV[1], '0', ARGV[7]})
if f[1] == 0 then return f end
local c = claim({KEYS[2], KEYS[4]}, {ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[8] or ''})
for i = 4, 1, -1 do table.insert(c, 1, f[i]) end
return c
`

// KEYS[1] = record key, KEYS[2] = the index (one server); ARGV = claimId, state, now ('' : TIME),
// ttlMs, status, headers, body, reason, probeInMs ('' or absent: no first probe time). Writes only
// while the record is in flight under claimId. An unknown outcome keeps the claim's probe, and
// with probeInMs its first probe is due (`np`) that long from now. Returns 1 when written.
export const FINISH = `
${NOW}${INDEX}local k, ix = KEYS[1], KEYS[2]
local r = redis.call('HMGET', k, 'state', 'cid', 'fp', 'probe')
if r[1] ~= 'in_flight' or r[2] ~= ARGV[1] then return 0 end
local now = clock(ARGV[3])
local exp = ms(now + tonumber(ARGV[4]))
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
  if r[4] then
    redis.call('HSET', k, 'probe', r[4])
    if ARGV[9] and ARGV[9] ~= '' then redis.call('HSET', k, 'np', ms(now + tonumber(ARGV[9]))) end
  end
  unsettled(ix, k, exp)
end
redis.call('PEXPIRE', k, ARGV[4])
return 1
`

// KEYS[1] = record key; ARGV = claimId, leaseMs, now ('' : TIME). 1 when renewed, 0 when no longer held.
// Only the lease changes: the record stays in the index of unsettled records as it is.
export const RENEW = `
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
// took over (`after`) with its probe fields (`aprobe`, `aprobes`, `anp`), keeping the key's expiry. Returns {released|restored|not_held, '1' when
// it undid a lapsed lease, else ''}.
export const RELEASE = `
${INDEX}local k, ix = KEYS[1], KEYS[2]
local r = redis.call('HMGET', k, 'state', 'cid', 'after', 'lease', 'reason', 'exp', 'aprobe', 'aprobes', 'anp')
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
redis.call('HDEL', k, 'after', 'ab', 'probe', 'probes', 'np', 'aprobe', 'aprobes', 'anp')
if r[7] then redis.call('HSET', k, 'probe', r[7]) end
if r[8] then redis.call('HSET', k, 'probes', r[8]) end
if r[9] then redis.call('HSET', k, 'np', r[9]) end
unsettled(ix, k, r[6] or '0')
return {'restored', l}
`

// KEYS[1] = record key, KEYS[2] = the index (one server); ARGV = as (completed|failed), now
// ('' : TIME), ttlMs. Returns {'resolved', reason} | {'not_found'} | {'refused', state}.
export const RESOLVE = `
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

// `idempotency.settle` (contract §4a). KEYS[1] = record key, KEYS[2] = the index (one server);
// ARGV = seen, afterMs, nextInMs, now ('' : TIME). Takes the next probe (../shared/record-state.ts
// decideTakeProbe): an unknown record holding a probe, or one in flight past its lease (it becomes
// unknown, reason crash, cid and lease kept for its holder's RELEASE), with `seen` probes so far
// and the next due — at `np`, else afterMs past the lapsed lease. Then probes = seen + 1 and the
// next is due nextInMs from now. Returns {'taken', probe, probes, reason, '1' when abandoned else ''}
// or {'not_due'} (nothing written).
export const TAKE_PROBE = `
${NOW}${INDEX}local k, ix = KEYS[1], KEYS[2]
local now = clock(ARGV[4])
local r = redis.call('HMGET', k, 'state', 'lease', 'exp', 'reason', 'probe', 'probes', 'np')
local state = r[1]
if not state or tonumber(r[3]) <= now or not r[5] then return {'not_due'} end
local abandoned = state == 'in_flight'
if abandoned then
  if tonumber(r[2]) > now then return {'not_due'} end
elseif state ~= 'unknown' then return {'not_due'} end
if tonumber(r[6] or '0') ~= tonumber(ARGV[1]) then return {'not_due'} end
local due = r[7] and tonumber(r[7]) or tonumber(r[2] or '0') + tonumber(ARGV[2])
if due > now then return {'not_due'} end
local reason = abandoned and 'crash' or (r[4] or 'crash')
local probes = tostring(tonumber(ARGV[1]) + 1)
redis.call('HSET', k, 'state', 'unknown', 'reason', reason, 'probes', probes, 'np', ms(now + tonumber(ARGV[3])))
-- already indexed when a gateway that keeps the index claimed it; else from now on
unsettled(ix, k, r[3])
return {'taken', r[5], probes, reason, abandoned and '1' or ''}
`

// KEYS[1] = record key, KEYS[2] = the index (one server); ARGV = probes, as (applied|not_applied),
// now ('' : TIME), ttlMs, status, headers, body. Settles the unknown outcome with that probe count
// (../shared/record-state.ts decideSettle): applied, completed with the probe's response for ttlMs;
// not_applied, deleted; either way out of the index. Returns {'settled', reason} or {'moved'}.
export const SETTLE = `
${NOW}${INDEX}local k, ix = KEYS[1], KEYS[2]
local now = clock(ARGV[3])
local r = redis.call('HMGET', k, 'state', 'exp', 'reason', 'probes', 'fp', 'cid')
if r[1] ~= 'unknown' or tonumber(r[2]) <= now or tonumber(r[4] or '0') ~= tonumber(ARGV[1]) then return {'moved'} end
redis.call('DEL', k)
settled(ix, k)
if ARGV[2] == 'applied' then
  redis.call('HSET', k, 'state', 'completed', 'fp', r[5], 'cid', r[6], 'lease', '0', 'exp', ms(now + tonumber(ARGV[4])),
    'status', ARGV[5], 'headers', ARGV[6], 'body', ARGV[7])
  redis.call('PEXPIRE', k, ARGV[4])
end
return {'settled', r[3] or 'crash'}
`

// KEYS[1] = audit stream; ARGV[1] = oldest id to keep (ms), ARGV[2..] = entries (JSON).
// One command for a whole batch of the attempt log, instead of an XADD each.
export const AUDIT = `
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
export const REGISTER = `
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
export const OLDER = `
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
export const UNREGISTER = `
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
export const REINDEX = `
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
