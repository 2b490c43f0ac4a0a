// Contract §3/§4: when the store cannot answer, nothing is forwarded (503 store-unavailable,
// within store.timeout plus a little) and /readyz turns 503 until it answers again.
import { afterAll, beforeAll, describe, expect, test } from 'vitest'
import Database from 'better-sqlite3'
import { startUpstream, type Upstream } from './helpers/upstream.js'
import { startTestGateway, type TestGateway } from './helpers/gateway.js'
import { expectProblem, post, send, metrics, metric } from './helpers/http.js'

let up: Upstream
beforeAll(async () => { up = await startUpstream() })
afterAll(async () => { await up?.close() })

describe('fail closed', () => {
  let gw: TestGateway
  afterAll(async () => { await gw?.close() })

  test('a SQLite store locked by another writer: 503 store-unavailable, nothing forwarded, /readyz 503; back when the lock goes', async () => {
    gw = await startTestGateway({
      store: { kind: 'sqlite', path: '@DIR@/fg.db', timeout: '300ms' },
      routes: [{ name: 'locked', path: '/locked/:res', upstream: up.url, fencing: { resource: '{param.res}' }, idempotency: { required: true } }],
    })
    const other = new Database(`${gw.dir}/fg.db`)
    other.exec('BEGIN IMMEDIATE')
    try {
      const before = up.count('/locked')
      const t0 = Date.now()
      const r = await post(`${gw.url}/locked/a`, {}, { 'fencing-token': '1', 'idempotency-key': 'k1' })
      expectProblem(r, { status: 503, type: 'store-unavailable', headers: { 'retry-after': /^[1-9]\d*$/ } })
      expect(Date.now() - t0).toBeLessThan(2000)
      expect(up.count('/locked')).toBe(before)
      expect((await send(`${gw.adminUrl}/readyz`)).status).toBe(503)
      const m = await metrics(gw.adminUrl)
      // fence and claim go to the store as one call on a route with both
      expect(metric(m, 'fencegate_store_errors_total', { store: 'sqlite', op: 'admit' })).toBeGreaterThanOrEqual(1)
      expect(metric(m, 'fencegate_requests_total', { route: 'locked', outcome: 'store_error', code: '503' })).toBe(1)
    } finally {
      other.exec('COMMIT')
      other.close()
    }
    expect((await send(`${gw.adminUrl}/readyz`)).status).toBe(200)
    expect((await post(`${gw.url}/locked/a`, {}, { 'fencing-token': '1', 'idempotency-key': 'k1' })).status).toBe(201)
  })
})

describe('memory store limits', () => {
  let gw: TestGateway
  afterAll(async () => { await gw?.close() })

  test('past store.maxResources a new resource gets 503 and a log line; known resources keep working', async () => {
    gw = await startTestGateway({
      store: { kind: 'memory', maxResources: 2 },
      routes: [{ name: 'm', path: '/m/:res', upstream: up.url, fencing: { resource: '{param.res}' } }],
    })
    expect((await post(`${gw.url}/m/a`, {}, { 'fencing-token': '1' })).status).toBe(201)
    expect((await post(`${gw.url}/m/b`, {}, { 'fencing-token': '1' })).status).toBe(201)
    const before = up.count('/m/c')
    const third = await post(`${gw.url}/m/c`, {}, { 'fencing-token': '1' })
    expect(third.status).toBe(503)
    expect(up.count('/m/c')).toBe(before)
    expect(gw.logs.join('')).toContain('maxResources')
    expect((await post(`${gw.url}/m/a`, {}, { 'fencing-token': '2' })).status).toBe(201)
    expect((await post(`${gw.url}/m/a`, {}, { 'fencing-token': '1' })).status).toBe(412)
  })
})
