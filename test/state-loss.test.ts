// Contract §3: a store that comes back without its data (Redis restarted without persistence,
// a replaced SQLite file) is detected, reported on /readyz and in metrics, and — with the
// default onStateLoss: fail-closed — nothing is forwarded until an operator accepts the loss.
import { afterAll, afterEach, beforeAll, describe, expect, test } from 'vitest'
import { join } from 'node:path'
import { hostname } from 'node:os'
import { renameSync, writeFileSync, copyFileSync } from 'node:fs'
import { Redis } from 'ioredis'
import { startUpstream, type Upstream } from './helpers/upstream.js'
import { startTestGateway, gatewayConfig, type RouteSpec, type StoreInput, type TestGateway } from './helpers/gateway.js'
import { runCli } from './helpers/run.js'
import { expectProblem, post, send, metrics, metric } from './helpers/http.js'
import { until } from './helpers/wait.js'
import { PG_URL, dropPostgresSchema } from './helpers/stores.js'
import pg from 'pg'

const REDIS_URL = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379'
let up: Upstream
let redis: Redis
const pgAdmin = new pg.Pool({ connectionString: PG_URL, max: 1 })
const gateways: TestGateway[] = []
beforeAll(async () => { up = await startUpstream(); redis = new Redis(REDIS_URL) })
afterEach(async () => { for (const g of gateways.splice(0)) await g.close() })
afterAll(async () => { await up?.close(); redis?.disconnect(); await pgAdmin.end() })

const ledger = (): RouteSpec => ({ name: 'ledger', path: '/ledger/:res', upstream: up.url })
const fenced = (): RouteSpec => ({ ...ledger(), fencing: { resource: '{param.res}' } })
/** Waits until /readyz answers `status` (the gateway sees the store's state on its own schedule). */
const readyz = (gw: TestGateway, status: number) =>
  until(async () => (await send(`${gw.adminUrl}/readyz`)).status === status, { timeoutMs: 4000, intervalMs: 100, message: `/readyz to answer ${status}` })
/** Drops every key of a prefix: what a Redis restarted without persistence looks like. */
async function wipe(prefix: string) {
  const keys = await redis.keys(`*fg:${prefix}:*`)
  if (keys.length) await redis.del(...keys)
  return keys.length
}

async function redisGateway(prefix: string, onStateLoss: 'fail-closed' | 'accept') {
  const store: StoreInput = { kind: 'redis', url: REDIS_URL, keyPrefix: prefix, onStateLoss }
  const gw = await startTestGateway({ store, routes: [fenced()] })
  gateways.push(gw)
  // the same store for the CLI's accept-loss
  const file = join(gw.dir, 'accept.yaml')
  writeFileSync(file, gatewayConfig({ store, routes: [ledger()] }))
  return { gw, file }
}

describe('store state loss', () => {
  test('redis restarted without persistence: 503 store-state-lost, nothing forwarded, /readyz 503, until accept-loss', async () => {
    const prefix = `loss-${process.pid}-${Date.now()}`
    const { gw, file } = await redisGateway(prefix, 'fail-closed')
    expect((await post(`${gw.url}/ledger/a`, {}, { 'fencing-token': '5' })).status).toBe(201)
    expect(await wipe(prefix)).toBeGreaterThan(0)
    await readyz(gw, 503)
    const before = up.count('/ledger/a')
    const r = await post(`${gw.url}/ledger/a`, {}, { 'fencing-token': '6' })
    expectProblem(r, { status: 503, type: 'store-state-lost' })
    expect(up.count('/ledger/a')).toBe(before)
    const m = await metrics(gw.adminUrl)
    expect(metric(m, 'fencegate_store_state_lost', { store: 'redis' })).toBe(1)
    expect(metric(m, 'fencegate_store_state_losses_total', { store: 'redis' })).toBe(1)
    expect(gw.logs.join('')).toContain('store lost its state')

    const accept = await runCli(['store', 'accept-loss', '--config', file])
    expect(accept.stderr).toBe('')
    expect(accept.status).toBe(0)
    await readyz(gw, 200)
    // the mark of 5 is gone: that is what the operator accepted
    expect((await post(`${gw.url}/ledger/a`, {}, { 'fencing-token': '1' })).status).toBe(201)
    expect(metric(await metrics(gw.adminUrl), 'fencegate_store_state_lost', { store: 'redis' })).toBe(0)
    await wipe(prefix)
  })

  test('onStateLoss: accept carries on, counted and logged', async () => {
    const prefix = `loss-acc-${process.pid}-${Date.now()}`
    const { gw } = await redisGateway(prefix, 'accept')
    expect((await post(`${gw.url}/ledger/b`, {}, { 'fencing-token': '5' })).status).toBe(201)
    await wipe(prefix)
    await until(async () => metric(await metrics(gw.adminUrl), 'fencegate_store_state_losses_total', { store: 'redis' }) === 1, { timeoutMs: 4000, intervalMs: 100, message: 'the loss to be counted' })
    expect((await post(`${gw.url}/ledger/b`, {}, { 'fencing-token': '1' })).status).toBe(201)
    expect((await send(`${gw.adminUrl}/readyz`)).status).toBe(200)
    await wipe(prefix)
  })

  test('a replaced SQLite file is detected: fenced routes fail closed', async () => {
    const gw = await startTestGateway({ store: { kind: 'sqlite', path: '@DIR@/fg.db' }, routes: [fenced()] })
    gateways.push(gw)
    expect((await post(`${gw.url}/ledger/c`, {}, { 'fencing-token': '5' })).status).toBe(201)
    // an operator restores an older copy over the live file
    copyFileSync(join(gw.dir, 'fg.db'), join(gw.dir, 'old.db'))
    renameSync(join(gw.dir, 'old.db'), join(gw.dir, 'fg.db'))
    await readyz(gw, 503)
    expectProblem(await post(`${gw.url}/ledger/c`, {}, { 'fencing-token': '6' }), { status: 503, type: 'store-state-lost' })
  })

  // Acknowledged writes lost while the epoch stayed: what a failover to a lagging replica, or a
  // restore of an older backup, leaves. The gateway that saw the writes notices at its next write
  // (the write sequence, src/store/state-loss/sequence.ts); it retires the epoch so the others follow.
  const partial: [string, (id: string) => StoreInput, (id: string) => Promise<void>, (id: string) => Promise<void>][] = [
    ['redis', (id) => ({ kind: 'redis', url: REDIS_URL, keyPrefix: id }),
      async (id) => {
        await redis.set(`{fg:${id}:f:a}`, '5')
        await redis.decr(`{fg:${id}:seq}`)
      },
      async (id) => { await wipe(id) }],
    ['postgres', (id) => ({ kind: 'postgres', url: PG_URL, schema: id }),
      async (id) => {
        await pgAdmin.query(`UPDATE "${id}".fg_fences_v1 SET highest = 5 WHERE resource = 'a'`)
        await pgAdmin.query(`UPDATE "${id}".fg_seq_v1 SET n = n - 1`)
      },
      async (id) => { await dropPostgresSchema(id) }],
  ]
  for (const [kind, storeOf, rollBack, drop] of partial) {
    test(`${kind} went back in time (the last write lost, the epoch kept): 503 store-state-lost on every gateway, nothing forwarded, until accept-loss`, async () => {
      const id = `fg_back_${process.pid}_${Date.now()}`
      const store = storeOf(id)
      const a = await startTestGateway({ store, routes: [fenced()] })
      gateways.push(a)
      const b = await startTestGateway({ store, routes: [fenced()] })
      gateways.push(b)
      try {
        expect((await post(`${a.url}/ledger/a`, {}, { 'fencing-token': '5' })).status).toBe(201)
        expect((await post(`${a.url}/ledger/a`, {}, { 'fencing-token': '9' })).status).toBe(201)
        await rollBack(id)
        const before = up.count('/ledger/a')
        // token 7 passes a store whose mark fell back to 5: a, which saw 9 accepted, refuses it
        expectProblem(await post(`${a.url}/ledger/a`, {}, { 'fencing-token': '7' }), { status: 503, type: 'store-state-lost' })
        expect(up.count('/ledger/a')).toBe(before)
        expect(a.logs.join('')).toMatch(/store went back in time.*sequence \d+ after \d+ was seen/)
        // b never saw token 9: it learns of the loss from the epoch a retired
        await readyz(b, 503)
        expectProblem(await post(`${b.url}/ledger/a`, {}, { 'fencing-token': '7' }), { status: 503, type: 'store-state-lost' })
        expect(up.count('/ledger/a')).toBe(before)
        await readyz(a, 503)
        for (const gw of [a, b]) expect(metric(await metrics(gw.adminUrl), 'fencegate_store_state_lost', { store: kind })).toBe(1)
        // b names what a saw, where and when: the note a left in the store
        const noted = /write sequence: sequence (\d+) after (\d+) was seen \(by gateway (\S+) at (\S+), on /
        const ready = (await send(`${b.adminUrl}/readyz`)).json()
        expect(ready.seen).toMatch(noted)
        const [, now, was, by, at] = noted.exec(ready.seen)!
        expect(BigInt(now)).toBeLessThan(BigInt(was))
        expect(by).toBe(`${hostname()}:${process.pid}`)
        expect(Math.abs(Date.parse(at) - Date.now())).toBeLessThan(30_000)
        const doctorB = (await send(`${b.adminUrl}/doctor`)).json()
        expect(doctorB.findings.find((f: { id: string }) => f.id === 'state-loss')?.setting).toMatch(noted)
        // a gateway started after the loss finds the note and refuses too
        const c = await startTestGateway({ store, routes: [fenced()] })
        gateways.push(c)
        await readyz(c, 503)
        expectProblem(await post(`${c.url}/ledger/a`, {}, { 'fencing-token': '7' }), { status: 503, type: 'store-state-lost' })
        expect(up.count('/ledger/a')).toBe(before)
        // and the operator's doctor prints it, with the way out
        const file = join(a.dir, 'accept.yaml')
        writeFileSync(file, gatewayConfig({ store, routes: [ledger()] }))
        const doctor = await runCli(['doctor', '--config', file])
        expect(doctor.status).toBe(1)
        expect(doctor.stdout).toMatch(/RISK\s+state-loss: loss noted in the store, write sequence: sequence \d+ after \d+ was seen \(by gateway /)
        expect(doctor.stdout).toContain('fencegate store accept-loss')
        expect(doctor.stderr).toContain('the store lost acknowledged state')

        const accept = await runCli(['store', 'accept-loss', '--config', file])
        expect(accept.stderr).toBe('')
        expect(accept.stdout).toMatch(/loss note cleared: write sequence: sequence \d+ after \d+ was seen/)
        for (const gw of [a, b, c]) await readyz(gw, 200)
        // what the operator accepted: the mark is 5 now
        expect((await post(`${b.url}/ledger/a`, {}, { 'fencing-token': '7' })).status).toBe(201)
        expect((await post(`${a.url}/ledger/a`, {}, { 'fencing-token': '8' })).status).toBe(201)
        expect((await post(`${c.url}/ledger/a`, {}, { 'fencing-token': '8' })).status).toBe(201)
        const cleared = await runCli(['doctor', '--config', file])
        expect(cleared.stdout).not.toContain('state-loss')
        expect((await send(`${b.adminUrl}/doctor`)).text).not.toContain('state-loss')
      } finally {
        for (const gw of gateways.splice(0)) await gw.close()
        await drop(id)
      }
    })
  }
})

describe('lease calls during a store state loss (contract §3a, §3)', () => {
  test('POST, PUT and DELETE answer 503 store-state-lost and grant nothing until accept-loss; then a grant works again', async () => {
    const prefix = `loss-lease-${process.pid}-${Date.now()}`
    const store: StoreInput = { kind: 'redis', url: REDIS_URL, keyPrefix: prefix }
    const gw = await startTestGateway({ store, leases: { resources: ['account:*'], defaultTtl: '30s' }, routes: [fenced()] })
    gateways.push(gw)
    const file = join(gw.dir, 'accept.yaml')
    writeFileSync(file, gatewayConfig({ store, routes: [ledger()] }))
    const lease = (r: string) => `${gw.url}/_fencegate/leases/${encodeURIComponent(`account:${r}`)}`
    const granted = async () => metric(await metrics(gw.adminUrl), 'fencegate_leases_total', { result: 'granted' })
    try {
      const first = await post(lease('a'), { holder: 'worker-1' })
      expect(first.status).toBe(201)
      const token = first.json().token as string
      expect(await granted()).toBe(1)

      expect(await wipe(prefix)).toBeGreaterThan(0)
      await readyz(gw, 503)
      expectProblem(await post(lease('b'), { holder: 'worker-2' }), { status: 503, type: 'store-state-lost' })
      expectProblem(await send(lease('a'), { method: 'PUT', headers: { 'fencing-token': token } }), { status: 503, type: 'store-state-lost' })
      expectProblem(await send(lease('a'), { method: 'DELETE', headers: { 'fencing-token': token } }), { status: 503, type: 'store-state-lost' })
      expect(await granted()).toBe(1)

      const accept = await runCli(['store', 'accept-loss', '--config', file])
      expect(accept.status).toBe(0)
      await readyz(gw, 200)
      const again = await post(lease('b'), { holder: 'worker-2' })
      expect(again.status).toBe(201)
      expect(again.headers['fencing-token']).toBe(again.json().token)
      expect(await granted()).toBe(2)
    } finally {
      await wipe(prefix)
    }
  })
})
