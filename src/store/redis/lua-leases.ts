/**
 * The Redis store's lease scripts (contract §3a, ../contract/leases.ts), as text: the table of
 * ../shared/lease-state.ts in Lua. A resource's lease is the hash `{fg:<prefix>:f:<resource>}l`
 * — the mark's hash tag, so the lease, the mark and its since key sit in one slot and each
 * operation is one script on a Redis Cluster too (./keys.ts). Fields: tok (decimal), holder, exp
 * (epoch ms, the server's clock), ttl (ms), rel ('1' once released). No ttl on the key: a
 * released or expired lease keeps its token, like the mark.
 *
 * Versioned as the other scripts are: each gateway runs its own text by SHA; what is stored here
 * may grow fields, never change the meaning of these.
 */
import { LEASE_TOKENS_EXHAUSTED, MAX_LEASE_TOKEN } from '../contract/leases.js'
import { DECIMAL_LT, NOW } from './lua.js'

// Lua: a canonical decimal string plus one (tokens go past Lua's exact numbers).
const INCR = `local function incr(s)
  local out, carry = {}, 1
  for j = #s, 1, -1 do
    local d = string.byte(s, j) - 48 + carry
    if d == 10 then d, carry = 0, 1 else carry = 0 end
    out[j] = string.char(48 + d)
  end
  local r = table.concat(out)
  if carry == 1 then r = '1' .. r end
  return r
end
`

// Lua: the lease hash's fields, and the resource's newest token (the lease's or the mark's, the higher).
const READ = `local l = redis.call('HMGET', KEYS[#KEYS], 'tok', 'holder', 'exp', 'ttl', 'rel')
local function newest(top)
  if not l[1] then return top or '' end
  if top and lt(l[1], top) then return top end
  return l[1]
end
`

// KEYS[1] = mark, KEYS[2] = its since key, KEYS[3] = the lease; ARGV = holder, ttl ms, now ('' : TIME).
// Answers {'held', tok, holder, exp, ttl} or {'granted', tok, holder, exp, ttl, previous tok or '',
// previous holder or '', '1' when the previous lease had passed its end, its end or ''}; raises
// LEASE_TOKENS_EXHAUSTED before writing when the newest token is the largest.
export const LEASE_ACQUIRE = `
${DECIMAL_LT}${NOW}${INCR}${READ}local now = clock(ARGV[3])
local holder, ttl = ARGV[1], ARGV[2]
local open = l[1] and l[5] ~= '1'
if open and tonumber(l[3]) > now and l[2] ~= holder then return {'held', l[1], l[2], l[3], l[4]} end
local top = newest(redis.call('GET', KEYS[1]))
if top == '${MAX_LEASE_TOKEN}' then error({err = '${LEASE_TOKENS_EXHAUSTED}'}) end
local tok = incr(top == '' and '0' or top)
local exp = ms(now + tonumber(ttl))
redis.call('SET', KEYS[1], tok)
redis.call('SET', KEYS[2], tok .. ' ' .. ms(now))
redis.call('HSET', KEYS[3], 'tok', tok, 'holder', holder, 'exp', exp, 'ttl', ttl, 'rel', '0')
if open then return {'granted', tok, holder, exp, ttl, l[1], l[2], tonumber(l[3]) <= now and '1' or '', l[3]} end
return {'granted', tok, holder, exp, ttl, '', '', '', ''}
`

// KEYS[1] = mark, KEYS[2] = the lease; ARGV = token (canonical decimal), now ('' : TIME), and
// 'renew' or 'release'. Answers {'done', tok, holder, exp, ttl} (exp after a renewal; as it was
// for a release) or {'stale', newest token or ''}.
export const LEASE_CHANGE = `
${DECIMAL_LT}${NOW}${READ}local top = redis.call('GET', KEYS[1])
local t = ARGV[1]
if not l[1] or l[5] == '1' or l[1] ~= t or (top and lt(t, top)) then return {'stale', newest(top)} end
if ARGV[3] == 'release' then
  redis.call('HSET', KEYS[2], 'rel', '1')
  return {'done', l[1], l[2], l[3], l[4]}
end
local exp = ms(clock(ARGV[2]) + tonumber(l[4]))
redis.call('HSET', KEYS[2], 'exp', exp)
return {'done', l[1], l[2], exp, l[4]}
`

// KEYS[1] = the lease; ARGV = now ('' : TIME). Answers {tok, holder, exp, ttl} of the live lease, or {}.
export const LEASE_READ = `
${NOW}local l = redis.call('HMGET', KEYS[1], 'tok', 'holder', 'exp', 'ttl', 'rel')
if not l[1] or l[5] == '1' or tonumber(l[3]) <= clock(ARGV[1]) then return {} end
return {l[1], l[2], l[3], l[4]}
`
