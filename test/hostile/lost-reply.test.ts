// A claim whose reply is lost on the way (issue: a lost reply must not poison a key). A TCP proxy
// of the tests' own (../helpers/tcp-proxy.ts) sits between an in-process gateway and the shared
// Redis or PostgreSQL: the store runs the claim, the gateway never hears of it and answers 503
// with nothing forwarded; once the store answers again the gateway gives the claim back by its
// id, so the key is forwarded on the next try — never 409 outcome-unknown for a request never sent.
import { randomUUID } from 'node:crypto'
import { afterAll, beforeAll, describe, expect, test } from 'vitest'
import { startUpstream, type Upstream } from '../helpers/upstream.js'
import { startTestGateway, type TestGateway, type StoreInput } from '../helpers/gateway.js'
import { expectProblem, post } from '../helpers/http.js'
import { until } from '../helpers/wait.js'
import { dropPostgresSchema, dropRedisPrefix, PG_URL, REDIS_URL } from '../helpers/stores.js'
import { startTcpProxy, type TcpProxy } from '../helpers/tcp-proxy.js'

const run = randomUUID().replaceAll('-', '').slice(0, 10)

const stores = [
  { kind: 'redis', target: new URL(REDIS_URL), store: (port: number): StoreInput => ({ kind: 'redis', url: `redis://127.0.0.1:${port}`, keyPrefix: `fglost-${run}`, timeout: '500ms' }), drop: () => dropRedisPrefix(`fglost-${run}`) },
  { kind: 'postgres', target: new URL(PG_URL), store: (port: number): StoreInput => { const u = new URL(PG_URL); u.host = `127.0.0.1:${port}`; return { kind: 'postgres', url: u.toString(), schema: `fglost_${run}`, pool: 4, timeout: '500ms' } }, drop: () => dropPostgresSchema(`fglost_${run}`) },
] as const

let up: Upstream
beforeAll(async () => { up = await startUpstream() })
afterAll(async () => { await up?.close() })

describe.each(stores)('a lost claim reply on $kind', (shared) => {
  let proxy: TcpProxy
  let gw: TestGateway
  beforeAll(async () => {
    proxy = await startTcpProxy({ host: shared.target.hostname, port: Number(shared.target.port) })
    gw = await startTestGateway({
      store: shared.store(proxy.port),
      routes: [{ name: 'pay', path: '/pay/*', upstream: up.url, idempotency: { required: true, lease: '3s' } }],
    })
  })
  afterAll(async () => {
    await gw?.close()
    await proxy?.close()
    await shared.drop()
  })

  const pay = (key: string) => post(`${gw.url}/pay/${shared.kind}-${key}`, { key }, { 'idempotency-key': key })
  const sent = (key: string) => up.count(`/pay/${shared.kind}-${key}`)

  /**
   * Tries `key` until it is forwarded. Before that: 503 while the store is not reached, or 409
   * in flight while the claim is not given back yet — never 409 outcome-unknown.
   */
  const forwardedAfterHeal = async (key: string) => {
    const seen: string[] = []
    const r = await until(async () => {
      const res = await pay(key)
      seen.push(res.status === 201 ? '201' : `${res.status} ${res.json().type}`)
      return res.status === 201 && res
    }, { timeoutMs: 6_000, intervalMs: 100, message: () => `the key forwarded after the heal; answers: ${seen.join(', ')}` })
    expect(seen.filter((s) => s !== '201' && !s.endsWith('store-unavailable') && !s.endsWith('request-in-flight'))).toEqual([])
    return r
  }

  for (const mode of ['drop-replies', 'reset-reply'] as const) {
    test(`${mode}: the store runs the claim, the gateway answers 503 and forwards nothing; after the heal the key is forwarded, once`, async () => {
      const key = `k-${mode}`
      proxy.mode = mode
      expectProblem(await pay(key), { status: 503, type: 'store-unavailable' })
      expect(sent(key)).toBe(0)
      proxy.mode = 'pass'
      proxy.reset()
      await forwardedAfterHeal(key)
      expect(sent(key)).toBe(1)
      // and it stays done: a retry replays
      const again = await pay(key)
      expect(again.headers['idempotent-replayed']).toBe('true')
      expect(sent(key)).toBe(1)
    })
  }

  test('blackhole: the claim is given back once the store answers; no outcome-unknown for a request never sent', async () => {
    const key = 'k-blackhole'
    proxy.mode = 'blackhole'
    expectProblem(await pay(key), { status: 503, type: 'store-unavailable' })
    proxy.mode = 'pass'
    proxy.reset()
    await forwardedAfterHeal(key)
    expect(sent(key)).toBe(1)
  })
})
