// Contract §3: a store that comes back without its data (Redis restarted without persistence,
// a replaced SQLite file) is detected, reported on /readyz and in metrics, and — with the
// default onStateLoss: fail-closed — nothing is forwarded until an operator accepts the loss.
import { afterAll, afterEach, beforeAll, describe, expect, test } from 'vitest'
import { spawnSync } from 'node:child_process'
import { join } from 'node:path'
import { renameSync, writeFileSync, copyFileSync } from 'node:fs'
import { Redis } from 'ioredis'
import { startUpstream, type Upstream } from './helpers/upstream.js'
import { startTestGateway, route, CLI, type TestGateway } from './helpers/gateway.js'
import { post, send, metrics, metric } from './helpers/http.js'

const REDIS_URL = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379'
let up: Upstream
let redis: Redis
const gateways: TestGateway[] = []
beforeAll(async () => { up = await startUpstream(); redis = new Redis(REDIS_URL) })
afterEach(async () => { for (const g of gateways.splice(0)) await g.close() })
afterAll(async () => { await up?.close(); redis?.disconnect() })

const fencedRoutes = () => `routes:\n${route('ledger', '/ledger/:res', up.url, '    fencing:\n      resource: "{param.res}"\n')}`
const until = async (what: () => Promise<boolean>, ms = 4000) => {
  const end = Date.now() + ms
  while (Date.now() < end) { if (await what()) return true; await new Promise((r) => setTimeout(r, 100)) }
  return false
}
/** Drops every key of a prefix: what a Redis restarted without persistence looks like. */
async function wipe(prefix: string) {
  const keys = await redis.keys(`*fg:${prefix}:*`)
  if (keys.length) await redis.del(...keys)
  return keys.length
}

async function redisGateway(prefix: string, policy: string) {
  const store = `store:\n  kind: redis\n  url: ${REDIS_URL}\n  keyPrefix: ${prefix}\n  onStateLoss: ${policy}\n`
  const gw = await startTestGateway(store + fencedRoutes())
  gateways.push(gw)
  const file = join(gw.dir, 'accept.yaml')
  writeFileSync(file, `${store}routes:\n${route('ledger', '/ledger/:res', up.url)}`)
  return { gw, file }
}

describe('store state loss', () => {
  test('redis restarted without persistence: 503 store-state-lost, nothing forwarded, /readyz 503, until accept-loss', async () => {
    const prefix = `loss-${process.pid}-${Date.now()}`
    const { gw, file } = await redisGateway(prefix, 'fail-closed')
    expect((await post(`${gw.url}/ledger/a`, {}, { 'fencing-token': '5' })).status).toBe(201)
    expect(await wipe(prefix)).toBeGreaterThan(0)
    expect(await until(async () => (await send(`${gw.adminUrl}/readyz`)).status === 503)).toBe(true)
    const before = up.count('/ledger/a')
    const r = await post(`${gw.url}/ledger/a`, {}, { 'fencing-token': '6' })
    expect(r.status).toBe(503)
    expect(r.json().type).toBe('urn:fencegate:problem:store-state-lost')
    expect(up.count('/ledger/a')).toBe(before)
    const m = await metrics(gw.adminUrl)
    expect(metric(m, 'fencegate_store_state_lost', { store: 'redis' })).toBe(1)
    expect(metric(m, 'fencegate_store_state_losses_total', { store: 'redis' })).toBe(1)
    expect(gw.logs.join('')).toContain('store lost its state')

    const accept = spawnSync(process.execPath, [CLI, 'store', 'accept-loss', '--config', file], { encoding: 'utf8' })
    expect(accept.stderr).toBe('')
    expect(accept.status).toBe(0)
    expect(await until(async () => (await send(`${gw.adminUrl}/readyz`)).status === 200)).toBe(true)
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
    expect(await until(async () => metric(await metrics(gw.adminUrl), 'fencegate_store_state_losses_total', { store: 'redis' }) === 1)).toBe(true)
    expect((await post(`${gw.url}/ledger/b`, {}, { 'fencing-token': '1' })).status).toBe(201)
    expect((await send(`${gw.adminUrl}/readyz`)).status).toBe(200)
    await wipe(prefix)
  })

  test('a replaced SQLite file is detected: fenced routes fail closed', async () => {
    const gw = await startTestGateway(`store:\n  kind: sqlite\n  path: @DIR@/fg.db\n${fencedRoutes()}`)
    gateways.push(gw)
    expect((await post(`${gw.url}/ledger/c`, {}, { 'fencing-token': '5' })).status).toBe(201)
    // an operator restores an older copy over the live file
    copyFileSync(join(gw.dir, 'fg.db'), join(gw.dir, 'old.db'))
    renameSync(join(gw.dir, 'old.db'), join(gw.dir, 'fg.db'))
    expect(await until(async () => (await send(`${gw.adminUrl}/readyz`)).status === 503)).toBe(true)
    const r = await post(`${gw.url}/ledger/c`, {}, { 'fencing-token': '6' })
    expect(r.json().type).toBe('urn:fencegate:problem:store-state-lost')
  })
})
