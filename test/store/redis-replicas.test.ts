// `store.replicas` on one Redis primary with a replica (no cluster), both started here
// (scripts/redis-cluster.ts): the conformance suite with every write waited for, the WAITs of
// concurrent writes shared, and a replica that stops answering failing writes closed — each
// within about one WAIT timeout, not a queue of them — while stale tokens are still refused.
import { randomUUID } from 'node:crypto'
import { afterAll, beforeAll, describe, expect, test } from 'vitest'
import { startLocalReplicated, type LocalReplicated } from '../../scripts/redis-cluster.js'
import { RedisStore, ReplicaShortfall } from '../../src/store/redis/index.js'
import { StoreError, type Store } from '../../src/store/index.js'
import { describeStoreConformance, key, req, T0 } from './conformance.js'

const run = `fgw-${randomUUID().slice(0, 8)}`
let r: LocalReplicated

beforeAll(async () => { r = await startLocalReplicated({ replicas: 1 }) }, 30_000)
afterAll(async () => { await r?.stop() })

/*
 * failClaims. Every store the suite opens logs in as an ACL user of its own, named after its key
 * prefix; the fault takes HMGET from that user. CLAIM's first command is HMGET, which FENCE never
 * runs: inside ADMIT the fence runs and writes, then the claim step fails at its first command,
 * before it writes anything (NOPERM, a Lua runtime error, which undoes nothing) — whatever the key.
 */
const waiting = { replicas: 1, replicasTimeoutMs: 3000 }
const secret = randomUUID()
const userOf = (keyPrefix: string) => `fg-${keyPrefix}`
/** ACL SETUSER on the primary and the replica. */
async function setUser(user: string, ...rules: string[]): Promise<void> {
  for (const node of r.nodes.filter((x) => x.alive)) {
    const ok = await r.command(node.port, 'ACL', 'SETUSER', user, ...rules)
    if (ok !== 'OK') throw new Error(`ACL SETUSER ${user} on ${node.port}: ${String(ok)}`)
  }
}
const storeUser = new WeakMap<Store, string>()
/** A store logging in as the prefix's own user (every command and key, as the default user); `create` makes the user. */
const openAs = async (keyPrefix: string, create: boolean) => {
  const user = userOf(keyPrefix)
  if (create) await setUser(user, 'reset', 'on', `>${secret}`, '~*', '&*', '+@all')
  const url = new URL(r.url)
  url.username = user
  url.password = secret
  const s = await RedisStore.open({ url: url.toString(), keyPrefix, clock: 'caller', ...waiting })
  storeUser.set(s, user)
  return s
}

let n = 0
let prefix = ''
describeStoreConformance('redis, primary + 1 replica, replicas: 1', async () => openAs(prefix = `${run}-${n++}`, true), {
  makeSecond: async () => openAs(prefix, false),
  failClaims: async (s) => {
    const user = storeUser.get(s)!
    await setUser(user, '-hmget')
    return () => setUser(user, '+hmget')
  },
})

const waits = async () => Number(/cmdstat_wait:calls=(\d+)/.exec(String(await r.command(r.primary.port, 'INFO', 'commandstats')))?.[1] ?? 0)

describe('store.replicas on one primary', () => {
  test('200 concurrent writes share their WAITs; each is on the replica once answered', async () => {
    const s = await RedisStore.open({ url: r.url, keyPrefix: `${run}-share`, clock: 'caller', ...waiting })
    try {
      const before = await waits()
      const results = await Promise.all(Array.from({ length: 200 }, (_, i) => i % 2
        ? s.fence(`res/${i}`, BigInt(i))
        : s.admit({ resource: `res/${i}`, token: 1n }, key(`k${i}`), req(`c${i}`), T0)))
      expect(results.every((x) => ('accepted' in x ? x.accepted : x.fence.accepted && x.claim?.kind === 'claimed'))).toBe(true)
      const used = (await waits()) - before
      expect(used).toBeGreaterThan(0)
      expect(used).toBeLessThan(100)
      // what was acknowledged is on the replica
      const onReplica = await r.command<string>(r.replicas[0].port, 'GET', `{fg:${run}-share:f:res/199}`)
      expect(onReplica).toBe('199')
    } finally {
      await s.close()
    }
  })

  test('an equal token rewrites the mark, so its WAIT covers a mark another client wrote', async () => {
    const s = await RedisStore.open({ url: r.url, keyPrefix: `${run}-equal`, clock: 'caller', ...waiting })
    try {
      const before = await waits()
      await r.command(r.primary.port, 'SET', `{fg:${run}-equal:f:res}`, '5')
      expect(await s.fence('res', 5n)).toMatchObject({ accepted: true, highest: 5n })
      expect((await waits()) - before).toBe(1)
      // a stale token is refused without a wait: it forwards nothing
      expect(await s.fence('res', 4n)).toMatchObject({ accepted: false, highest: 5n })
      expect((await waits()) - before).toBe(1)
    } finally {
      await s.close()
    }
  })

  test('the replica gone: writes fail closed (StoreError) within about one WAIT timeout each, claims are given back, stale tokens still 412; it comes back: writes pass', async () => {
    const s = await RedisStore.open({ url: r.url, keyPrefix: `${run}-down`, replicas: 1, replicasTimeoutMs: 200, clock: 'caller' })
    const plain = await RedisStore.open({ url: r.url, keyPrefix: `${run}-down`, clock: 'caller' })
    try {
      expect(await s.fence('res', 10n)).toMatchObject({ accepted: true, highest: 10n })
      await r.kill(r.replicas[0].port)
      const t = Date.now()
      const outcomes = await Promise.all(Array.from({ length: 50 }, (_, i) => (i % 2
        ? s.fence('res', 11n + BigInt(i))
        : s.claim(key(`d${i}`), req(`c${i}`), T0)
      ).then(() => 'ok', (e: unknown) => e)))
      // 50 writes, one shared WAIT after another: not 50 × 200 ms
      expect(Date.now() - t).toBeLessThan(2000)
      for (const e of outcomes) {
        expect(e).toBeInstanceOf(ReplicaShortfall)
        expect(e).toBeInstanceOf(StoreError)
        expect((e as Error).message).toMatch(/0 of 1 replica acknowledged the write within 200 ms/)
      }
      // given back: every key is free again
      expect(await plain.claim(key('d0'), req('p0'), T0 + 1)).toEqual({ kind: 'claimed' })
      expect(await plain.claim(key('d48'), req('p48'), T0 + 1)).toEqual({ kind: 'claimed' })
      // a token below the mark the primary holds is still refused, at once
      expect(await s.fence('res', 9n)).toMatchObject({ accepted: false })
      await r.restart(r.replicas[0].port)
      for (let i = 0; ; i++) {
        const ok = await s.fence('res', 1000n).then(() => true, () => false)
        if (ok) break
        if (i > 100) throw new Error('the replica did not come back')
        await new Promise((x) => setTimeout(x, 100))
      }
      expect(await s.claim(key('after'), req('a1'), T0)).toEqual({ kind: 'claimed' })
    } finally {
      await s.close()
      await plain.close()
    }
  })
})
