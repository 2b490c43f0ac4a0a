// A claim whose reply is lost while the store then stays out of reach for longer than the claim's
// lease (1 s). Gateway A reaches the shared Redis or PostgreSQL through a TCP proxy of the tests'
// own (../helpers/tcp-proxy.ts); gateway B, a replica with the same routes, reaches it directly.
// A keeps giving the claim back by its id past the lease, and once the store answers again the
// key reads as before the claim — free, even after B found it past its lease and answered 409
// outcome-unknown (reason crash) meanwhile; or, for a claim that took over an unknown outcome,
// that outcome again (409 outcome-unknown, not forwarded). See lost-reply.test.ts for replies lost
// within the lease.
import { randomUUID } from 'node:crypto'
import { Redis } from 'ioredis'
import pg from 'pg'
import { afterAll, beforeAll, describe, expect, test } from 'vitest'
import { startUpstream, type Upstream } from '../helpers/upstream.js'
import { startTestGateway, type RouteSpec, type StoreInput, type TestGateway } from '../helpers/gateway.js'
import { expectProblem, metric, metrics, post, send } from '../helpers/http.js'
import { sleep, until } from '../helpers/wait.js'
import { dropPostgresSchema, dropRedisPrefix, PG_URL, REDIS_URL } from '../helpers/stores.js'
import { startTcpProxy, type TcpProxy } from '../helpers/tcp-proxy.js'
import { keyHashOf } from '../../src/idempotency/record-key.js'

const run = randomUUID().replaceAll('-', '').slice(0, 10)

const stores = [
  {
    kind: 'redis', target: new URL(REDIS_URL), direct: REDIS_URL, drop: () => dropRedisPrefix(`fglease-${run}`),
    store: (url: string): StoreInput => ({ kind: 'redis', url, keyPrefix: `fglease-${run}`, timeout: '500ms' }),
    via: (port: number) => `redis://127.0.0.1:${port}`,
    /** whether the store holds a record of `key` on route pay (read directly, not through A) */
    holds: async (key: string) => {
      const r = new Redis(REDIS_URL, { lazyConnect: true })
      try { await r.connect(); return (await r.exists(`{fg:fglease-${run}:r:pay::${key}}`)) === 1 } finally { r.disconnect() }
    },
  },
  {
    kind: 'postgres', target: new URL(PG_URL), direct: PG_URL, drop: () => dropPostgresSchema(`fglease_${run}`),
    store: (url: string): StoreInput => ({ kind: 'postgres', url, schema: `fglease_${run}`, pool: 4, timeout: '500ms' }),
    via: (port: number) => { const u = new URL(PG_URL); u.host = `127.0.0.1:${port}`; return u.toString() },
    holds: async (key: string) => {
      const c = new pg.Client({ connectionString: PG_URL })
      await c.connect()
      try { return (await c.query(`SELECT 1 FROM fglease_${run}.fg_records_v1 WHERE route = 'pay' AND key = $1`, [key])).rowCount === 1 } finally { await c.end() }
    },
  },
] as const

let up: Upstream
beforeAll(async () => { up = await startUpstream() })
afterAll(async () => { await up?.close() })

/** `pay` rejects unknown outcomes (the default); `payr` retries them on A and rejects them on B. */
const routes = (url: string, retry: boolean): RouteSpec[] => [
  { name: 'pay', path: '/pay/*', upstream: { url, timeout: '1s' }, idempotency: { required: true, lease: '1s' } },
  { name: 'payr', path: '/payr/*', upstream: { url, timeout: '300ms' }, idempotency: { required: true, lease: '1s', unknownOutcome: retry ? 'retry' : 'reject' } },
]

describe.each(stores)('a lost claim reply and the $kind store out of reach past the lease', (shared) => {
  let proxy: TcpProxy
  let a: TestGateway
  let b: TestGateway
  beforeAll(async () => {
    proxy = await startTcpProxy({ host: shared.target.hostname, port: Number(shared.target.port) })
    a = await startTestGateway({ store: shared.store(shared.via(proxy.port)), routes: routes(up.url, true) })
    b = await startTestGateway({ store: shared.store(shared.direct), routes: routes(up.url, false) })
    // A's first count of unknown outcomes done (on a store without the unsettled index, a SCAN that
    // builds it): nothing of it left in flight when a reply is dropped, see `quiet`
    await until(async () => metric(await metrics(a.adminUrl), 'fencegate_store_duration_seconds_count', { store: shared.kind, op: 'unknowns' }) >= 1,
      { message: 'A\'s first count of unknown outcomes' })
  })
  afterAll(async () => {
    await a?.close()
    await b?.close()
    await proxy?.close()
    await shared.drop()
  })

  const path = (key: string) => `/pay/${shared.kind}-${key}`
  const pay = (gw: TestGateway, key: string) => post(`${gw.url}${path(key)}`, { key }, { 'idempotency-key': key })
  /** the unknown outcomes of `route` an operator sees (B's admin GET /unknown), as reasons */
  const unknown = async (route = 'pay') =>
    ((await send(`${b.adminUrl}/unknown?route=${route}`)).json() as { unknown: { reason: string }[] }).unknown.map((u) => u.reason)

  /**
   * Nothing of A's on its way to the store: ioredis sends one pipeline at a time (auto-pipelining),
   * so a claim sent while an earlier command's reply is being dropped would wait behind it and
   * never reach the store; an attempt log append is the one thing A may still have in flight.
   */
  const quiet = () => a.audit.flush()

  /**
   * A claims a key (`base` and a try number) on the store, its reply is dropped (503, nothing
   * forwarded), then the store is out of reach for 2.5 s — well past the 1 s lease — while A tries
   * to give the claim back. `meanwhile` runs once the lease has ended, before the heal. A claim
   * that never reached the store (queued behind a periodic command of A's whose reply was the one
   * dropped) is tried again with a new key: the scenario needs the claim made and its reply lost.
   * @returns the key claimed
   */
  async function lostThenUnreachable(base: string, meanwhile: (key: string) => Promise<void>): Promise<string> {
    for (let attempt = 1; ; attempt++) {
      const key = `${base}-${attempt}`
      await quiet()
      proxy.mode = 'drop-replies'
      expectProblem(await pay(a, key), { status: 503, type: 'store-unavailable' })
      // the dropped reply's connection goes; every new one is held: no give-back reaches the store
      proxy.mode = 'blackhole'
      proxy.reset()
      if (!(await shared.holds(key))) {
        expect(attempt, 'the claim never reached the store in 5 tries').toBeLessThan(5)
        proxy.mode = 'pass'
        proxy.reset()
        await sleep(300)
        continue
      }
      await sleep(1_500)
      await meanwhile(key)
      await sleep(1_000)
      proxy.mode = 'pass'
      proxy.reset()
      return key
    }
  }

  test('nobody tries the key meanwhile: listed as a crash while out of reach, given back once the store answers; then forwarded, once', async () => {
    const key = await lostThenUnreachable(`k-quiet-${run}`, async () => {
      // the claim outlived its lease: until given back, an operator would see an unknown outcome
      expect(await unknown()).toEqual(['crash'])
    })
    await until(async () => (await unknown()).length === 0, { timeoutMs: 10_000, intervalMs: 100, message: 'the claim given back after the heal' })
    expect(up.count(path(key))).toBe(0)
    expect((await pay(a, key)).status).toBe(201)
    expect((await pay(b, key)).headers['idempotent-replayed']).toBe('true')
    expect(up.count(path(key))).toBe(1)
  })

  test('another replica finds it past its lease meanwhile (409 outcome-unknown, crash): the give-back undoes that, logged, and the key is forwarded once', async () => {
    const key = await lostThenUnreachable(`k-found-${run}`, async (claimed) => {
      expectProblem(await pay(b, claimed), { status: 409, type: 'outcome-unknown' })
    })
    await until(async () => (await unknown()).length === 0, { timeoutMs: 10_000, intervalMs: 100, message: 'the crash undone by the give-back' })
    const said = a.logs.find((l) => l.includes('given back now') && l.includes(keyHashOf('', key)))
    expect(said, a.logs.filter((l) => l.includes('give')).join('')).toBeDefined()
    expect(JSON.parse(said!)).toMatchObject({ route: 'pay', keyHash: keyHashOf('', key) })
    expect((await pay(b, key)).status).toBe(201)
    expect((await pay(a, key)).headers['idempotent-replayed']).toBe('true')
    expect(up.count(path(key))).toBe(1)
  })

  test('a lost-reply claim that took over an unknown outcome puts it back: the key stays 409 outcome-unknown, not forwarded', async () => {
    const key = `k-took-${run}`
    const at = `/payr/${shared.kind}-${key}/apply-then-hang`
    const payr = (gw: TestGateway) => post(`${gw.url}${at}`, { key }, { 'idempotency-key': key })
    expectProblem(await payr(b), { status: 504, type: 'upstream-timeout' }) // applied, then no answer: unknown (timeout)
    expect(up.count(at)).toBe(1)
    await quiet()
    proxy.mode = 'drop-replies'
    expectProblem(await payr(a), { status: 503, type: 'store-unavailable' }) // A retries unknown outcomes: its claim takes it over
    proxy.mode = 'pass'
    proxy.reset()
    // given back: B reads the unknown outcome A's claim had taken over, not a free key
    await until(async () => (await unknown('payr')).join() === 'timeout', { timeoutMs: 10_000, intervalMs: 100, message: 'the unknown outcome (timeout) put back' })
    expectProblem(await payr(b), { status: 409, type: 'outcome-unknown' })
    expect(await unknown('payr')).toEqual(['timeout'])
    expect(up.count(at)).toBe(1)
  })
})
