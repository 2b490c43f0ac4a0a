// Contract §3/§4: when the store cannot answer, nothing is forwarded (503 store-unavailable,
// within store.timeout plus a little) and /readyz turns 503 until it answers again.
import { afterAll, beforeAll, describe, expect, test } from 'vitest'
import Database from 'better-sqlite3'
import { startUpstream, type Upstream } from './helpers/upstream.js'
import { startTestGateway, type TestGateway } from './helpers/gateway.js'
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { expectProblem, post, send, metrics, metric } from './helpers/http.js'
import { runCli } from './helpers/run.js'

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
    expectProblem(third, { status: 503, type: 'store-unavailable', detail: 'store.maxResources', members: { limit: 'max_resources', max: 2 } })
    expect(metric(await metrics(gw.adminUrl), 'fencegate_store_full_total', { store: 'memory', limit: 'max_resources' })).toBe(1)
    expect(gw.logs.join('')).toContain('max_resources')
    expect((await post(`${gw.url}/m/a`, {}, { 'fencing-token': '2' })).status).toBe(201)
    expect((await post(`${gw.url}/m/a`, {}, { 'fencing-token': '1' })).status).toBe(412)
  })
})

describe('a full memory store never forgets a completed record silently (store.maxRecords 3)', () => {
  const key = (n: number) => ({ 'idempotency-key': `full-${n}` })
  /** Six keys stored; a retry of each of the first three answered from its record (replayed), not forwarded. */
  async function fill(gw: TestGateway, path: string): Promise<void> {
    for (let n = 1; n <= 3; n++) expect((await post(`${gw.url}${path}`, { n }, key(n))).status).toBe(201)
  }

  test('by default a new key past the limit is refused with 503 naming the limit, counted, logged once; the records kept are replayed, never forwarded again', async () => {
    const gw = await startTestGateway({
      store: { kind: 'memory', maxRecords: 3 },
      routes: [{ name: 'full', path: '/full', upstream: up.url, idempotency: { required: true } }],
    })
    try {
      await fill(gw, '/full')
      const forwarded = up.count('/full')
      for (let n = 4; n <= 7; n++) {
        const r = await post(`${gw.url}/full`, { n }, key(n))
        expectProblem(r, { status: 503, type: 'store-unavailable', detail: ['store.maxRecords', '3'], members: { limit: 'max_records', max: 3 }, headers: { 'retry-after': /^\d+$/ } })
      }
      expect(up.count('/full')).toBe(forwarded)
      // the first key's retry: answered from its record, the upstream not called again
      const retry = await post(`${gw.url}/full`, { n: 1 }, key(1))
      expect(retry.status).toBe(201)
      expect(retry.headers['idempotent-replayed']).toBe('true')
      expect(up.count('/full')).toBe(forwarded)
      const m = await metrics(gw.adminUrl)
      expect(metric(m, 'fencegate_store_full_total', { store: 'memory', limit: 'max_records' })).toBe(4)
      expect(metric(m, 'fencegate_idempotency_evicted_total', { route: 'full' })).toBe(0)
      expect(metric(m, 'fencegate_requests_total', { route: 'full', outcome: 'store_error', code: '503' })).toBe(4)
      // one line for four refusals within the minute
      expect(gw.logs.join('').match(/the store is full/g)).toHaveLength(1)
      const doctor = await send(`${gw.adminUrl}/doctor`)
      const finding = JSON.parse(doctor.body.toString()).findings.find((f: { id: string }) => f.id === 'maxRecords')
      expect(finding.setting).toMatch(/^store\.maxRecords 3 \(3 of 3 held, [\d.]+ new keys an hour/)
      expect(finding.consequence).toMatch(/the limit holds \d+ min of new keys, shorter than the longest idempotency\.ttl \(24 h\)/)
      // the command line asks the running gateway: only it knows its records
      const file = join(gw.dir, 'doctor.yaml')
      writeFileSync(file, `listen: 127.0.0.1:1\nadmin:\n  listen: ${new URL(gw.adminUrl).host}\nstore:\n  kind: memory\n  maxRecords: 3\nroutes:\n  - name: full\n    match:\n      path: /full\n    upstream:\n      url: ${up.url}\n    idempotency:\n      required: true\n`)
      const cli = await runCli(['doctor', '--config', file], { timeout: 20_000 })
      expect(cli.stdout).toMatch(/RISK +maxRecords: store\.maxRecords 3 \(3 of 3 held/)
      const claim = JSON.parse((await send(`${gw.adminUrl}/audit`)).body.toString()).routes[0].claim
      expect(claim.guarantees.join(' ')).toContain('a request with a new key is refused with 503')
    } finally {
      await gw.close()
    }
  })

  test('with store.acceptRisks [maxRecords] the oldest completed record goes, each eviction counted; its retry is forwarded again only with the eviction counted', async () => {
    const gw = await startTestGateway({
      store: { kind: 'memory', maxRecords: 3, acceptRisks: ['maxRecords'] },
      routes: [{ name: 'evicting', path: '/evicting', upstream: up.url, idempotency: { required: true } }],
    })
    try {
      const zero = await metrics(gw.adminUrl)
      expect(metric(zero, 'fencegate_idempotency_evicted_total', { route: 'evicting' })).toBe(0)
      await fill(gw, '/evicting')
      for (let n = 4; n <= 7; n++) expect((await post(`${gw.url}/evicting`, { n }, key(n))).status).toBe(201)
      let m = await metrics(gw.adminUrl)
      expect(metric(m, 'fencegate_idempotency_evicted_total', { route: 'evicting' })).toBe(4)
      expect(metric(m, 'fencegate_store_full_total', { store: 'memory', limit: 'max_records' })).toBe(0)
      // the newest three are kept and replayed
      expect((await post(`${gw.url}/evicting`, { n: 7 }, key(7))).headers['idempotent-replayed']).toBe('true')
      const before = up.count('/evicting')
      const retry = await post(`${gw.url}/evicting`, { n: 1 }, key(1))
      expect(retry.status).toBe(201)
      expect(retry.headers['idempotent-replayed']).toBeUndefined()
      expect(up.count('/evicting')).toBe(before + 1)
      m = await metrics(gw.adminUrl)
      // the retry's record took a place in turn: a fifth eviction
      expect(metric(m, 'fencegate_idempotency_evicted_total', { route: 'evicting' })).toBe(5)
      expect(gw.logs.join('')).toContain('store.acceptRisks: maxRecords')
      const claim = JSON.parse((await send(`${gw.adminUrl}/audit`)).body.toString()).routes[0].claim
      expect(claim.guarantees.join(' ')).toContain('for 24h (idempotency.ttl) or the newest 3 records (store.maxRecords), whichever is shorter')
    } finally {
      await gw.close()
    }
  })
})
