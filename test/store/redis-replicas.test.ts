// `store.replicas` on one Redis primary with a replica (no cluster), both started here
// (scripts/redis-cluster.ts): the conformance suite with every write waited for, the WAITs of
// concurrent writes shared, and a replica that stops answering failing writes closed — each
// within about one WAIT timeout, not a queue of them — while stale tokens are still refused.
import { randomUUID } from 'node:crypto'
import { afterAll, beforeAll, describe, expect, test } from 'vitest'
import { startLocalReplicated, type LocalReplicated } from '../../scripts/redis-cluster.js'
import { RedisStore, ReplicaShortfall } from '../../src/store/redis/index.js'
import { StoreError } from '../../src/store/types.js'
import { describeStoreConformance, key, req, T0 } from './conformance.js'

const run = `fgw-${randomUUID().slice(0, 8)}`
let r: LocalReplicated

beforeAll(async () => { r = await startLocalReplicated({ replicas: 1 }) }, 30_000)
afterAll(async () => { await r?.stop() })

let n = 0
let prefix = ''
const waiting = { replicas: 1, replicasTimeoutMs: 3000 }
describeStoreConformance('redis, primary + 1 replica, replicas: 1', async () => RedisStore.open({ url: r.url, keyPrefix: prefix = `${run}-${n++}`, ...waiting }), {
  makeSecond: async () => RedisStore.open({ url: r.url, keyPrefix: prefix, ...waiting }),
})

const waits = async () => Number(/cmdstat_wait:calls=(\d+)/.exec(String(await r.command(r.primary.port, 'INFO', 'commandstats')))?.[1] ?? 0)

describe('store.replicas on one primary', () => {
  test('200 concurrent writes share their WAITs; each is on the replica once answered', async () => {
    const s = await RedisStore.open({ url: r.url, keyPrefix: `${run}-share`, ...waiting })
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
    const s = await RedisStore.open({ url: r.url, keyPrefix: `${run}-equal`, ...waiting })
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
    const s = await RedisStore.open({ url: r.url, keyPrefix: `${run}-down`, replicas: 1, replicasTimeoutMs: 200 })
    const plain = await RedisStore.open({ url: r.url, keyPrefix: `${run}-down` })
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
