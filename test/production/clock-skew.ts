// Replicas whose clocks disagree, sharing one Redis (./clock-skew-redis.test.ts) or one PostgreSQL
// (./clock-skew-postgres.test.ts): replica A on the
// true clock, F under faketime 20 s ahead, S 20 s behind (libfaketime, real processes). Leases,
// record expiry and serialize deadlines run on the store's clock, so what one replica decides
// the others decide too: a live exchange is in flight on every replica (not abandoned on F), a
// killed replica's claim is abandoned after one lease on every replica (not 20 s later on S),
// `fencing.serialize: store` keeps the store's order from any replica, and each replica reports
// its offset to the store's clock.
import { randomUUID } from 'node:crypto'
import { execFileSync } from 'node:child_process'
import { join } from 'node:path'
import { rmSync, writeFileSync } from 'node:fs'
import { afterAll, beforeAll, describe, expect, test } from 'vitest'
import { startUpstream, type Upstream } from '../helpers/upstream.js'
import { tempDir, freePort, spawnGateway, gatewayConfig, type ChildGateway, type StoreInput } from '../helpers/gateway.js'
import { expectProblem, post, send, metrics, metric } from '../helpers/http.js'
import { until, sleep } from '../helpers/wait.js'
import { skewed, skewedEnv } from '../helpers/faketime.js'
import { dropPostgresSchema, dropRedisPrefix, PG_URL, REDIS_URL } from '../helpers/stores.js'

const run = randomUUID().replaceAll('-', '').slice(0, 10)
const LEASE_MS = 3_000



const stores = {
  redis: { kind: 'redis', store: { kind: 'redis', url: REDIS_URL, keyPrefix: `fgskew-${run}` }, drop: () => dropRedisPrefix(`fgskew-${run}`) },
  postgres: { kind: 'postgres', store: { kind: 'postgres', url: PG_URL, schema: `fgskew_${run}`, pool: 4 }, drop: () => dropPostgresSchema(`fgskew_${run}`) },
} as const satisfies Record<string, { kind: 'redis' | 'postgres'; store: StoreInput; drop(): Promise<void> }>

/** The scenarios against one shared store (one test file each, so each stays within a minute). */
export function describeClockSkew(kind: keyof typeof stores): void {
  const shared = stores[kind]
  let up: Upstream
  beforeAll(async () => { up = await startUpstream() })
  afterAll(async () => { await up?.close() })

  test('faketime shifts a node process\'s clock (the skew the tests rely on)', () => {
    const seen = Number(execFileSync(process.execPath, ['-e', 'process.stdout.write(String(Date.now()))'], { env: { ...process.env, ...skewedEnv('+20s') } }).toString())
    expect(Math.abs(seen - Date.now() - 20_000)).toBeLessThan(2_000)
  })

  describe(`replicas 20 s apart sharing ${kind}`, () => {
  const dir = tempDir('fg-skew-')
  let a: ChildGateway, fast: ChildGateway, slow: ChildGateway
  const start = async (name: string, launch = {}) => {
    const port = await freePort(), admin = await freePort()
    const file = join(dir, `${name}.yaml`)
    writeFileSync(file, gatewayConfig({
      listen: `127.0.0.1:${port}`,
      admin: { listen: `127.0.0.1:${admin}` },
      store: shared.store,
      routes: [{
        name: 'ledger',
        path: '/ledger/:res/*',
        upstream: { url: up.url, timeout: '3s' },
        fencing: { resource: '{param.res}', serialize: 'store' },
        idempotency: { lease: `${LEASE_MS}ms` },
      }],
    }))
    return spawnGateway(file, port, admin, join(dir, `${name}.log`), [], launch)
  }

  beforeAll(async () => {
    a = await start('a')
    ;[fast, slow] = await Promise.all([start('fast', skewed('+20s')), start('slow', skewed('-20s'))])
  })
  afterAll(async () => {
    await Promise.all([a, fast, slow].map((g) => g?.stop()))
    await shared.drop()
    rmSync(dir, { recursive: true, force: true })
  })

  const res = (name: string) => `${shared.kind}-${name}`
  const write = (g: ChildGateway, name: string, token: string, key?: string, path = 'apply') =>
    post(`${g.url}/ledger/${res(name)}/${path}`, { name }, { 'fencing-token': token, ...(key ? { 'idempotency-key': key } : {}) })

  test('each replica measures its offset to the store\'s clock: +20 s behind it, -20 s ahead of it, about 0; the far ones warn', async () => {
    const offset = async (g: ChildGateway) => metric(await metrics(g.adminUrl), 'fencegate_store_clock_offset_seconds', { store: shared.kind })
    const exceeded = async (g: ChildGateway) => metric(await metrics(g.adminUrl), 'fencegate_store_clock_offset_exceeded', { store: shared.kind })
    expect(Math.abs(await offset(a))).toBeLessThan(1)
    expect(Math.abs(await offset(fast) + 20)).toBeLessThan(1)
    expect(Math.abs(await offset(slow) - 20)).toBeLessThan(1)
    expect([await exceeded(a), await exceeded(fast), await exceeded(slow)]).toEqual([0, 1, 1])
    expect(fast.log()).toMatch(/this gateway's clock is far from the store's/)
    expect(a.log()).not.toMatch(/this gateway's clock is far from the store's/)
    // the start-up line names it
    expect(slow.log()).toMatch(/clock \(store clock offset \+(19|20)\.\d{3} s/)
  })

  test('finding 1: a live exchange on A is in flight on the replica 20 s ahead (409), which then replays A\'s answer; one effect upstream', async () => {
    const first = write(a, 'live', '1', 'k-live', 'slow?ms=2000')
    await until(() => up.count(`/ledger/${res('live')}/`) === 1, { message: 'the first request to reach the upstream' })
    // past A's lease by F's clock, but not by the store's: the exchange is alive
    await sleep(300)
    for (const g of [fast, slow]) expectProblem(await write(g, 'live', '1', 'k-live', 'slow?ms=2000'), { status: 409, type: 'request-in-flight' })
    const answered = await first
    expect(answered.status).toBe(200)
    const again = await write(fast, 'live', '1', 'k-live', 'slow?ms=2000')
    expect(again.status).toBe(200)
    expect(again.headers['idempotent-replayed']).toBe('true')
    expect(again.text).toBe(answered.text)
    expect(up.count(`/ledger/${res('live')}/`)).toBe(1)
  })

  test('finding 3: a killed replica\'s claim is abandoned one lease later on every replica, the one 20 s behind too; their /unknown lists agree', async () => {
    const doomed = await start('doomed')
    const sent = write(doomed, 'crash', '1', 'k-crash', 'hang').catch(() => undefined)
    await until(() => up.count(`/ledger/${res('crash')}/`) === 1, { message: 'the request to reach the upstream' })
    await doomed.stop('SIGKILL')
    await sent
    const killedAt = Date.now()
    // within a lease (and a renewal's quarter) of the kill, the slow replica reports the crash
    const unknown = await until(async () => {
      const r = await write(slow, 'crash', '1', 'k-crash', 'hang')
      return r.status === 409 && r.json().type === 'urn:fencegate:problem:outcome-unknown' && r
    }, { timeoutMs: 10_000, intervalMs: 100, message: 'the slow replica to answer 409 outcome-unknown' })
    expect(unknown.json().reason).toBe('crash')
    expect(Date.now() - killedAt).toBeLessThan(LEASE_MS + 2_500)
    const lists = await Promise.all([a, fast, slow].map(async (g) => (await send(`${g.adminUrl}/unknown`)).json().unknown.map((u: { keyHash: string; reason: string }) => `${u.keyHash} ${u.reason}`).sort()))
    expect(lists[0]).toHaveLength(1)
    expect(lists[1]).toEqual(lists[0])
    expect(lists[2]).toEqual(lists[0])
    expect(up.count(`/ledger/${res('crash')}/`)).toBe(1)
  })

  test('finding 2: serialize: store keeps the order from the fast replica: token 6 sent there waits for token 5 sent on A', async () => {
    const older = write(a, 'order', '5', undefined, 'apply?ms=1500')
    await until(() => up.applied.some((e) => e.url.includes(`/${res('order')}/`) && e.token === '5'), { message: 'token 5 to reach the upstream' })
    const newer = await write(fast, 'order', '6', undefined, 'apply')
    expect(newer.status).toBe(201)
    expect((await older).status).toBe(201)
    const order = up.applied.filter((e) => e.url.includes(`/${res('order')}/`)).map((e) => `${e.event} ${e.token}`)
    expect(order).toEqual(['arrived 5', 'applied 5', 'arrived 6', 'applied 6'])
  })
})
}
