// The Redis store's index of unsettled records (src/store/redis/unknowns.ts) on a real Redis
// (REDIS_URL): what the scripts put in it and take out, what `unknowns` reads with thousands of
// completed records (the commands watched with MONITOR, which names a script's own commands
// `lua`), and records written without it — by an older version before the index existed, or by
// one still running beside this one. Each test has its own key prefix, deleted afterwards.
import { randomUUID } from 'node:crypto'
import { afterAll, expect, test } from 'vitest'
import { Redis } from 'ioredis'
import { RedisStore } from '../../src/store/index.js'
import { key, req, sampleResponse, T0 } from './conformance.js'
import { until } from '../helpers/wait.js'

const URL = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379'
const run = `fgix-${randomUUID().slice(0, 8)}`
const admin = new Redis(URL)
const DAY = 86_400_000
const opened: RedisStore[] = []

afterAll(async () => {
  for (const s of opened) await s.close()
  let cursor = '0'
  do {
    const [next, keys] = await admin.scan(cursor, 'MATCH', `{fg:${run}*`, 'COUNT', 1000)
    cursor = next
    if (keys.length) await admin.del(...keys)
  } while (cursor !== '0')
  admin.disconnect()
})

const open = async (p: string) => {
  const s = await RedisStore.open({ url: URL, keyPrefix: p, clock: 'caller' })
  opened.push(s)
  return s
}
const names = (p: string) => ({
  index: `{fg:${p}:unsettled}`, writes: `{fg:${p}:unsettled}n`, built: `{fg:${p}:unsettled}b`, seq: `{fg:${p}:seq}`,
  record: (k: string) => `{fg:${p}:r:POST /orders:${'a'.repeat(64)}:${k}}`,
})

/**
 * The commands clients (not scripts) send that name a key of prefix `p`, from MONITOR, until
 * `done` (which waits for a marker command sent after the calls watched: MONITOR reports in the
 * order the server ran them, so every command before it has been seen).
 */
async function watch(p: string): Promise<{ done: () => Promise<string[][]> }> {
  const m = await admin.monitor()
  const seen: string[][] = []
  const marker = `{fg:${p}:watched-${randomUUID()}}`
  // replies still arriving after disconnect() are reported as errors: not this test's
  m.on('error', () => {})
  m.on('monitor', (_time: string, args: string[], source: string) => {
    if (source !== 'lua' && args.some((a) => String(a).includes(`fg:${p}:`))) seen.push(args.map(String))
  })
  return {
    done: async () => {
      await admin.exists(marker)
      await until(() => seen.some((a) => a.includes(marker)), { message: 'the marker command on MONITOR' })
      m.disconnect()
      return seen.filter((a) => !a.includes(marker))
    },
  }
}

const cmd = (a: string[]) => a[0].toLowerCase()
const listed = async (s: RedisStore, now: number) => (await s.unknowns(now)).map((u) => [u.key.key, u.reason]).sort()

test('a record is in the index from its claim until it is completed, not stored, released or resolved; an unknown one stays', async () => {
  const p = `${run}-life`
  const s = await open(p)
  const k = names(p)
  const score = async (id: string) => admin.zscore(k.index, k.record(id))

  await s.claim(key('done'), req('c1', { ttlMs: DAY }), T0)
  expect(await score('done')).toBe(String(T0 + DAY))
  await s.finish(key('done'), 'c1', { kind: 'completed', response: sampleResponse() }, 60_000, T0 + 10)
  await s.claim(key('not-stored'), req('c2'), T0)
  await s.finish(key('not-stored'), 'c2', { kind: 'not_stored', status: 500 }, 60_000, T0 + 10)
  await s.claim(key('released'), req('c3'), T0)
  await s.release(key('released'), 'c3')
  expect([await score('done'), await score('not-stored'), await score('released')]).toEqual([null, null, null])

  // a crash a later claim found stays, until resolved
  await s.claim(key('crashed'), req('c4', { leaseMs: 1_000, ttlMs: DAY }), T0)
  expect((await s.claim(key('crashed'), req('probe'), T0 + 1_500)).kind).toBe('unknown')
  expect(await score('crashed')).toBe(String(T0 + DAY))
  await s.resolve(key('crashed'), 'completed', 60_000, T0 + 2_000)
  expect(await score('crashed')).toBe(null)

  // an unknown outcome: scored by its new expiry; a takeover given back puts it back at the claim's expiry
  await s.claim(key('timeout'), req('c5'), T0)
  await s.finish(key('timeout'), 'c5', { kind: 'unknown', reason: 'timeout' }, 60_000, T0 + 10)
  expect(await score('timeout')).toBe(String(T0 + 10 + 60_000))
  await s.claim(key('timeout'), req('c6', { retryUnknown: true, ttlMs: DAY }), T0 + 20)
  expect(await s.release(key('timeout'), 'c6')).toEqual({ kind: 'restored' })
  expect(await score('timeout')).toBe(String(T0 + 20 + DAY))

  // admit (fence and claim in one script) indexes its claim too
  await s.admit({ resource: 'acct', token: 1n }, key('admitted'), req('c7', { ttlMs: DAY }), T0)
  expect(await score('admitted')).toBe(String(T0 + DAY))
  expect((await admin.zrange(k.index, '0', '-1')).sort()).toEqual([k.record('admitted'), k.record('timeout')])
  expect(await listed(s, T0 + 30)).toEqual([['timeout', 'timeout']])
})

test('with 20,000 completed records and 3 unknown ones, unknowns answers the 3 and reads none of the completed records', async () => {
  const p = `${run}-many`
  const s = await open(p)
  expect(await s.unknowns(T0)).toEqual([]) // builds the (empty) index
  for (let b = 0; b < 20; b++) {
    await Promise.all(Array.from({ length: 1000 }, async (_, i) => {
      const id = `done-${b * 1000 + i}`
      await s.claim(key(id), req(id), T0)
      await s.finish(key(id), id, { kind: 'completed', response: { status: 200, headers: [], body: Buffer.from('ok') } }, DAY, T0 + 1)
    }))
  }
  for (const [id, reason] of [['u-timeout', 'timeout'], ['u-reset', 'reset']] as const) {
    await s.claim(key(id), req(id), T0)
    await s.finish(key(id), id, { kind: 'unknown', reason }, DAY, T0 + 1)
  }
  await s.claim(key('u-crash'), req('u-crash', { leaseMs: 1_000 }), T0)
  await s.claim(key('live'), req('live', { leaseMs: 60_000 }), T0)
  expect(await admin.zcard(names(p).index)).toBe(4)

  const w = await watch(p)
  expect(await listed(s, T0 + 5_000)).toEqual([['u-crash', 'crash'], ['u-reset', 'reset'], ['u-timeout', 'timeout']])
  const sent = await w.done()
  const reads = sent.filter((a) => cmd(a) === 'hmget').map((a) => a[1])
  expect(reads.sort()).toEqual(['live', 'u-crash', 'u-reset', 'u-timeout'].map(names(p).record))
  expect(sent.filter((a) => cmd(a) === 'scan' || cmd(a).startsWith('eval'))).toEqual([])
  expect(sent.length).toBeLessThan(10)
}, 60_000)

test('records written before the index existed are found: the index is built once from a SCAN', async () => {
  const p = `${run}-before`
  const s = await open(p)
  const k = names(p)
  await s.claim(key('old-timeout'), req('c1'), T0)
  await s.finish(key('old-timeout'), 'c1', { kind: 'unknown', reason: 'timeout' }, DAY, T0 + 1)
  await s.claim(key('old-crash'), req('c2', { leaseMs: 1_000 }), T0)
  await s.claim(key('old-done'), req('c3'), T0)
  await s.finish(key('old-done'), 'c3', { kind: 'completed', response: sampleResponse() }, DAY, T0 + 1)
  // what an older version leaves: records and the write sequence, no index
  await admin.del(k.index, k.writes, k.built)

  const first = await watch(p)
  expect(await listed(s, T0 + 2_000)).toEqual([['old-crash', 'crash'], ['old-timeout', 'timeout']])
  expect((await first.done()).filter((a) => cmd(a) === 'scan').length).toBeGreaterThan(0)
  expect((await admin.zrange(k.index, '0', '-1')).sort()).toEqual([k.record('old-crash'), k.record('old-timeout')])

  const second = await watch(p)
  expect(await listed(s, T0 + 2_000)).toEqual([['old-crash', 'crash'], ['old-timeout', 'timeout']])
  expect((await second.done()).filter((a) => cmd(a) === 'scan')).toEqual([])
})

test('an older gateway writing beside this one (no index): what it writes is found on the next read', async () => {
  const p = `${run}-beside`
  const s = await open(p)
  const k = names(p)
  expect(await s.unknowns(T0)).toEqual([])
  // an older version's scripts advance the write sequence and keep no index
  const older = (lua: string, record: string) => admin.eval(`${lua}\nredis.call('INCR', KEYS[2])`, 2, record, k.seq)
  await older(`redis.call('HSET', KEYS[1], 'state', 'in_flight', 'fp', 'fp-1', 'cid', 'o1', 'lease', '${T0 + 1_000}', 'exp', '${T0 + DAY}')`, k.record('older-crash'))
  expect(await listed(s, T0 + 2_000)).toEqual([['older-crash', 'crash']])

  // this version claims for a minute; the older one finishes it unknown for a day: the index
  // entry made by the claim would lapse with the minute, the rebuild scores it by the new expiry
  await s.claim(key('mixed'), req('c1', { ttlMs: 60_000 }), T0)
  await older(`redis.call('HSET', KEYS[1], 'state', 'unknown', 'reason', 'timeout', 'lease', '0', 'exp', '${T0 + DAY}')`, k.record('mixed'))
  expect(await listed(s, T0 + 120_000)).toEqual([['mixed', 'timeout'], ['older-crash', 'crash']])
  expect(await admin.zscore(k.index, k.record('mixed'))).toBe(String(T0 + DAY))
})
