// admin.readiness (contract §5a): what /readyz answers while the store cannot answer. A TCP proxy
// of the tests' own (./helpers/tcp-proxy.ts) sits between each gateway and the shared Redis and
// blackholes it: with `serving` /readyz stays 200 (the body says the store is unavailable), guarded
// routes answer 503 store-unavailable with Retry-After and plain routes are served; with `store`
// (the default) /readyz is 503, as before. Either way the outage is logged once with its cause.
import { randomUUID } from 'node:crypto'
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, test } from 'vitest'
import { startUpstream, type Upstream } from './helpers/upstream.js'
import { startTestGateway, gatewayConfig, tempDir, type TestGateway } from './helpers/gateway.js'
import { expectProblem, metric, metrics, post, send } from './helpers/http.js'
import { until } from './helpers/wait.js'
import { dropRedisPrefix, REDIS_URL } from './helpers/stores.js'
import { startTcpProxy, type TcpProxy } from './helpers/tcp-proxy.js'
import { runCli } from './helpers/run.js'

const run = randomUUID().replaceAll('-', '').slice(0, 10)
const target = new URL(REDIS_URL)

let up: Upstream
beforeAll(async () => { up = await startUpstream() })
afterAll(async () => { await up?.close() })

describe.each(['serving', 'store'] as const)('admin.readiness: %s through a store outage', (readiness) => {
  let proxy: TcpProxy
  let gw: TestGateway
  const prefix = `fgready-${readiness}-${run}`
  beforeAll(async () => {
    proxy = await startTcpProxy({ host: target.hostname, port: Number(target.port) })
    gw = await startTestGateway({
      admin: { readiness },
      store: { kind: 'redis', url: `redis://127.0.0.1:${proxy.port}`, keyPrefix: prefix, timeout: '500ms' },
      routes: [
        { name: 'pay', path: `/pay/${readiness}/:acct/*`, upstream: up.url, fencing: { resource: '{param.acct}' }, idempotency: { required: true } },
        { name: 'plain', path: `/plain/${readiness}/*`, upstream: up.url },
      ],
    })
  })
  afterAll(async () => {
    await gw?.close()
    await proxy?.close()
    await dropRedisPrefix(prefix)
  })

  let token = 0
  const pay = () => { token++; return post(`${gw.url}/pay/${readiness}/a/charge`, { token }, { 'fencing-token': String(token), 'idempotency-key': `k-${randomUUID()}` }) }
  const readyz = () => send(`${gw.adminUrl}/readyz`)

  test('/readyz follows admin.readiness; guarded routes fail closed, plain routes serve', async () => {
    const before = await readyz()
    expect(before.status).toBe(200)
    expect(before.json()).toMatchObject({ status: 'ready', store: 'redis', storeState: 'ready' })
    expect((await pay()).status).toBe(201)

    proxy.mode = 'blackhole'
    // the next check that meets the silent store says so in the body, whatever the status
    const down = await until(async () => { const r = await readyz(); return r.json().storeState === 'store unavailable' && r }, { timeoutMs: 10_000, intervalMs: 200, message: '/readyz to say the store is unavailable' })
    if (readiness === 'serving') {
      expect(down.status).toBe(200)
      expect(down.json()).toMatchObject({ status: 'ready', readiness: 'serving', store: 'redis', storeState: 'store unavailable' })
    } else {
      expect(down.status).toBe(503)
      expect(down.json()).toMatchObject({ status: 'store unavailable', store: 'redis', storeState: 'store unavailable' })
    }

    const forwarded = up.count(`/pay/${readiness}/`)
    expectProblem(await pay(), { status: 503, type: 'store-unavailable', headers: { 'retry-after': '1' } })
    expect(up.count(`/pay/${readiness}/`)).toBe(forwarded)
    const plain = await send(`${gw.url}/plain/${readiness}/x`)
    expect(plain.status).toBe(201)
    expect(up.count(`/plain/${readiness}/x`)).toBe(1)

    // the outage in the log: its first failure once, with its cause, however many calls fail
    await until(async () => metric(await metrics(gw.adminUrl), 'fencegate_store_errors_total') >= 5, { timeoutMs: 20_000, intervalMs: 200, message: 'five failed store calls' })
    const failures = () => gw.logs.map((l) => JSON.parse(l)).filter((l) => /^store call/.test(l.msg))
    expect(failures()).toEqual([expect.objectContaining({ level: 'error', store: 'redis', op: expect.any(String), error: expect.stringContaining('did not answer') })])

    // healed: the connections reset (what was held back is lost), new ones pass
    proxy.mode = 'pass'
    proxy.reset()
    await until(async () => (await readyz()).json().storeState === 'ready', { timeoutMs: 10_000, intervalMs: 200, message: '/readyz to say the store is ready again' })
    expect((await readyz()).status).toBe(200)
    const after = await until(async () => { const r = await pay(); return r.status !== 503 && r }, { timeoutMs: 10_000, intervalMs: 200, message: 'a write not answered 503 after the heal' })
    expect(after.status).toBe(201)
    expect(gw.logs.filter((l) => l.includes('store answers again'))).toHaveLength(1)
    expect(failures()).toHaveLength(1)
  })
})

test('admin.readiness accepts store or serving; anything else is a config error naming the path', async () => {
  const dir = tempDir('fg-readiness-')
  const file = join(dir, 'bad.yaml')
  writeFileSync(file, gatewayConfig({ admin: { readiness: 'always' as 'store' }, routes: [{ name: 'p', path: '/p/*', upstream: 'http://127.0.0.1:9' }] }))
  const r = await runCli(['check-config', '--config', file])
  expect(r.status).toBe(2)
  expect(r.stderr).toMatch(/admin\.readiness/)
})

describe.each(['serving', 'store'] as const)('admin.readiness: %s through a store state loss', (readiness) => {
  test('/readyz says the store state is lost (503 with store, 200 with serving) until the loss is accepted', async () => {
    const prefix = `fgready-lost-${readiness}-${run}`
    const gw = await startTestGateway({
      admin: { readiness, writeToken: 'write-secret' },
      store: { kind: 'redis', url: REDIS_URL, keyPrefix: prefix },
      routes: [{ name: 'pay', path: `/lost/${readiness}/:acct/*`, upstream: up.url, fencing: { resource: '{param.acct}' } }],
    })
    try {
      expect((await post(`${gw.url}/lost/${readiness}/a/charge`, {}, { 'fencing-token': '5' })).status).toBe(201)
      // a Redis restarted without persistence: every key of the prefix gone, the epoch marker with them
      await dropRedisPrefix(prefix)
      const readyz = () => send(`${gw.adminUrl}/readyz`)
      const lost = await until(async () => { const r = await readyz(); return r.json().storeState === 'store state lost' && r }, { timeoutMs: 10_000, intervalMs: 200, message: '/readyz to say the store state is lost' })
      if (readiness === 'serving') {
        expect(lost.status).toBe(200)
        expect(lost.json()).toMatchObject({ status: 'ready', readiness: 'serving', store: 'redis', storeState: 'store state lost', served: expect.stringContaining('accept-loss') })
        expect(lost.json().served).not.toContain('until the store answers')
      } else {
        expect(lost.status).toBe(503)
        expect(lost.json()).toMatchObject({ status: 'store state lost', store: 'redis', storeState: 'store state lost' })
      }
      expectProblem(await post(`${gw.url}/lost/${readiness}/a/charge`, {}, { 'fencing-token': '6' }), { status: 503, type: 'store-state-lost' })

      const accepted = await send(`${gw.adminUrl}/store/accept-loss`, { method: 'POST', headers: { 'content-type': 'application/json', authorization: 'Bearer write-secret' }, body: '{}' })
      expect(accepted.status).toBe(200)
      const ready = await until(async () => { const r = await readyz(); return r.json().storeState === 'ready' && r }, { timeoutMs: 10_000, intervalMs: 200, message: '/readyz to say the store is ready again' })
      expect(ready.status).toBe(200)
      expect(ready.json()).toMatchObject({ status: 'ready', store: 'redis', storeState: 'ready' })
    } finally {
      await gw.close()
      await dropRedisPrefix(prefix)
    }
  })
})
