// The SQLite file on a filesystem that fills up while the gateway serves: what needs no new state
// (a replay, a stale token's 412) is still answered, what needs a write (a new key) fails closed
// with 503 and is never forwarded, and the gateway serves new keys again once there is room.
// Needs root for the tmpfs mount (CI runs as root).
import { execFileSync } from 'node:child_process'
import { mkdirSync, rmSync, unlinkSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, test } from 'vitest'
import { gatewayConfig, startTestGateway, tempDir, type TestGateway } from './helpers/gateway.js'
import { startUpstream, type Upstream } from './helpers/upstream.js'
import { metric, metrics, post, send, type Reply } from './helpers/http.js'
import { until } from './helpers/wait.js'
import { runCli } from './helpers/run.js'

const root = process.getuid?.() === 0
if (!root) console.warn('test/disk-full.test.ts: mounting a tmpfs needs root; these tests are not run by this user')

describe.runIf(root)('a full disk under the SQLite store', () => {
  const dir = tempDir('fg-disk-')
  const mnt = join(dir, 'mnt')
  const ballast = join(mnt, 'ballast')
  let up: Upstream
  let gw: TestGateway
  const stored = new Map<string, Reply>()
  const charge = (key: string, token = '7', body: unknown = { amount: 1 }) =>
    post(`${gw.url}/ledger/acct/charge`, body, { 'fencing-token': token, 'idempotency-key': key })

  beforeAll(async () => {
    mkdirSync(mnt)
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=6m', 'tmpfs', mnt])
    up = await startUpstream()
    gw = await startTestGateway({
      store: { kind: 'sqlite', path: join(mnt, 'fg.db') },
      routes: [{ name: 'ledger', path: '/ledger/:res/*', upstream: up.url, fencing: { resource: '{param.res}' }, idempotency: { required: true } }],
    })
    for (let i = 0; i < 40; i++) {
      const r = await charge(`k${i}`, '7', { amount: i })
      expect(r.status).toBe(201)
      stored.set(`k${i}`, r)
    }
    // fill what is left of the filesystem
    try { execFileSync('dd', ['if=/dev/zero', `of=${ballast}`, 'bs=64k'], { stdio: 'ignore' }) } catch { /* dd ends with ENOSPC */ }
  })
  afterAll(async () => {
    await gw?.close()
    await up?.close()
    try { execFileSync('umount', ['-l', mnt]) } catch { /* not mounted */ }
    rmSync(dir, { recursive: true, force: true })
  })

  test('a new key is refused with 503 naming the full disk, and never forwarded', async () => {
    const before = up.count('/ledger/')
    for (let i = 0; i < 5; i++) {
      const r = await charge(`new${i}`)
      expect(r.status).toBe(503)
      expect(r.json().type).toBe('urn:fencegate:problem:store-unavailable')
      expect(r.json().detail).toMatch(/disk/)
    }
    expect(up.count('/ledger/')).toBe(before)
    const text = await metrics(gw.adminUrl)
    expect(metric(text, 'fencegate_store_full_total', { store: 'sqlite', limit: 'disk' })).toBeGreaterThan(0)
  })

  test('stored keys are replayed byte for byte while the disk is full', async () => {
    const before = up.count('/ledger/')
    for (let i = 0; i < 10; i++) {
      const r = await charge(`k${i}`, '7', { amount: i })
      const first = stored.get(`k${i}`)!
      expect(r.status).toBe(201)
      expect(r.headers['idempotent-replayed']).toBe('true')
      expect(r.body.equals(first.body)).toBe(true)
    }
    expect(up.count('/ledger/')).toBe(before)
    const text = await metrics(gw.adminUrl)
    expect(metric(text, 'fencegate_idempotency_total', { route: 'ledger', result: 'replayed' })).toBe(10)
  })

  test('a stale token is still refused with 412', async () => {
    const r = await charge('k0', '3', { amount: 0 })
    expect(r.status).toBe(412)
    expect(r.json().type).toBe('urn:fencegate:problem:stale-fencing-token')
  })

  test('/readyz names the full disk; the attempt entries that could not be written are counted as dropped', async () => {
    const r = await send(`${gw.adminUrl}/readyz`)
    expect(r.status).toBe(200)
    expect(r.json().disk).toMatch(/SQLITE_FULL/)
    await until(async () => metric(await metrics(gw.adminUrl), 'fencegate_audit_dropped_total', { reason: 'store_error' }) > 0, { message: () => 'dropped attempt entries to be counted' })
    const lines = gw.logs.filter((l) => l.includes('attempt log entries not written'))
    expect(lines).toHaveLength(1)
  })

  test('fencegate doctor names the full disk', async () => {
    const file = join(dir, 'doctor.yaml')
    writeFileSync(file, gatewayConfig({ store: { kind: 'sqlite', path: join(mnt, 'fg.db') }, routes: [{ name: 'ledger', path: '/ledger/*', upstream: up.url }] }))
    const r = await runCli(['doctor', '--config', file, '--json'], { timeout: 20_000 })
    expect(r.stdout, r.stderr).toContain('findings')
    const disk = JSON.parse(r.stdout).findings.find((f: { id: string }) => f.id === 'disk')
    expect(disk.status).toBe('risk')
    expect(disk.setting).toMatch(/^0\.0 MiB free|SQLITE_FULL/)
  })

  test('with room again, new keys are forwarded within a second and every stored key still replays', async () => {
    unlinkSync(ballast)
    const start = Date.now()
    const r = await until(async () => { const x = await charge('after'); return x.status === 201 && x }, { timeoutMs: 1000, intervalMs: 20 })
    expect(Date.now() - start).toBeLessThan(1000)
    expect(r.headers['idempotent-replayed']).toBeUndefined()
    for (let i = 0; i < 40; i++) {
      const again = await charge(`k${i}`, '7', { amount: i })
      expect(again.status).toBe(201)
      expect(again.body.equals(stored.get(`k${i}`)!.body)).toBe(true)
    }
  })
})
