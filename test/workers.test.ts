// `fencegate --workers N`: N processes on one port sharing a store, metrics summed over them by
// the primary's admin listener; the memory store (which cannot be shared) is refused.
import { randomUUID } from 'node:crypto'
import { join } from 'node:path'
import { rmSync, writeFileSync } from 'node:fs'
import { afterAll, beforeAll, describe, expect, test } from 'vitest'
import { Redis } from 'ioredis'
import { startUpstream, type Upstream } from './helpers/upstream.js'
import { tempDir, freePort, spawnGateway, ledgerConfig, type ChildGateway, type StoreInput } from './helpers/gateway.js'
import { runCli } from './helpers/run.js'
import { post, send, metrics, metric } from './helpers/http.js'

const REDIS_URL = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379'
const prefix = `fgwork-${randomUUID().slice(0, 8)}`
const dir = tempDir('fg-workers-')
let up: Upstream

const config = (port: number, admin: number, store: StoreInput) => ledgerConfig({ port, admin, store, upstream: up.url })

beforeAll(async () => { up = await startUpstream() })
afterAll(async () => {
  await up?.close()
  rmSync(dir, { recursive: true, force: true })
  const r = new Redis(REDIS_URL)
  const keys = await r.keys(`{fg:${prefix}:*`)
  if (keys.length) await r.del(...keys)
  r.disconnect()
})

test('the memory store with --workers 2 is refused with exit 2, saying why', async () => {
  const file = join(dir, 'memory.yaml')
  writeFileSync(file, config(0, 0, { kind: 'memory' }))
  const r = await runCli(['--config', file, '--workers', '2'], { timeout: 15_000 })
  expect(r.status).toBe(2)
  expect(r.stderr).toContain('store.kind: the memory store cannot be shared, so it cannot run with --workers 2')
})

test('--workers must be a whole number', async () => {
  const file = join(dir, 'memory.yaml')
  const r = await runCli(['--config', file, '--workers', 'two'], { timeout: 15_000 })
  expect(r.status).toBe(2)
  expect(r.stderr).toContain('--workers must be a whole number')
})

describe('--workers 2 on redis', () => {
  let g: ChildGateway
  beforeAll(async () => {
    const port = await freePort(), admin = await freePort()
    const file = join(dir, 'redis.yaml')
    writeFileSync(file, config(port, admin, { kind: 'redis', url: REDIS_URL, keyPrefix: prefix }))
    g = await spawnGateway(file, port, admin, join(dir, 'redis.log'), ['--workers', '2'])
  })
  afterAll(async () => { if (g) expect(await g.stop()).toBe(0) })

  test('one port serves every request; /metrics counts the requests of both workers', async () => {
    const replies = []
    for (let i = 1; i <= 30; i++) replies.push(await post(`${g.url}/ledger/w/charge`, { i }, { 'fencing-token': String(i), 'idempotency-key': `k${i}` }))
    expect(replies.map((r) => r.status)).toEqual(Array(30).fill(201))
    const text = await metrics(g.adminUrl)
    expect(metric(text, 'fencegate_requests_total', { route: 'ledger', code: '201', outcome: 'forwarded' })).toBe(30)
    expect(metric(text, 'fencegate_idempotency_total', { route: 'ledger', result: 'stored' })).toBe(30)
    expect(metric(text, 'fencegate_build_info')).toBe(1)
    expect((await send(`${g.adminUrl}/readyz`)).status).toBe(200)
    // a stale token is refused whichever worker gets it
    for (let i = 0; i < 4; i++) expect((await post(`${g.url}/ledger/w/charge`, {}, { 'fencing-token': '29', 'idempotency-key': `s${i}` })).status).toBe(412)
  })

  test('50 concurrent same-key requests over both workers reach the upstream once', async () => {
    const replies = await Promise.all(Array.from({ length: 50 }, () => post(`${g.url}/ledger/same/charge`, {}, { 'fencing-token': '1', 'idempotency-key': 'same' })))
    expect(up.count('/ledger/same/')).toBe(1)
    expect(replies.filter((r) => r.status === 201 && !r.headers['idempotent-replayed'])).toHaveLength(1)
  })
})
