// Issue 12 §2, the check-to-apply window across replicas: two gateways (A and B, in this
// process, each with its own store client) share one store — a SQLite file, a Redis, a
// PostgreSQL schema. Token 5 is slow on A, token 6 arrives on B. With `fencing.serialize: store`
// the upstream applies 5 before 6; with `serialize: true` (this process only) it applies 6 then
// 5, and neither replica can tell.
import { randomUUID } from 'node:crypto'
import { join } from 'node:path'
import { rmSync } from 'node:fs'
import { afterAll, beforeAll, describe, expect, test } from 'vitest'
import { request } from 'undici'
import { startUpstream, type Upstream, type Applied } from './helpers/upstream.js'
import { startTestGateway, tempDir, type GatewaySpec, type RouteSpec, type StoreInput, type TestGateway } from './helpers/gateway.js'
import { expectProblem, post, metrics, metric } from './helpers/http.js'
import { sleep, until } from './helpers/wait.js'
import { dropPostgresSchema, dropRedisPrefix, PG_URL, REDIS_URL } from './helpers/stores.js'
import { PostgresStore, RedisStore, SqliteStore, type Store } from '../src/store/index.js'

const run = randomUUID().replaceAll('-', '').slice(0, 10)

interface Shared {
  kind: 'sqlite' | 'redis' | 'postgres'
  /** the config's store */
  store: StoreInput
  /** another client on the same state: plays a replica that crashed */
  client(): Promise<Store>
  drop(): Promise<void>
}

const dir = tempDir('fg-window-')
const stores: Shared[] = [
  {
    kind: 'sqlite',
    store: { kind: 'sqlite', path: join(dir, 'shared.db') },
    client: async () => new SqliteStore({ path: join(dir, 'shared.db') }),
    drop: async () => {},
  },
  {
    kind: 'redis',
    store: { kind: 'redis', url: REDIS_URL, keyPrefix: `fgwin-${run}` },
    client: () => RedisStore.open({ url: REDIS_URL, keyPrefix: `fgwin-${run}` }),
    drop: () => dropRedisPrefix(`fgwin-${run}`),
  },
  {
    kind: 'postgres',
    store: { kind: 'postgres', url: PG_URL, schema: `fgwin_${run}`, pool: 4 },
    client: () => PostgresStore.open({ url: PG_URL, schema: `fgwin_${run}`, pool: 2, reapIntervalMs: 0 }),
    drop: () => dropPostgresSchema(`fgwin_${run}`),
  },
]

/** A route `/NAME/:res/*` fencing `doc:{param.res}` with `serialize` (and `fencing`'s other keys). */
const route = (name: string, fencing: Partial<NonNullable<RouteSpec['fencing']>>, more: Partial<RouteSpec> = {}): RouteSpec =>
  ({ name, path: `/${name}/:res/*`, upstream: up.url, ...more, fencing: { resource: 'doc:{param.res}', ...fencing } })

let up: Upstream
beforeAll(async () => { up = await startUpstream() })
afterAll(async () => {
  await up?.close()
  rmSync(dir, { recursive: true, force: true })
})

describe.each(stores)('two replicas sharing $kind', (shared) => {
  let a: TestGateway, b: TestGateway
  let n = 0
  const res = () => `${shared.kind}-${++n}-${Date.now()}`

  const config = (): GatewaySpec => ({
    store: shared.store,
    routes: [
      route('store', { serialize: 'store' }),
      route('local', { serialize: true }),
      route('short', { serialize: 'store', serializeWait: '200ms' }),
      route('held', { serialize: 'store', serializeWait: '3s' }, { upstream: { url: up.url, timeout: '300ms' }, idempotency: { lease: '1500ms' } }),
      route('bare', { serialize: 'store', serializeWait: '3s' }, { upstream: { url: up.url, timeout: '300ms' } }),
    ],
  })

  beforeAll(async () => {
    a = await startTestGateway(config())
    b = await startTestGateway(config())
  })
  afterAll(async () => {
    await a?.close()
    await b?.close()
    await shared.drop()
  })

  /** What `/apply` saw for one resource, as "arrived 5", "applied 6", ... */
  const events = (prefix: string) => up.applied.filter((x: Applied) => x.url.startsWith(prefix)).map((x) => `${x.event} ${x.token}`)
  const write = (g: TestGateway, route: string, r: string, token: string, path = 'apply', headers: Record<string, string> = {}) =>
    post(`${g.url}/${route}/${r}/${path}`, { token }, { 'fencing-token': token, ...headers })
  /** polling for these tests: every 5 ms, they measure how long a request was held */
  const often = { intervalMs: 5, timeoutMs: 3000 }

  test('serialize: store — 5 slow on A, 6 on B: the upstream applies 5, then 6', async () => {
    const r = res()
    const slow = write(a, 'store', r, '5', 'apply?ms=400')
    await until(() => events(`/store/${r}/`).includes('arrived 5'), { ...often, message: 'token 5 to reach the upstream' })
    const started = Date.now()
    const six = await write(b, 'store', r, '6')
    expect(six.status).toBe(201)
    expect(Date.now() - started).toBeGreaterThanOrEqual(150) // B waited for A's 5
    expect((await slow).status).toBe(201)
    expect(events(`/store/${r}/`)).toEqual(['arrived 5', 'applied 5', 'arrived 6', 'applied 6'])
  })

  test('serialize: true — the same requests: B sends 6 at once and the upstream applies 6, then 5; neither replica counts it', async () => {
    const r = res()
    const slow = write(a, 'local', r, '5', 'apply?ms=400')
    await until(() => events(`/local/${r}/`).includes('arrived 5'), { ...often, message: 'token 5 to reach the upstream' })
    expect((await write(b, 'local', r, '6')).status).toBe(201)
    expect((await slow).status).toBe(201)
    // the inversion `serialize: store` exists for: each replica only holds back its own requests
    expect(events(`/local/${r}/`)).toEqual(['arrived 5', 'arrived 6', 'applied 6', 'applied 5'])
    await sleep(50)
    for (const g of [a, b]) expect(metric(await metrics(g.adminUrl), 'fencegate_fencing_overtaken_total', { route: 'local' })).toBe(0)
  })

  test('several tokens over both replicas go in token order', async () => {
    const r = res()
    const five = write(a, 'store', r, '5', 'apply?ms=200')
    await until(() => events(`/store/${r}/`).includes('arrived 5'), { ...often, message: 'token 5 to reach the upstream' })
    const six = write(b, 'store', r, '6', 'apply?ms=100')
    // 7 must come after 6 has registered, not only passed the check: in between, 7 would raise the
    // mark and 6's registration would be refused (412, by design). Registered means a registration
    // below 7 that outlives every one below 6 (5's, made earlier)
    const probe = await shared.client()
    try {
      await until(async () => {
        const now = Date.now()
        const [below7, below6] = await Promise.all([probe.olderRegistered(`doc:${r}`, 7n, now), probe.olderRegistered(`doc:${r}`, 6n, now)])
        return below7.until > below6.until
      }, { ...often, message: 'token 6 to pass the check and register' })
    } finally {
      await probe.close()
    }
    const seven = write(a, 'store', r, '7')
    expect((await Promise.all([five, six, seven])).map((x) => x.status)).toEqual([201, 201, 201])
    expect(events(`/store/${r}/`)).toEqual(['arrived 5', 'applied 5', 'arrived 6', 'applied 6', 'arrived 7', 'applied 7'])
  })

  test('the wait is bounded: 503 serialize-timeout with Retry-After within serializeWait + 50 ms, nothing forwarded', async () => {
    const r = res()
    const slow = write(a, 'short', r, '5', 'apply?ms=800')
    await until(() => events(`/short/${r}/`).includes('arrived 5'), { ...often, message: 'token 5 to reach the upstream' })
    const started = Date.now()
    const refused = await write(b, 'short', r, '6')
    const took = Date.now() - started
    expectProblem(refused, { status: 503, type: 'serialize-timeout', headers: { 'retry-after': /^[1-9]\d*$/ }, members: { token: '6' } })
    expect(took).toBeGreaterThanOrEqual(195)
    expect(took).toBeLessThan(200 + 50 + 250) // + the store calls and the test's own slack
    expect((await slow).status).toBe(201)
    expect(events(`/short/${r}/`)).toEqual(['arrived 5', 'applied 5'])
    // once 5 is done the retry goes through
    expect((await write(b, 'short', r, '6')).status).toBe(201)
    expect(events(`/short/${r}/`)).toEqual(['arrived 5', 'applied 5', 'arrived 6', 'applied 6'])
  })

  test('an unknown outcome on A holds the resource on B until its idempotency lease ends', async () => {
    const r = res()
    const started = Date.now()
    // upstream timeout 300 ms, lease 1500 ms: the upstream may still apply token 5 after the 504
    expect((await write(a, 'held', r, '5', 'hang', { 'idempotency-key': `k5-${r}` })).status).toBe(504)
    const six = await write(b, 'held', r, '6', 'apply', { 'idempotency-key': `k6-${r}` })
    expect(six.status).toBe(201)
    expect(Date.now() - started).toBeGreaterThanOrEqual(1400)
    expect(events(`/held/${r}/`)).toEqual(['arrived 6', 'applied 6'])
  })

  test('without an idempotency record, an unknown outcome on A holds the resource on B for one more upstream timeout', async () => {
    const r = res()
    expect((await write(a, 'bare', r, '5', 'hang')).status).toBe(504)
    const ended = Date.now()
    expect((await write(b, 'bare', r, '6')).status).toBe(201)
    expect(Date.now() - ended).toBeGreaterThanOrEqual(200) // held 300 ms after the 504
  })

  test('a crashed replica\'s registration holds newer tokens until its deadline, then lets them go', async () => {
    const r = res()
    const resource = `doc:${r}`
    const crashed = await shared.client()
    try {
      expect((await crashed.fence(resource, 5n)).accepted).toBe(true)
      const deadline = Date.now() + 700
      expect(await crashed.register(resource, 5n, 'gone-replica', deadline, Date.now())).toMatchObject({ registered: true })
    } finally {
      await crashed.close() // nobody will unregister it
    }
    const started = Date.now()
    expect((await write(b, 'store', r, '6')).status).toBe(201)
    const took = Date.now() - started
    expect(took).toBeGreaterThanOrEqual(550)
    expect(took).toBeLessThan(700 + 50 + 400)
    expect(events(`/store/${r}/`)).toEqual(['arrived 6', 'applied 6'])
  })

  test('an older token accepted by the fence but overtaken before it registered is refused (412), never sent', async () => {
    const r = res()
    const resource = `doc:${r}`
    // what B's store sees when A's request fenced 5, and B's 6 then fenced and registered first
    const other = await shared.client()
    try {
      expect((await other.fence(resource, 5n)).accepted).toBe(true)
      expect((await other.fence(resource, 6n)).accepted).toBe(true)
      expect(await other.register(resource, 6n, 'b', Date.now() + 5000, Date.now())).toEqual({ registered: true, until: 0 })
      expect(await other.register(resource, 5n, 'a', Date.now() + 5000, Date.now())).toEqual({ registered: false, highest: 6n })
      await other.unregister(resource, 'b')
    } finally {
      await other.close()
    }
    // and through a gateway, a token below the mark is a 412 as on any fenced route
    expectProblem(await write(a, 'store', r, '5'), { status: 412, type: 'stale-fencing-token', members: { highestToken: '6' } })
    expect(events(`/store/${r}/`)).toEqual([])
  })

  test('a client that leaves while its request waits on B: the request is never forwarded (499)', async () => {
    const r = res()
    const slow = write(a, 'store', r, '5', 'apply?ms=400')
    await until(() => events(`/store/${r}/`).includes('arrived 5'), { ...often, message: 'token 5 to reach the upstream' })
    const gone = request(`${b.url}/store/${r}/apply`, { method: 'POST', headers: { 'fencing-token': '6', 'content-type': 'application/json' }, body: '{}', signal: AbortSignal.timeout(100) })
    await expect(gone).rejects.toThrow()
    expect((await slow).status).toBe(201)
    await sleep(150)
    expect(events(`/store/${r}/`)).toEqual(['arrived 5', 'applied 5'])
    expect(metric(await metrics(b.adminUrl), 'fencegate_requests_total', { route: 'store', code: '499', outcome: 'serialize_timeout' })).toBeGreaterThanOrEqual(1)
  })

  test('equal tokens do not wait for each other across replicas', async () => {
    const r = res()
    const slow = write(a, 'store', r, '7', 'apply?ms=400')
    await until(() => events(`/store/${r}/`).includes('arrived 7'), { ...often, message: 'the first write to reach the upstream' })
    expect((await write(b, 'store', r, '7')).status).toBe(201)
    expect((await slow).status).toBe(201)
    expect(events(`/store/${r}/`)).toEqual(['arrived 7', 'arrived 7', 'applied 7', 'applied 7'])
  })
})
