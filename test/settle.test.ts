// Contract §4a: unknown outcomes settled by asking the resource. A real HTTP upstream keeps a
// ledger of the charges it applied, keyed by idempotency key, and answers the lookup GET from
// it; told by a header, it applies a charge and then hangs past the upstream timeout, or resets
// the connection, or hangs without applying. Real gateways on the memory and sqlite stores.
import http from 'node:http'
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { afterAll, afterEach, beforeAll, describe, expect, test } from 'vitest'
import { freePort, gatewayConfig, spawnGateway, startTestGateway, tempDir, type RouteSpec, type StoreInput, type TestGateway } from './helpers/gateway.js'
import { metric, metrics, post, send } from './helpers/http.js'
import { runCli } from './helpers/run.js'
import { until } from './helpers/wait.js'
import { dropPostgresSchema, dropRedisPrefix, PG_URL, REDIS_URL } from './helpers/stores.js'

interface Ledger {
  url: string
  /** charges applied, by idempotency key */
  applied: Map<string, number>
  /** lookups received: [time, key, request id] */
  probes: { at: number; key: string; requestId: string | undefined }[]
  /** what the lookup answers; default: the ledger's truth */
  lookup?: (key: string) => { status: number; delayMs?: number } | undefined
  close(): Promise<void>
}

async function ledger(): Promise<Ledger> {
  const sockets = new Set<import('node:net').Socket>()
  const l: Ledger = { url: '', applied: new Map(), probes: [], close: async () => {} }
  const server = http.createServer((req, res) => {
    const u = new URL(req.url!, 'http://x')
    if (req.method === 'GET' && u.searchParams.has('idempotencyKey')) {
      const key = u.searchParams.get('idempotencyKey')!
      l.probes.push({ at: Date.now(), key, requestId: req.headers['x-request-id'] as string | undefined })
      const told = l.lookup?.(key)
      const answer = () => {
        if (told) { res.writeHead(told.status, { 'content-type': 'application/json' }).end('{"charges":[]}'); return }
        const n = l.applied.get(key)
        if (n) res.writeHead(200, { 'content-type': 'application/json', 'x-ledger': 'lookup' }).end(JSON.stringify({ charges: [{ idempotencyKey: key, amount: 100 }] }))
        else res.writeHead(404, { 'content-type': 'application/json' }).end('{"charges":[]}')
      }
      if (told?.delayMs) setTimeout(answer, told.delayMs)
      else answer()
      return
    }
    const chunks: Buffer[] = []
    req.on('data', (c) => chunks.push(c))
    req.on('end', () => {
      const key = String(req.headers['idempotency-key'])
      const mode = req.headers['x-mode']
      if (mode === 'never') return // hangs, applies nothing
      l.applied.set(key, (l.applied.get(key) ?? 0) + 1)
      if (mode === 'hang') return // applied; the answer never comes
      if (mode === 'reset') { req.socket.destroy(); return }
      res.writeHead(201, { 'content-type': 'application/json' }).end(JSON.stringify({ id: `ch-${key}`, amount: 100 }))
    })
  })
  server.on('connection', (s) => { sockets.add(s); s.on('close', () => sockets.delete(s)) })
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r))
  l.url = `http://127.0.0.1:${(server.address() as import('node:net').AddressInfo).port}`
  l.close = () => new Promise((r) => { for (const s of sockets) s.destroy(); server.close(() => r()) })
  return l
}

const settleRoute = (upstream: string, extra: { unknownOutcome?: 'reject' | 'retry'; every?: string } = {}): RouteSpec => ({
  name: 'payments', path: '/accounts/:account/*', methods: ['POST', 'GET'], upstream: { url: upstream, timeout: '500ms' },
  idempotency: {
    lease: '2s', unknownOutcome: extra.unknownOutcome ?? 'reject',
    settle: { probe: { path: '/accounts/{param.account}/charges?idempotencyKey={key}', applied: [200], notApplied: [404] }, after: '1s', every: extra.every ?? '2s' },
  },
})

const cleanups: (() => Promise<void> | void)[] = []
afterEach(async () => { for (const c of cleanups.splice(0).reverse()) await c() })

let up: Ledger
beforeAll(async () => { up = await ledger() })
afterAll(() => up.close())
afterEach(() => { up.applied.clear(); up.probes.length = 0; up.lookup = undefined })

const charge = (gw: TestGateway, key: string, mode?: string) => post(`${gw.url}/accounts/acc-1/charges`, { amount: 100 }, { 'idempotency-key': key, ...(mode ? { 'x-mode': mode } : {}) })

async function gateway(store: StoreInput, route: RouteSpec): Promise<TestGateway> {
  const gw = await startTestGateway({ store, admin: { writeToken: 'w' }, routes: [route] })
  cleanups.push(() => gw.close())
  return gw
}

let n = 0
const unique = () => `settle_${process.pid}_${Date.now().toString(36)}_${n++}`
/** A redis key prefix of its own, deleted after the test. */
const redisStore = (): StoreInput => {
  const keyPrefix = unique()
  cleanups.unshift(() => dropRedisPrefix(keyPrefix))
  return { kind: 'redis', url: REDIS_URL, keyPrefix }
}
const STORES: [string, () => StoreInput][] = [
  ['memory', () => ({ kind: 'memory' })],
  ['sqlite', () => ({ kind: 'sqlite', path: '@DIR@/fg.db' })],
  ['redis', redisStore],
  ['postgres', () => {
    const schema = unique()
    cleanups.unshift(() => dropPostgresSchema(schema))
    return { kind: 'postgres', url: PG_URL, schema }
  }],
]

describe.each(STORES)('settle on the %s store', (_, store) => {
  test.each(['hang', 'reset'])('applied, then the answer lost (%s): the probe settles it applied, the retry replays it, one charge', async (mode) => {
    const gw = await gateway(store(), settleRoute(up.url))
    const before = await metrics(gw.adminUrl)
    // at 0 from start-up
    for (const answer of ['applied', 'not_applied', 'undecided', 'error']) expect(before).toMatch(new RegExp(`fencegate_settle_probes_total\\{route="payments",answer="${answer}"\\} 0`))
    for (const by of ['probe', 'operator', 'expiry']) for (const as of ['applied', 'not_applied']) expect(before).toMatch(new RegExp(`fencegate_unknown_outcomes_settled_total\\{route="payments",by="${by}",as="${as}"\\} 0`))

    const first = await charge(gw, `k-${mode}`, mode)
    expect(first.status).toBe(mode === 'hang' ? 504 : 502)
    const unknown = (await send(`${gw.adminUrl}/unknown`)).json().unknown
    expect(unknown).toHaveLength(1)
    expect(unknown[0]).toMatchObject({ route: 'payments', probes: 0, nextProbe: expect.any(String) })

    const m = await until(async () => { const t = await metrics(gw.adminUrl); return metric(t, 'fencegate_unknown_outcomes_settled_total', { route: 'payments', by: 'probe', as: 'applied' }) === 1 && t }, { timeoutMs: 8000, message: 'the background probe to settle the key' })
    expect(metric(m, 'fencegate_settle_probes_total', { route: 'payments', answer: 'applied' })).toBe(1)
    expect(up.probes).toHaveLength(1)
    // the probe carries the request id of the attempt it settles
    expect(up.probes[0].requestId).toBe(first.headers['x-request-id'])
    expect((await send(`${gw.adminUrl}/unknown`)).json().unknown).toEqual([])

    const retry = await charge(gw, `k-${mode}`)
    expect(retry.status).toBe(200)
    expect(retry.headers['idempotent-replayed']).toBe('true')
    expect(retry.headers['fencegate-settled']).toBe('probe')
    expect(retry.headers['x-ledger']).toBe('lookup')
    expect(retry.json().charges).toHaveLength(1)
    expect(up.applied.get(`k-${mode}`)).toBe(1)

    await gw.audit.flush()
    const timeline = (await send(`${gw.adminUrl}/audit/timeline?route=payments&key=k-${mode}`)).json()
    const kinds = timeline.entries.map((e: { kind: string; by?: string; result?: string }) => `${e.kind}${e.by ? `:${e.by}` : ''}${e.kind === 'probe' ? `:${e.result}` : ''}`)
    expect(kinds).toEqual(['attempt', 'probe:probe:applied', 'resolve:probe', 'attempt'])
  }, 20_000)

  test('never applied: settled not_applied, the retry is forwarded as a first attempt (no duplicate counted)', async () => {
    const gw = await gateway(store(), settleRoute(up.url, { unknownOutcome: 'retry' }))
    expect((await charge(gw, 'k-never', 'never')).status).toBe(504)
    await until(async () => metric(await metrics(gw.adminUrl), 'fencegate_unknown_outcomes_settled_total', { route: 'payments', by: 'probe', as: 'not_applied' }) === 1, { timeoutMs: 8000, message: 'the probe to settle it not_applied' })
    const retry = await charge(gw, 'k-never')
    expect(retry.status).toBe(201)
    expect(retry.headers['idempotent-replayed']).toBeUndefined()
    expect(up.applied.get('k-never')).toBe(1)
    const m = await metrics(gw.adminUrl)
    expect(metric(m, 'fencegate_duplicate_forwards_total', { route: 'payments' })).toBe(0)
    expect(metric(m, 'fencegate_settle_probes_total', { route: 'payments', answer: 'not_applied' })).toBe(1)
  }, 20_000)

  test('undecided answers: it stays unknown, is probed again with backoff, /unknown shows probes and nextProbe; the retry gets 409', async () => {
    const gw = await gateway(store(), settleRoute(up.url, { every: '4s' }))
    up.lookup = () => ({ status: 503 })
    expect((await charge(gw, 'k-undecided', 'hang')).status).toBe(504)
    await until(() => up.probes.length >= 2, { timeoutMs: 10_000, message: 'two probes' })
    const m = await metrics(gw.adminUrl)
    expect(metric(m, 'fencegate_settle_probes_total', { route: 'payments', answer: 'undecided' })).toBeGreaterThanOrEqual(2)
    expect(metric(m, 'fencegate_unknown_outcomes_settled_total', { route: 'payments' })).toBe(0)
    // backing off: the second interval is longer than the first one's lease floor (upstream.timeout + margin)
    const u = await until(async () => { const x = (await send(`${gw.adminUrl}/unknown`)).json().unknown[0]; return x?.probes >= 2 && x })
    expect(u.nextProbe).toEqual(expect.any(String))
    expect(Date.parse(u.nextProbe)).toBeGreaterThan(Date.now())
    const retry = await charge(gw, 'k-undecided')
    expect(retry.status).toBe(409)
    expect(retry.json().type).toBe('urn:fencegate:problem:outcome-unknown')
    expect(up.applied.get('k-undecided')).toBe(1)
  }, 20_000)

  test('a retry once `after` has passed gets the settled answer, with one probe sent', async () => {
    const gw = await gateway(store(), settleRoute(up.url))
    expect((await charge(gw, 'k-retry', 'hang')).status).toBe(504)
    await new Promise((r) => setTimeout(r, 1050))
    const retry = await charge(gw, 'k-retry')
    expect(retry.status).toBe(200)
    expect(retry.headers['fencegate-settled']).toBe('probe')
    expect(up.probes).toHaveLength(1)
    expect(up.applied.get('k-retry')).toBe(1)
  }, 20_000)

  test('an operator\'s resolve before the probe answers wins', async () => {
    const gw = await gateway(store(), { ...settleRoute(up.url), upstream: { url: up.url, timeout: '1500ms' } })
    up.lookup = () => ({ status: 200, delayMs: 1000 })
    expect((await charge(gw, 'k-op', 'never')).status).toBe(504)
    await until(() => up.probes.length === 1, { timeoutMs: 8000, message: 'the probe to be sent' })
    const resolved = await send(`${gw.adminUrl}/resolve`, { method: 'POST', headers: { 'content-type': 'application/json', authorization: 'Bearer w' }, body: JSON.stringify({ route: 'payments', key: 'k-op', as: 'failed', reason: 'checked by hand' }) })
    expect(resolved.status).toBe(200)
    await until(async () => metric(await metrics(gw.adminUrl), 'fencegate_settle_probes_total', { route: 'payments', answer: 'applied' }) === 1, { timeoutMs: 5000, message: 'the probe answer' })
    const m = await metrics(gw.adminUrl)
    expect(metric(m, 'fencegate_unknown_outcomes_settled_total', { route: 'payments', by: 'probe' })).toBe(0)
    expect(metric(m, 'fencegate_unknown_outcomes_settled_total', { route: 'payments', by: 'operator', as: 'not_applied' })).toBe(1)
    // resolved failed: the next attempt is forwarded, not replayed from the probe
    up.lookup = undefined
    const retry = await charge(gw, 'k-op')
    expect(retry.status).toBe(201)
    expect(retry.headers['fencegate-settled']).toBeUndefined()
  }, 20_000)
})

test('unknownOutcome: retry with undecided answers: the retry is forwarded and counted as a duplicate, after its probe had its chance', async () => {
  const gw = await gateway({ kind: 'memory' }, settleRoute(up.url, { unknownOutcome: 'retry' }))
  up.lookup = () => ({ status: 503 })
  expect((await charge(gw, 'k-dup', 'hang')).status).toBe(504)
  await new Promise((r) => setTimeout(r, 1050))
  const retry = await charge(gw, 'k-dup')
  expect(retry.status).toBe(201)
  expect(up.probes.length).toBeGreaterThanOrEqual(1)
  expect(up.applied.get('k-dup')).toBe(2)
  const m = await metrics(gw.adminUrl)
  expect(metric(m, 'fencegate_duplicate_forwards_total', { route: 'payments' })).toBe(1)
  expect(metric(m, 'fencegate_settle_probes_total', { route: 'payments', answer: 'undecided' })).toBeGreaterThanOrEqual(1)
}, 20_000)

test('the route\'s claim names the `after` assumption and what is left to an operator', async () => {
  const gw = await gateway({ kind: 'memory' }, settleRoute(up.url))
  const claim = (await send(`${gw.adminUrl}/audit`)).json().routes.find((r: { route: string }) => r.route === 'payments').claim
  expect(claim.assumptions.join('\n')).toContain('The resource applies nothing of an abandoned attempt later than 1 s after the gateway gave up')
  expect(claim.guarantees.join('\n')).toContain('GET /accounts/{param.account}/charges?idempotencyKey={key}')
  expect(claim.notGuaranteed.join('\n')).toContain('waits for an operator (fencegate resolve)')
})

test('a probe answer larger than maxResponseBytes: it stays unknown, counted as error, logged once', async () => {
  const route = settleRoute(up.url)
  const gw = await gateway({ kind: 'memory' }, { ...route, idempotency: { ...route.idempotency, maxResponseBytes: 16 } })
  expect((await charge(gw, 'k-large', 'hang')).status).toBe(504)
  await until(() => up.probes.length >= 2, { timeoutMs: 10_000, message: 'two probes' })
  await until(async () => metric(await metrics(gw.adminUrl), 'fencegate_settle_probes_total', { route: 'payments', answer: 'error' }) >= 2, { message: 'two probes counted as error' })
  const m = await metrics(gw.adminUrl)
  expect(metric(m, 'fencegate_settle_probes_total', { route: 'payments', answer: 'applied' })).toBe(0)
  expect((await send(`${gw.adminUrl}/unknown`)).json().unknown).toHaveLength(1)
  expect(gw.logs.filter((l) => l.includes('larger than idempotency.maxResponseBytes'))).toHaveLength(1)
  expect((await charge(gw, 'k-large')).status).toBe(409)
}, 20_000)

test.each([
  ['one sqlite file', (): StoreInput => ({ kind: 'sqlite', path: join(tempDir(), 'shared.db') })],
  ['one redis', redisStore],
  ['one postgres schema', (): StoreInput => {
    const schema = unique()
    cleanups.unshift(() => dropPostgresSchema(schema))
    return { kind: 'postgres', url: PG_URL, schema }
  }],
])('two gateways on %s send one probe per scheduled time, never two', async (_, shared) => {
  const store = shared()
  const a = await gateway(store, settleRoute(up.url, { every: '2s' }))
  const b = await gateway(store, settleRoute(up.url, { every: '2s' }))
  up.lookup = () => ({ status: 503 })
  expect((await charge(a, 'k-two', 'hang')).status).toBe(504)
  await until(() => up.probes.length >= 3, { timeoutMs: 12_000, message: 'three probes' })
  await Promise.all([a.audit.flush(), b.audit.flush()])
  const entries = (await send(`${a.adminUrl}/audit/timeline?route=payments&key=k-two`)).json().entries.filter((e: { kind: string }) => e.kind === 'probe')
  // every probe the upstream saw is one the store handed out once
  expect(entries.length).toBeGreaterThanOrEqual(up.probes.length - 1)
  // never two for one scheduled time: each follows the previous by at least its lease floor (upstream.timeout + margin)
  for (let i = 1; i < up.probes.length; i++) expect(up.probes[i].at - up.probes[i - 1].at).toBeGreaterThan(1000)
  const ma = await metrics(a.adminUrl)
  const mb = await metrics(b.adminUrl)
  const sent = (t: string) => metric(t, 'fencegate_settle_probes_total', { route: 'payments', answer: 'undecided' })
  expect(sent(ma) + sent(mb)).toBe(up.probes.length)
}, 25_000)

test('a gateway killed mid-probe leaves the key probed again by the other, which settles it', async () => {
  const dir = tempDir()
  const store: StoreInput = { kind: 'sqlite', path: join(dir, 'shared.db') }
  const [port, admin] = [await freePort(), await freePort()]
  const file = join(dir, 'a.yaml')
  writeFileSync(file, gatewayConfig({ listen: `127.0.0.1:${port}`, admin: { listen: `127.0.0.1:${admin}` }, store, routes: [settleRoute(up.url)] }))
  const a = await spawnGateway(file, port, admin, join(dir, 'a.log'))
  cleanups.push(() => { a.child.kill('SIGKILL') })
  // the first probe never answers in time: its gateway is killed while it waits
  up.lookup = () => (up.probes.length === 1 ? { status: 200, delayMs: 400 } : undefined)
  const first = await post(`${a.url}/accounts/acc-1/charges`, { amount: 100 }, { 'idempotency-key': 'k-killed', 'x-mode': 'hang' })
  expect(first.status).toBe(504)
  await until(() => up.probes.length === 1, { timeoutMs: 8000, message: 'the first probe, from gateway a' })
  a.child.kill('SIGKILL')
  const b = await gateway(store, settleRoute(up.url))
  await until(async () => metric(await metrics(b.adminUrl), 'fencegate_unknown_outcomes_settled_total', { route: 'payments', by: 'probe', as: 'applied' }) === 1, { timeoutMs: 10_000, message: 'gateway b to settle the key with the next probe' })
  expect(up.probes).toHaveLength(2)
  const retry = await charge(b, 'k-killed')
  expect(retry.status).toBe(200)
  expect(retry.headers['fencegate-settled']).toBe('probe')
  expect(up.applied.get('k-killed')).toBe(1)
}, 30_000)

describe('check-config', () => {
  const check = async (settle: unknown, path = '/accounts/:account/*') => {
    const dir = tempDir()
    const file = join(dir, 'fencegate.yaml')
    writeFileSync(file, gatewayConfig({ routes: [{ name: 'payments', path, upstream: 'http://127.0.0.1:9090', idempotency: { settle } as never }] }))
    return runCli(['check-config', '--config', file])
  }
  const probe = { path: '/accounts/{param.account}/charges?idempotencyKey={key}', applied: [200], notApplied: [404] }

  test('a valid settle block passes', async () => {
    const r = await check({ probe, after: '2s' })
    expect(r.stderr).toBe('')
    expect(r.status).toBe(0)
  })

  test.each([
    ['after under 1 s', { probe, after: '500ms' }, 'routes[0].idempotency.settle.after', 'at least 1s'],
    ['a POST probe', { probe: { ...probe, method: 'POST' } }, 'routes[0].idempotency.settle.probe.method', 'never a method that changes state'],
    ['a parameter the route does not have', { probe: { ...probe, path: '/accounts/{param.user}/charges?k={key}' } }, 'routes[0].idempotency.settle.probe.path', '{param.user} names no parameter'],
    ['a status in both lists', { probe: { ...probe, notApplied: [404, 200] } }, 'routes[0].idempotency.settle.probe.notApplied[1]', '200 is in probe.applied too'],
    ['every shorter than after', { probe, after: '10s', every: '5s' }, 'routes[0].idempotency.settle.every', 'at least after'],
    ['a header template naming a hop-by-hop header', { probe: { ...probe, headers: { Authorization: '{header.Connection}' } } }, 'routes[0].idempotency.settle.probe.headers.Authorization', 'hop-by-hop'],
  ])('%s: exit 2 naming the YAML path', async (_, settle, path, words) => {
    const r = await check(settle)
    expect(r.status).toBe(2)
    const line = r.stderr.split('\n').find((l) => l.includes(path))
    expect(line, r.stderr).toBeDefined()
    expect(line).toContain(words)
    expect(r.stderr).not.toMatch(/\n\s+at /)
  })
})
