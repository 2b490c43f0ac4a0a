// The conformance suite against a real Redis (REDIS_URL, default redis://127.0.0.1:6379). Each
// test gets its own key prefix; every key under it is deleted afterwards, so runs can overlap.
import { randomUUID } from 'node:crypto'
import { afterAll, describe, expect, test } from 'vitest'
import { Redis } from 'ioredis'
import { RedisStore, StoreError, type Store } from '../../src/store/index.js'
import { describeStoreConformance, key, req, sampleResponse, T0 } from './conformance.js'

const URL = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379'
const run = `fgtest-${randomUUID().slice(0, 8)}`
let n = 0
let prefix = ''
const admin = new Redis(URL, { lazyConnect: true })

/** Deletes every key of the test run's prefixes. */
async function dropPrefix(pattern: string): Promise<void> {
  let cursor = '0'
  do {
    const [next, keys] = await admin.scan(cursor, 'MATCH', pattern, 'COUNT', 1000)
    cursor = next
    if (keys.length) await admin.del(...keys)
  } while (cursor !== '0')
}

/*
 * failClaims. Every store the suite opens logs in as an ACL user of its own, named after its key
 * prefix and deleted after its test; the fault takes HMGET from that user. CLAIM's first command
 * is HMGET, which FENCE never runs: inside ADMIT the fence runs and writes, then the claim step
 * fails at its first command, before it writes anything (NOPERM, a Lua runtime error, which
 * undoes nothing) — whatever the key. Fences, marks (MGET) and the other scripts' dispatch are
 * untouched, and so is every other client of this shared server (the fault is the one user's).
 */
const secret = randomUUID()
const userOf = (keyPrefix: string) => `fg-${keyPrefix}`
const users: string[] = []
/** `url` logging in as `user`. */
const asUser = (url: string, user: string) => { const u = new globalThis.URL(url); u.username = user; u.password = secret; return u.toString() }
/** Creates (or resets) `user`: every command and key, as the default user. */
async function addUser(user: string): Promise<void> {
  users.push(user)
  await admin.call('ACL', 'SETUSER', user, 'reset', 'on', `>${secret}`, '~*', '&*', '+@all')
}
/** Makes the claim step fail for `user`'s connections (see above); resolves with the function that undoes it. */
async function failClaimsOf(user: string): Promise<() => Promise<void>> {
  await admin.call('ACL', 'SETUSER', user, '-hmget')
  return async () => { await admin.call('ACL', 'SETUSER', user, '+hmget') }
}
const storeUser = new WeakMap<Store, string>()
const openAs = async (keyPrefix: string) => {
  const user = userOf(keyPrefix)
  const s = await RedisStore.open({ url: asUser(URL, user), keyPrefix, clock: 'caller' })
  storeUser.set(s, user)
  return s
}

afterAll(async () => {
  await dropPrefix(`{fg:${run}*`)
  if (users.length) await admin.call('ACL', 'DELUSER', ...users)
  admin.disconnect()
})

describeStoreConformance(
  'redis',
  async () => {
    prefix = `${run}-${n++}`
    await addUser(userOf(prefix))
    return openAs(prefix)
  },
  {
    makeSecond: async () => openAs(prefix),
    onStoreClock: () => { prefix = `${run}-${n++}`; return RedisStore.open({ url: URL, keyPrefix: prefix }) },
    cleanup: async () => {
      await dropPrefix(`{fg:${prefix}:*`)
      await admin.call('ACL', 'DELUSER', userOf(prefix))
    },
    failClaims: (s) => failClaimsOf(storeUser.get(s)!),
  },
)

describe('RedisStore', () => {
  test('keys are hash-tagged per resource and per record, the mark has no ttl, a record expires with its ttl', async () => {
    const p = `${run}-layout`
    const s = await RedisStore.open({ url: URL, keyPrefix: p, clock: 'caller' })
    try {
      await s.fence('account:{42}', 7n)
      await s.claim(key('k:1', 'payments'), req('c1', { ttlMs: 60_000 }), Date.now())
      const keys = (await admin.keys(`{fg:${p}:*`)).sort()
      // braces and colons inside values are escaped, so each key is exactly one hash tag
      expect(keys).toEqual([
        `{fg:${p}:epoch}`,
        `{fg:${p}:f:account%3A%7B42%7D}`,
        `{fg:${p}:f:account%3A%7B42%7D}s`,
        `{fg:${p}:r:payments:${'a'.repeat(64)}:k%3A1}`,
        `{fg:${p}:seq}`,
        `{fg:${p}:unsettled}`,
        `{fg:${p}:unsettled}n`,
      ])
      // the write sequence: one step per script, and as many by scripts that keep the index
      expect(await admin.get(keys[4])).toBe('2')
      expect(await admin.pttl(keys[4])).toBe(-1)
      expect(await admin.get(keys[6])).toBe('2')
      // the record in flight is in the index of unsettled records, scored by its expiry
      expect(await admin.zrange(keys[5], '0', '-1', 'WITHSCORES')).toEqual([keys[3], await admin.hget(keys[3], 'exp')])
      expect(await admin.get(keys[1])).toBe('7')
      expect(await admin.pttl(keys[1])).toBe(-1)
      // when the mark was first accepted, tagged with the mark it belongs to; in the mark's slot
      expect(await admin.get(keys[2])).toMatch(/^7 \d{13}$/)
      expect(await admin.pttl(keys[2])).toBe(-1)
      const ttl = await admin.pttl(keys[3])
      expect(ttl).toBeGreaterThan(55_000)
      expect(ttl).toBeLessThanOrEqual(60_000)
      expect(s.epoch).toMatch(/^[0-9a-f-]{36}$/)
    } finally {
      await s.close()
      await dropPrefix(`{fg:${p}:*`)
    }
  })

  test('a mark written by another client as a 19-digit string is compared exactly', async () => {
    const p = `${run}-digits`
    const s = await RedisStore.open({ url: URL, keyPrefix: p, clock: 'caller' })
    try {
      // 2^63-1 and 2^63-2 are the same double; the script must still tell them apart
      await s.fence('r', 9223372036854775806n)
      expect(await s.fence('r', 9223372036854775807n)).toMatchObject({ accepted: true, highest: 9223372036854775807n })
      expect(await s.fence('r', 9223372036854775806n)).toMatchObject({ accepted: false, highest: 9223372036854775807n })
      expect(await s.fence('r', 999999999999999999n)).toMatchObject({ accepted: false, highest: 9223372036854775807n })
    } finally {
      await s.close()
      await dropPrefix(`{fg:${p}:*`)
    }
  })

  test('a since key left behind by a mark raised without it (an older gateway) is not reported as the new mark\'s', async () => {
    const p = `${run}-since-old`
    const s = await RedisStore.open({ url: URL, keyPrefix: p, clock: 'caller' })
    try {
      expect(await s.fence('r', 5n, T0)).toEqual({ accepted: true, highest: 5n, since: T0, raised: true })
      // an older gateway raises the mark with the old script: the since key still names 5
      await admin.set(`{fg:${p}:f:r}`, '9')
      expect(await s.fence('r', 9n, T0 + 10)).toEqual({ accepted: true, highest: 9n })
      expect(await s.fence('r', 8n, T0 + 20)).toEqual({ accepted: false, highest: 9n })
      expect(await s.mark('r')).toEqual({ highest: 9n })
      // the next raise writes both again
      expect(await s.fence('r', 10n, T0 + 30)).toEqual({ accepted: true, highest: 10n, since: T0 + 30, raised: true })
      expect(await s.mark('r')).toEqual({ highest: 10n, since: T0 + 30 })
    } finally {
      await s.close()
      await dropPrefix(`{fg:${p}:*`)
    }
  })

  test('a half-failed admit (the claim step fails inside ADMIT): StoreError, the mark raised to the token, no record written; the retry with a new claimId claims', async () => {
    const p = `${run}-half`
    await addUser(userOf(p))
    const s = await openAs(p)
    const mark = `{fg:${p}:f:r}`
    const record = `{fg:${p}:r:POST /orders:${'a'.repeat(64)}:key-1}`
    try {
      await s.fence('r', 5n, T0 - 1000)
      const heal = await failClaimsOf(userOf(p))
      let err: unknown
      try {
        err = await s.admit({ resource: 'r', token: 7n }, key(), req('h1'), T0).then(() => undefined, (e: unknown) => e)
      } finally {
        await heal()
      }
      expect(err).toBeInstanceOf(StoreError)
      // the one script failed at CLAIM's first command; FENCE's writes before it stand
      expect((err as Error).message).toMatch(/^redis admit: .*can't run this command/)
      expect([await admin.get(mark), await admin.get(`${mark}s`)]).toEqual(['7', `7 ${T0}`])
      expect(await admin.exists(record)).toBe(0)
      expect(await s.admit({ resource: 'r', token: 7n }, key(), req('h2'), T0 + 10)).toEqual({ fence: { accepted: true, highest: 7n, since: T0 }, claim: { kind: 'claimed' } })
      expect(await admin.hget(record, 'cid')).toBe('h2')
    } finally {
      await s.close()
      await dropPrefix(`{fg:${p}:*`)
    }
  })

  test('an unreachable Redis fails open() fast with StoreError', async () => {
    const t = Date.now()
    const err = await RedisStore.open({ url: 'redis://127.0.0.1:1', keyPrefix: 'x' }).then(() => undefined, (e: unknown) => e)
    expect(err).toBeInstanceOf(StoreError)
    expect(Date.now() - t).toBeLessThan(3000)
  })

  test('a completed record replays across clients; a scope with braces and colons stays its own record', async () => {
    const p = `${run}-scope`
    const a = await RedisStore.open({ url: URL, keyPrefix: p, clock: 'caller' })
    const b = await RedisStore.open({ url: URL, keyPrefix: p, clock: 'caller' })
    try {
      const k1 = key('k', 'r', 'x:y')
      const k2 = key('y:k', 'r', 'x')
      expect((await a.claim(k1, req('c1'), T0)).kind).toBe('claimed')
      expect((await a.claim(k2, req('c2'), T0)).kind).toBe('claimed')
      await a.finish(k1, 'c1', { kind: 'completed', response: sampleResponse() }, 60_000, T0 + 1)
      const r = await b.claim(k1, req('c3'), T0 + 2)
      expect(r.kind).toBe('completed')
      expect(await b.claim(k2, req('c4'), T0 + 2)).toEqual({ kind: 'in_flight', leaseUntil: T0 + 10_000 })
    } finally {
      await a.close()
      await b.close()
      await dropPrefix(`{fg:${p}:*`)
    }
  })

  test('after SCRIPT FLUSH (a restarted server, or an operator) each script is sent again as EVAL: fence, claim, finish and replay answer as before', async () => {
    const p = `${run}-noscript`
    const s = await RedisStore.open({ url: URL, keyPrefix: p, clock: 'caller' })
    try {
      await admin.script('FLUSH')
      const first = await s.admit({ resource: 'account:ns', token: 3n }, key('ns-1'), req('c1'), T0)
      expect(first.fence.accepted).toBe(true)
      expect(first.claim).toEqual({ kind: 'claimed' })
      await admin.script('FLUSH')
      await s.finish(key('ns-1'), 'c1', { kind: 'completed', response: sampleResponse() }, 60_000, T0 + 1)
      await admin.script('FLUSH')
      const again = await s.admit({ resource: 'account:ns', token: 3n }, key('ns-1'), req('c2'), T0 + 2)
      expect(again.claim).toMatchObject({ kind: 'completed', response: { status: 201 } })
      expect((again.claim as { response: { body: Buffer } }).response.body).toEqual(sampleResponse().body)
      const stale = await s.admit({ resource: 'account:ns', token: 2n }, key('ns-2'), req('c3'), T0 + 3)
      expect(stale.fence.accepted).toBe(false)
      expect(stale.claim).toBeUndefined()
    } finally {
      await s.close()
      await dropPrefix(`{fg:${p}:*`)
    }
  })
})
