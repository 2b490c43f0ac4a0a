/**
 * The Redis store's scripts as it sends them: each Lua text of ./lua.ts under its command name,
 * with the SHA EVALSHA names it by and how many of its arguments are keys, and on one server each
 * write wrapped in the write sequence (SEQUENCED). ./replies.ts reads their answers.
 */
import { createHash } from 'node:crypto'
import type { ClaimRequest } from '../contract/store.js'
import { LEASE_ACQUIRE, LEASE_CHANGE, LEASE_READ } from './lua-leases.js'
import { ADMIT, AUDIT, CLAIM, FENCE, FINISH, OLDER, REGISTER, REINDEX, RELEASE, RENEW, RESOLVE, SETTLE, TAKE_PROBE, UNREGISTER } from './lua.js'

/**
 * A script: `name` names it (its SEQUENCED form on one server; the attempt log's is an ioredis
 * command by that name), `keys` how many of its arguments are keys on a cluster, `indexed` when
 * one server adds the index of unsettled records after them (KeyNames.recordKeys); `sha` is what
 * EVALSHA names it by (./connection.ts `callScript`, EVAL after NOSCRIPT).
 */
export interface Script { name: string; lua: string; sha: string; keys: number; indexed?: boolean }
const script = (name: string, lua: string, keys: number, indexed = false): Script =>
  ({ name, lua, keys, sha: createHash('sha1').update(lua).digest('hex'), ...(indexed ? { indexed } : {}) })

/** The rebuild of the index of unsettled records (REINDEX, ./lua.ts): not an ioredis command, its key count varies. */
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

// The write sequence of one slot (a cluster: ./cluster-history.ts): KEYS gets that slot's sequence
// key last ({fg:<prefix>:q:<n>}, named so it hashes to the slot of the script's other keys), ARGV
// the highest sequence of that slot the gateway has seen last ('' when none). Below it: the error
// `FGBACK <its sequence>` before anything is written; else the script runs, the sequence is
// advanced, and the answer is {sequence, the node id of the master that ran it, the script's own
// answer}: a reply from a master the gateway did not know is checked before it is relied on.
const slotSequenced = (lua: string): string => `
local seqKey, seen = KEYS[#KEYS], ARGV[#ARGV]
local cur = tonumber(redis.call('GET', seqKey) or '0')
if seen ~= '' and cur < tonumber(seen) then return redis.error_reply('FGBACK ' .. cur) end
local function body(KEYS, ARGV)
${lua}
end
local keys, argv = {}, {}
for i = 1, #KEYS - 1 do keys[i] = KEYS[i] end
for i = 1, #ARGV - 1 do argv[i] = ARGV[i] end
local r = body(keys, argv)
return {redis.call('INCR', seqKey), redis.call('CLUSTER', 'MYID'), r}
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
  fgTakeProbe: script('fgTakeProbe', TAKE_PROBE, 1, true),
  fgSettle: script('fgSettle', SETTLE, 1, true),
  fgAudit: script('fgAudit', AUDIT, 1),
  fgRegister: script('fgRegister', REGISTER, 2),
  fgOlder: script('fgOlder', OLDER, 1),
  fgUnregister: script('fgUnregister', UNREGISTER, 1),
  fgLeaseAcquire: script('fgLeaseAcquire', LEASE_ACQUIRE, 3),
  fgLeaseChange: script('fgLeaseChange', LEASE_CHANGE, 2),
  fgLeaseRead: script('fgLeaseRead', LEASE_READ, 1),
} as const

/** Scripts that write nothing the guarantees rest on: no write sequence around them. */
const UNSEQUENCED = new Set(['fgAudit', 'fgOlder', 'fgLeaseRead'])

/**
 * The scripts of one server: each of SCRIPTS but the attempt log's and the reads, under the same
 * name, with the write sequence around it (`sequenced`); the record scripts also take the index
 * of unsettled records.
 */
export const SEQUENCED: typeof SCRIPTS = Object.fromEntries(Object.entries(SCRIPTS).map(([name, s]) =>
  [name, UNSEQUENCED.has(name) ? s : script(s.name, sequenced(s.lua), s.keys + (s.indexed ? 1 : 0) + 2)])) as unknown as typeof SCRIPTS

/** CLAIM's ARGV (ADMIT's ARGV[2..8]); `now` '' for the server's clock, the probe '' when none. */
export const claimArgs = (req: ClaimRequest, now: string): string[] => [
  req.fingerprint, req.claimId, String(Math.max(0, Math.round(req.leaseMs))), String(Math.max(1, Math.round(req.ttlMs))),
  req.retryUnknown ? '1' : '0', now, req.probe ?? '',
]

/**
 * The scripts of a cluster: each of SCRIPTS but the attempt log's and the reads, under the same
 * name, with its slot's write sequence around it (`slotSequenced`). Older gateways keep sending
 * the plain SCRIPTS beside them (other SHAs): their writes advance no sequence.
 */
export const SLOT_SEQUENCED: typeof SCRIPTS = Object.fromEntries(Object.entries(SCRIPTS).map(([name, s]) =>
  [name, UNSEQUENCED.has(name) ? s : script(s.name, slotSequenced(s.lua), s.keys + 1)])) as unknown as typeof SCRIPTS
