// From an unknown outcome to its settlement (contract §8): `fencegate unknown` and admin
// `GET /unknown` list a record made unknown by an upstream timeout, with its key hash, resource,
// replica and time; `fencegate resolve --key-hash` settles it, and the key then behaves as the
// resolution says. On every store the CLI can reach (sqlite, redis, postgres), real processes.
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { writeFileSync, rmSync } from 'node:fs'
import { hostname } from 'node:os'
import { join } from 'node:path'
import { randomUUID } from 'node:crypto'
import { afterEach, describe, expect, test } from 'vitest'
import pg from 'pg'
import { freePort, gatewayConfig, startTestGateway, tempDir, type StoreInput, type TestGateway } from '../helpers/gateway.js'
import { runCli } from '../helpers/run.js'
import { expectProblem, metric, metrics, post, send } from '../helpers/http.js'

const PG_URL = process.env.PG_URL ?? 'postgres://postgres@127.0.0.1:5432/test'
const REDIS_URL = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379'

const cleanups: (() => Promise<void> | void)[] = []
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c()
})

/** An upstream that never answers a path's first request (after taking it) and answers 201 later. */
async function firstHangs() {
  const seen = new Map<string, number>()
  const server = http.createServer((req, res) => {
    req.resume()
    req.on('end', () => {
      const n = (seen.get(req.url!) ?? 0) + 1
      seen.set(req.url!, n)
      if (n === 1) return // taken, never answered: the gateway times out after the effect
      res.writeHead(201, { 'content-type': 'application/json' })
      res.end(JSON.stringify({ n }))
    })
  })
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r))
  cleanups.push(() => new Promise<void>((r) => { server.closeAllConnections(); server.close(() => r()) }))
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, hits: (path: string) => seen.get(path) ?? 0 }
}

const cli = (...args: string[]) => runCli(args, { timeout: 20_000 })

const stores: Record<string, () => Promise<StoreInput>> = {
  sqlite: async () => ({ kind: 'sqlite', path: '@DIR@/fg.db' }),
  redis: async () => ({ kind: 'redis', url: REDIS_URL, keyPrefix: `fgunk-${randomUUID().slice(0, 8)}` }),
  postgres: async () => {
    const schema = `fgunk_${randomUUID().replaceAll('-', '').slice(0, 12)}`
    cleanups.push(async () => {
      const c = new pg.Client({ connectionString: PG_URL })
      await c.connect()
      await c.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`)
      await c.end()
    })
    return { kind: 'postgres', url: PG_URL, schema, migrate: true }
  },
}

for (const [kind, storeBlock] of Object.entries(stores)) {
  describe(`unknown outcomes, found and settled (${kind})`, () => {
    async function setup(): Promise<{ gw: TestGateway; file: string; up: Awaited<ReturnType<typeof firstHangs>> }> {
      const up = await firstHangs()
      const dir = tempDir('fg-unknown-')
      cleanups.push(() => rmSync(dir, { recursive: true, force: true }))
      const text = gatewayConfig({
        admin: { writeToken: 'unknown-write' },
        store: await storeBlock(),
        routes: [{
          name: 'payments', path: '/accounts/:account/*', upstream: { url: up.url, timeout: '300ms' },
          fencing: { resource: 'account:{param.account}' }, idempotency: { required: true, scope: '{header.Authorization}' },
        }],
      }).replaceAll('@DIR@', dir)
      // the same file for the CLI
      const file = join(dir, 'fencegate.yaml')
      writeFileSync(file, text)
      const gw = await startTestGateway(text)
      cleanups.push(() => gw.close())
      return { gw, file, up }
    }

    test('listed with key hash, resource, reason and replica; resolve --key-hash failed lets the retry through, completed keeps it from the upstream', async () => {
      const { gw, file, up } = await setup()
      const secret = { authorization: 'Bearer customer-secret-token' }
      const send1 = (acct: string, key: string) => post(`${gw.url}/accounts/${acct}/charges`, { amount: 5 }, { ...secret, 'fencing-token': '7', 'idempotency-key': key, 'x-request-id': `req-${acct}` })
      const t0 = Date.now()
      expect((await send1('acct-1', 'charge-1')).status).toBe(504)
      expect((await send1('acct-2', 'charge-2')).status).toBe(504)
      expectProblem(await send1('acct-1', 'charge-1'), { status: 409, type: 'outcome-unknown' })
      await gw.audit.flush()

      const listed = (await send(`${gw.adminUrl}/unknown`)).json().unknown as Record<string, string>[]
      expect(listed).toHaveLength(2)
      const first = listed.find((u) => u.resource === 'account:acct-1')!
      expect(first).toMatchObject({ route: 'payments', reason: 'timeout', replica: `${hostname()}:${process.pid}`, requestId: 'req-acct-1' })
      expect(first.keyHash).toMatch(/^[0-9a-f]{64}$/)
      expect(Date.parse(first.since)).toBeGreaterThanOrEqual(t0)
      expect(Date.parse(first.since)).toBeLessThanOrEqual(Date.now())
      expect(listed.map((u) => u.resource)).toEqual(['account:acct-1', 'account:acct-2']) // oldest first
      expect(JSON.stringify(listed)).not.toContain('customer-secret-token')
      expect(JSON.stringify(listed)).not.toContain('charge-1')

      // the CLI reads the same from the store
      const json = await cli('unknown', '--config', file, '--json')
      expect(json.status, json.stderr).toBe(0)
      expect(JSON.parse(json.stdout).unknown).toEqual(listed)
      const text = await cli('unknown', '--config', file, '--route', 'payments')
      expect(text.stdout).toContain(first.keyHash)
      expect(text.stdout).toContain('fencegate resolve')

      // failed: the effect did not happen, so the next attempt is forwarded
      const failed = await cli('resolve', '--config', file, '--route', 'payments', '--key-hash', first.keyHash, '--as', 'failed')
      expect(failed.status, failed.stderr).toBe(0)
      expect(failed.stdout).toContain('resolved as failed')
      const retried = await send1('acct-1', 'charge-1')
      expect(retried.status).toBe(201)
      expect(up.hits('/accounts/acct-1/charges')).toBe(2)

      // completed: the effect happened; later attempts get 409 response-not-stored, not forwarded
      const second = listed.find((u) => u.resource === 'account:acct-2')!
      const done = await send(`${gw.adminUrl}/resolve`, { method: 'POST', headers: { authorization: 'Bearer unknown-write', 'content-type': 'application/json' }, body: JSON.stringify({ route: 'payments', keyHash: second.keyHash, as: 'completed' }) })
      expect(done.status).toBe(200)
      expectProblem(await send1('acct-2', 'charge-2'), { status: 409, type: 'response-not-stored' })
      expect(up.hits('/accounts/acct-2/charges')).toBe(1)

      expect((await send(`${gw.adminUrl}/unknown`)).json().unknown).toEqual([])

      // the key's timeline: the timeout, the refused retry, the resolution, the forwarded retry
      await gw.audit.flush()
      const tl = await cli('audit', '--config', file, '--key-hash', first.keyHash, '--json')
      expect(tl.status, tl.stderr).toBe(0)
      const entries = JSON.parse(tl.stdout).entries as Record<string, unknown>[]
      expect(entries.map((e) => e.kind === 'resolve' ? `resolve ${e.resolution}` : `${e.status} ${e.outcome}`)).toEqual(['504 outcome_unknown', '409 outcome_unknown', 'resolve failed', '201 forwarded'])
      expect(entries[0]).toMatchObject({ resource: 'account:acct-1', token: '7', unknown: 'timeout', requestId: 'req-acct-1' })
      const byResource = (await send(`${gw.adminUrl}/audit/timeline?resource=${encodeURIComponent('account:acct-2')}`)).json()
      expect(byResource.entries.map((e: { status: number }) => e.status)).toEqual([504, 409])
      const human = await cli('audit', '--config', file, '--resource', 'account:acct-1')
      expect(human.stdout).toContain('3 attempts on resource account:acct-1')
      expect(human.stdout).toContain('request req-acct-1')
      const again = await cli('resolve', '--config', file, '--route', 'payments', '--key-hash', first.keyHash, '--as', 'failed')
      expect(again.status).toBe(1)
      expect(again.stderr).toContain('no record in the unknown state')
    }, 30_000)

    test('the unresolved gauge counts them from the store, 0 from the start', async () => {
      const { gw } = await setup()
      expect(metric(await metrics(gw.adminUrl), 'fencegate_unknown_outcomes_unresolved', { route: 'payments' })).toBe(0)
      expect((await metrics(gw.adminUrl))).toMatch(/^fencegate_unknown_outcomes_unresolved\{route="payments"\} 0$/m)
    })
  })
}

test('resolve --key-hash refuses a malformed hash and a hash with a key (exit 2)', async () => {
  const dir = tempDir('fg-unknown-')
  cleanups.push(() => rmSync(dir, { recursive: true, force: true }))
  const file = join(dir, 'fencegate.yaml')
  writeFileSync(file, gatewayConfig({ store: { kind: 'sqlite', path: 'fg.db' }, routes: [{ name: 'p', path: '/p', upstream: 'http://127.0.0.1:9', idempotency: {} }] }))
  expect((await cli('resolve', '--config', file, '--route', 'p', '--key-hash', 'xyz', '--as', 'failed')).status).toBe(2)
  expect((await cli('resolve', '--config', file, '--route', 'p', '--key-hash', 'a'.repeat(64), '--key', 'k', '--as', 'failed')).status).toBe(2)
  expect((await cli('resolve', '--config', file, '--route', 'p', '--as', 'failed')).status).toBe(2)
})

test('resolve asks the running gateway when its admin listener is reachable: counted there as by="operator"; with none answering it resolves in the store and says it was not counted', async () => {
  const up = await firstHangs()
  const dir = tempDir('fg-unknown-')
  cleanups.push(() => rmSync(dir, { recursive: true, force: true }))
  const adminPort = await freePort()
  const text = gatewayConfig({
    admin: { listen: `127.0.0.1:${adminPort}`, writeToken: 'unknown-write' },
    store: { kind: 'sqlite', path: '@DIR@/fg.db' },
    routes: [{ name: 'payments', path: '/accounts/:account/*', upstream: { url: up.url, timeout: '300ms' }, idempotency: { required: true } }],
  }).replaceAll('@DIR@', dir)
  const file = join(dir, 'fencegate.yaml')
  writeFileSync(file, text)
  const gw = await startTestGateway(text)
  cleanups.push(() => gw.close())
  const settled = async (as: string) => metric(await metrics(gw.adminUrl), 'fencegate_unknown_outcomes_settled_total', { route: 'payments', by: 'operator', as })
  // one account per key: the upstream hangs on each path's first request only
  const charge = (key: string) => post(`${gw.url}/accounts/${key}/charges`, { amount: 5 }, { 'idempotency-key': key })
  expect((await charge('via-gateway')).status).toBe(504)
  expect((await charge('in-store')).status).toBe(504)
  expect(await settled('not_applied')).toBe(0)

  const via = await cli('resolve', '--config', file, '--route', 'payments', '--key', 'via-gateway', '--as', 'failed', '--reason', 'no charge upstream')
  expect(via.status, via.stderr).toBe(0)
  expect(via.stdout).toContain(`through the gateway at 127.0.0.1:${adminPort}`)
  expect(await settled('not_applied')).toBe(1)
  expect((await charge('via-gateway')).status).toBe(201)

  // the same config without a write token: the gateway would refuse, so the CLI writes to the store itself
  const direct = join(dir, 'direct.yaml')
  writeFileSync(direct, text.replace(/writeToken: .*/, 'writeToken: ""'))
  const own = await cli('resolve', '--config', direct, '--route', 'payments', '--key', 'in-store', '--as', 'completed')
  expect(own.status, own.stderr).toBe(0)
  expect(own.stdout).toContain('in the store directly: admin.writeToken is not set')
  expect(await settled('applied')).toBe(0)
  expectProblem(await charge('in-store'), { status: 409, type: 'response-not-stored' })
  expect([up.hits('/accounts/via-gateway/charges'), up.hits('/accounts/in-store/charges')]).toEqual([2, 1])
}, 30_000)

test('an unknown outcome whose ttl ends unsettled is counted once as by="expiry", as="not_applied", shown on its timeline, and its key is then a first attempt', async () => {
  const up = await firstHangs()
  const dir = tempDir('fg-unknown-')
  cleanups.push(() => rmSync(dir, { recursive: true, force: true }))
  const routes = [{ name: 'payments', path: '/accounts/:account/*', upstream: { url: up.url, timeout: '300ms' }, idempotency: { required: true, ttl: '4s', lease: '2s' } }]
  const text = gatewayConfig({ store: { kind: 'sqlite', path: '@DIR@/fg.db' }, routes }).replaceAll('@DIR@', dir)
  // two gateways on one store: one of them releases the record, and only it counts
  const [a, b] = [await startTestGateway(text), await startTestGateway(text)]
  cleanups.push(() => a.close(), () => b.close())
  const expired = async () => (await Promise.all([a, b].map(async (g) => metric(await metrics(g.adminUrl), 'fencegate_unknown_outcomes_settled_total', { route: 'payments', by: 'expiry', as: 'not_applied' }))))
  expect(await expired()).toEqual([0, 0])
  const charge = () => post(`${a.url}/accounts/x/charges`, { amount: 5 }, { 'idempotency-key': 'forgotten' })
  expect((await charge()).status).toBe(504)
  expectProblem(await charge(), { status: 409, type: 'outcome-unknown' })
  const [{ keyHash }] = (await send(`${a.adminUrl}/unknown`)).json().unknown
  const deadline = Date.now() + 15_000
  while ((await expired()).reduce((x, y) => x + y) === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 200))
  await new Promise((r) => setTimeout(r, 1_500))
  expect((await expired()).sort()).toEqual([0, 1])
  const again = await charge()
  expect(again.status).toBe(201)
  expect(again.headers['idempotent-replayed']).toBeUndefined()
  expect(metric(await metrics(a.adminUrl), 'fencegate_duplicate_forwards_total', { route: 'payments' })).toBe(0)
  await a.audit.flush()
  await b.audit.flush()
  const unknowns = (await send(`${a.adminUrl}/unknown`)).json().unknown
  expect(unknowns).toEqual([])
  const entries = (await send(`${a.adminUrl}/audit/timeline?keyHash=${keyHash}`)).json().entries as Record<string, unknown>[]
  expect(entries.map((e) => e.kind === 'resolve' ? `resolve ${e.resolution} by ${e.by}` : `${e.status} ${e.outcome}`)).toEqual(['504 outcome_unknown', '409 outcome_unknown', 'resolve failed by expiry', '201 forwarded'])
}, 40_000)
