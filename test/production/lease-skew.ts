// Two gateways sharing one Redis (./lease-skew-redis.test.ts) or one PostgreSQL
// (./lease-skew-postgres.test.ts), one on the true clock, one under faketime 20 s ahead (real
// processes). Leases run on the store's clock, so the gateway ahead never takes over a lease the
// other granted before it ends: never two live leases on one resource, tokens strictly rising
// across takeovers from either side, and the old holder's write refused (412) after each.
import { randomUUID } from 'node:crypto'
import { join } from 'node:path'
import { rmSync, writeFileSync } from 'node:fs'
import { afterAll, beforeAll, describe, expect, test } from 'vitest'
import { startUpstream, type Upstream } from '../helpers/upstream.js'
import { tempDir, freePort, spawnGateway, gatewayConfig, type ChildGateway, type StoreInput } from '../helpers/gateway.js'
import { expectProblem, post, send } from '../helpers/http.js'
import { until } from '../helpers/wait.js'
import { skewed } from '../helpers/faketime.js'
import { dropPostgresSchema, dropRedisPrefix, PG_URL, REDIS_URL } from '../helpers/stores.js'

const run = randomUUID().replaceAll('-', '').slice(0, 10)
const stores = {
  redis: { store: { kind: 'redis', url: REDIS_URL, keyPrefix: `fgls-${run}` }, drop: () => dropRedisPrefix(`fgls-${run}`) },
  postgres: { store: { kind: 'postgres', url: PG_URL, schema: `fgls_${run}`, pool: 4 }, drop: () => dropPostgresSchema(`fgls_${run}`) },
} as const satisfies Record<string, { store: StoreInput; drop(): Promise<void> }>

/** How far off the instants of two processes may be read (the store's offset is measured to half a round trip). */
const SLACK_MS = 250

export function describeLeaseSkew(kind: keyof typeof stores): void {
  const shared = stores[kind]
  const dir = tempDir('fg-lease-skew-')
  let up: Upstream
  let a: ChildGateway, fast: ChildGateway
  const start = async (name: string, launch = {}) => {
    const port = await freePort(), admin = await freePort()
    const file = join(dir, `${name}.yaml`)
    writeFileSync(file, gatewayConfig({
      listen: `127.0.0.1:${port}`,
      admin: { listen: `127.0.0.1:${admin}` },
      store: shared.store,
      leases: { resources: ['account:*'], defaultTtl: '1s', maxTtl: '1m' },
      routes: [{ name: 'accounts', path: '/accounts/:account/*', upstream: up.url, fencing: { resource: 'account:{param.account}' } }],
    }))
    return spawnGateway(file, port, admin, join(dir, `${name}.log`), [], launch)
  }
  beforeAll(async () => {
    up = await startUpstream()
    ;[a, fast] = await Promise.all([start('a'), start('fast', skewed('+20s'))])
  })
  afterAll(async () => {
    await Promise.all([a, fast].map((g) => g?.stop()))
    await up?.close()
    await shared.drop()
    rmSync(dir, { recursive: true, force: true })
  })

  const L = (g: ChildGateway, r: string) => `${g.url}/_fencegate/leases/account%3A${r}`
  const acquire = (g: ChildGateway, r: string, holder: string, ttl = '1s') => post(L(g, r), { holder, ttl })
  const charge = (g: ChildGateway, r: string, token: string) => post(`${g.url}/accounts/${r}/charges`, { amount: 1 }, { 'fencing-token': token })

  describe(`two gateways 20 s apart sharing ${kind}`, () => {
    test('the gateway ahead is refused while the other\'s lease lives, with a Retry-After of that lease, and takes over only after its end', async () => {
      const r = `${kind}-hold`
      const g = await acquire(a, r, 'a', '2s')
      expect(g.status).toBe(201)
      const end = Date.parse(g.json().expiresAt) // on the true clock
      const held = await acquire(fast, r, 'b')
      const p = expectProblem(held, { status: 409, type: 'lease-held', members: { holder: 'a' } })
      expect(Number(held.headers['retry-after'])).toBeLessThanOrEqual(2)
      // the lease's end as the fast gateway says it, on its own clock: 20 s after the true one
      expect(Math.abs(Date.parse(p.expiresAt) - end - 20_000)).toBeLessThan(1_000)
      const taken = await until(async () => { const t = await acquire(fast, r, 'b', '30s'); return t.status === 201 && { at: Date.now(), body: t.json() } }, { timeoutMs: 15_000, intervalMs: 50 })
      expect(taken.at).toBeGreaterThanOrEqual(end - SLACK_MS)
      expect(taken.body.token).toBe('2')
      expectProblem(await charge(a, r, '1'), { status: 412, type: 'stale-fencing-token', members: { highestToken: '2' } })
      expectProblem(await send(L(a, r), { method: 'PUT', headers: { 'fencing-token': '1' } }), { status: 412, type: 'stale-fencing-token' })
      expect((await charge(fast, r, '2')).status).toBe(201)
    })

    test('holders racing on both gateways: one lease at a time, tokens strictly rising, each takeover after the previous lease\'s end', async () => {
      const r = `${kind}-race`
      const grants: { token: bigint; at: number; end: number }[] = []
      for (let round = 0; round < 6; round++) {
        const tries = await until(async () => {
          const answers = await Promise.all([a, fast, a, fast].map((g, i) => acquire(g, r, `w${round}-${i}`)))
          return answers.some((x) => x.status === 201) && answers
        }, { timeoutMs: 15_000, intervalMs: 50 })
        const at = Date.now()
        const won = tries.filter((x) => x.status === 201)
        expect(won).toHaveLength(1)
        for (const x of tries) if (x.status !== 201) expect(x.status).toBe(409)
        // the lease as the gateway on the true clock reads it
        const live = (await send(L(a, r))).json()
        expect(live.token).toBe(won[0].json().token)
        grants.push({ token: BigInt(live.token), at, end: Date.parse(live.expiresAt) })
      }
      for (let i = 1; i < grants.length; i++) {
        expect(grants[i].token).toBeGreaterThan(grants[i - 1].token)
        expect(grants[i].at).toBeGreaterThanOrEqual(grants[i - 1].end - SLACK_MS)
      }
      // every token but the last is refused at the fence, whichever gateway it comes through
      for (const [i, g] of grants.slice(0, -1).entries()) expectProblem(await charge(i % 2 ? a : fast, r, g.token.toString()), { status: 412, type: 'stale-fencing-token' })
    })
  })
}
