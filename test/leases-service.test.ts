// Contract §3a: the lease service over real HTTP against a running gateway on SQLite — every
// answer of the table, bad input refused with nothing written, the takeover refusing the old
// holder's write at the fence, the lease decisions on the resource's timeline and in
// fencegate_leases_total.
import { describe, expect, test } from 'vitest'
import { freePort, gatewayConfig, startTestGateway, withGateway, type GatewaySpec } from './helpers/gateway.js'
import { parseConfig } from '../src/config/load.js'
import { startUpstream } from './helpers/upstream.js'
import { expectProblem, metric, metrics, post, send } from './helpers/http.js'
import { until } from './helpers/wait.js'

const TOKEN = 'lease-secret'
const { up, gw } = withGateway((up) => ({
  store: { kind: 'sqlite', path: '@DIR@/fg.db' },
  leases: { token: TOKEN, resources: ['account:*', 'ledger:main'], defaultTtl: '20s', maxTtl: '1m' },
  routes: [
    { name: 'accounts', path: '/accounts/:account/*', upstream: up.url, fencing: { resource: 'account:{param.account}' } },
  ],
}))
let n = 0
const acct = () => `acct-${++n}-${Date.now()}`
const auth = { authorization: `Bearer ${TOKEN}` }
const L = (r: string) => `${gw.url}/_fencegate/leases/${encodeURIComponent(`account:${r}`)}`
const acquire = (r: string, body: unknown = { holder: 'worker-7' }, headers: Record<string, string> = auth) => post(L(r), body, headers)
const renew = (r: string, token: string, headers: Record<string, string> = auth) => send(L(r), { method: 'PUT', headers: { ...headers, 'fencing-token': token } })
const release = (r: string, token: string, headers: Record<string, string> = auth) => send(L(r), { method: 'DELETE', headers: { ...headers, 'fencing-token': token } })
const read = (r: string, headers: Record<string, string> = auth) => send(L(r), { headers })
const charge = (r: string, token: string) => post(`${gw.url}/accounts/${r}/charges`, { amount: 1 }, { 'fencing-token': token })
const timeline = async (resource: string) => {
  await gw.audit.flush()
  return (await send(`${gw.adminUrl}/audit/timeline?resource=${encodeURIComponent(resource)}`)).json().entries as Record<string, any>[]
}

describe('the lease service (contract §3a)', () => {
  test('POST grants a lease: 201 with resource, token, holder, expiresAt, ttlMs, renewEveryMs; the fence accepts its token', async () => {
    const r = acct()
    const before = Date.now()
    const g = await acquire(r, { holder: 'worker-7', ttl: '30s' })
    expect(g.status).toBe(201)
    expect(g.headers['content-type']).toBe('application/json')
    const body = g.json()
    expect(body).toEqual({ resource: `account:${r}`, token: '1', holder: 'worker-7', expiresAt: expect.any(String), ttlMs: 30_000, renewEveryMs: 10_000 })
    const end = Date.parse(body.expiresAt)
    expect(end).toBeGreaterThanOrEqual(before + 30_000 - 1000)
    expect(end).toBeLessThanOrEqual(Date.now() + 30_000 + 1000)
    expect((await charge(r, '1')).status).toBe(201)
    expect(up.count(`/accounts/${r}/charges`)).toBe(1)
  })

  test('without a ttl the lease is leases.defaultTtl long', async () => {
    expect((await acquire(acct())).json()).toMatchObject({ ttlMs: 20_000, renewEveryMs: 6_666 })
  })

  test('a grant goes above the high-water mark tokens from elsewhere set', async () => {
    const r = acct()
    expect((await charge(r, '41')).status).toBe(201)
    expect((await acquire(r)).json().token).toBe('42')
    expectProblem(await charge(r, '41'), { status: 412, type: 'stale-fencing-token', members: { highestToken: '42' } })
  })

  test('409 lease-held with holder, expiresAt and Retry-After while another holder\'s lease is live', async () => {
    const r = acct()
    const first = (await acquire(r, { holder: 'a', ttl: '30s' })).json()
    const p = expectProblem(await acquire(r, { holder: 'b' }), { status: 409, type: 'lease-held', headers: { 'retry-after': /^(29|30)$/ } })
    expect(p).toMatchObject({ resource: `account:${r}`, holder: 'a', expiresAt: first.expiresAt })
  })

  test('PUT renews: 200 with the new expiresAt; DELETE releases: 204, and the next holder is granted the next token at once', async () => {
    const r = acct()
    const g = (await acquire(r, { holder: 'a', ttl: '10s' })).json()
    await until(() => Date.now() > Date.parse(g.expiresAt) - 10_000 + 5)
    const renewed = await renew(r, g.token)
    expect(renewed.status).toBe(200)
    expect(renewed.json()).toMatchObject({ resource: `account:${r}`, token: g.token, holder: 'a', ttlMs: 10_000, renewEveryMs: 3_333 })
    expect(Date.parse(renewed.json().expiresAt)).toBeGreaterThan(Date.parse(g.expiresAt))
    const released = await release(r, g.token)
    expect(released.status).toBe(204)
    expect(released.text).toBe('')
    expectProblem(await read(r), { status: 404, type: 'lease-not-found' })
    expect((await acquire(r, { holder: 'b' })).json()).toMatchObject({ token: '2', holder: 'b' })
  })

  test('412 stale-fencing-token for a renewal or release by a token that is no longer the lease, and a second release', async () => {
    const r = acct()
    const g = (await acquire(r, { holder: 'a' })).json()
    expect((await release(r, g.token)).status).toBe(204)
    expectProblem(await release(r, g.token), { status: 412, type: 'stale-fencing-token', members: { resource: `account:${r}`, token: '1', highestToken: '1' } })
    expectProblem(await renew(r, g.token), { status: 412, type: 'stale-fencing-token' })
  })

  test('takeover after expiry: the next token; the old holder\'s renew and release are 412, and its write is refused at the fence (412) and never forwarded', async () => {
    const r = acct()
    const old = (await acquire(r, { holder: 'a', ttl: '1s' })).json()
    expect((await charge(r, old.token)).status).toBe(201)
    const taken = await until(async () => { const g = await acquire(r, { holder: 'b', ttl: '30s' }); return g.status === 201 && g.json() }, { timeoutMs: 10_000 })
    expect(taken).toMatchObject({ token: '2', holder: 'b' })
    const forwarded = up.count(`/accounts/${r}/charges`)
    // right after the takeover, before the new holder wrote anything
    expectProblem(await charge(r, old.token), { status: 412, type: 'stale-fencing-token', members: { token: '1', highestToken: '2' } })
    expect(up.count(`/accounts/${r}/charges`)).toBe(forwarded)
    expectProblem(await renew(r, old.token), { status: 412, type: 'stale-fencing-token', members: { highestToken: '2' } })
    expectProblem(await release(r, old.token), { status: 412, type: 'stale-fencing-token' })
    expect((await charge(r, '2')).status).toBe(201)
  })

  test('GET: 200 the live lease; without the token no holder; a wrong token 401; none live 404', async () => {
    const r = acct()
    const g = (await acquire(r, { holder: 'worker-9' })).json()
    expect((await read(r)).json()).toEqual(g)
    const anon = await read(r, {})
    expect(anon.status).toBe(200)
    expect(anon.json()).toEqual({ resource: g.resource, token: g.token, expiresAt: g.expiresAt, ttlMs: g.ttlMs, renewEveryMs: g.renewEveryMs })
    expectProblem(await read(r, { authorization: 'Bearer nope' }), { status: 401, type: 'lease-token-required', headers: { 'www-authenticate': /^Bearer realm="fencegate leases", error="invalid_token"$/ } })
    expectProblem(await read(acct()), { status: 404, type: 'lease-not-found' })
  })
})

describe('bad input: a 4xx problem and nothing written', () => {
  /** nothing written: no lease to read, and a first token still takes the resource as new */
  const untouched = async (r: string) => {
    expectProblem(await read(r), { status: 404, type: 'lease-not-found' })
    expect((await charge(r, '1')).status).toBe(201)
  }

  test.each([
    ['a ttl above maxTtl', { holder: 'w', ttl: '2m' }, 'lease-request-invalid', 'maxTtl'],
    ['a ttl below 1 s', { holder: 'w', ttl: '500ms' }, 'lease-request-invalid', '1s'],
    ['a ttl without its unit', { holder: 'w', ttl: 30 }, 'lease-request-invalid', 'unit'],
    ['a missing holder', { ttl: '30s' }, 'lease-request-invalid', 'holder'],
    ['an empty holder', { holder: '' }, 'lease-request-invalid', 'holder'],
    ['a body that is not JSON', 'holder=w', 'lease-request-invalid', 'JSON'],
    ['a JSON array', ['w'], 'lease-request-invalid', 'object'],
  ])('%s → 400', async (_, body, type, detail) => {
    const r = acct()
    expectProblem(await acquire(r, body), { status: 400, type, detail })
    await untouched(r)
  })

  test('without the lease token: 401 with WWW-Authenticate; with a wrong one too', async () => {
    const r = acct()
    expectProblem(await acquire(r, { holder: 'w' }, {}), { status: 401, type: 'lease-token-required', headers: { 'www-authenticate': 'Bearer realm="fencegate leases"' } })
    expectProblem(await acquire(r, { holder: 'w' }, { authorization: 'Bearer wrong' }), { status: 401, type: 'lease-token-required' })
    await untouched(r)
  })

  test('a resource outside leases.resources: 404 no-route; a malformed one: 400', async () => {
    expectProblem(await post(`${gw.url}/_fencegate/leases/ledger%3Aother`, { holder: 'w' }, auth), { status: 404, type: 'no-route' })
    expect((await post(`${gw.url}/_fencegate/leases/ledger%3Amain`, { holder: 'w' }, auth)).status).toBe(201)
    expectProblem(await post(`${gw.url}/_fencegate/leases/account%3A%E0%A4%A`, { holder: 'w' }, auth), { status: 400, type: 'lease-request-invalid', detail: 'percent-encoding' })
    expectProblem(await post(`${gw.url}/_fencegate/leases/account%3Aa%00b`, { holder: 'w' }, auth), { status: 400, type: 'lease-request-invalid', detail: 'control' })
    expectProblem(await post(`${gw.url}/_fencegate/leases/`, { holder: 'w' }, auth), { status: 400, type: 'lease-request-invalid' })
  })

  test('a renewal or release without a token: 428; with a malformed one: 400; nothing changed', async () => {
    const r = acct()
    const g = (await acquire(r, { holder: 'a' })).json()
    expectProblem(await send(L(r), { method: 'PUT', headers: auth }), { status: 428, type: 'fencing-token-required' })
    for (const bad of ['01', '-1', 'x', '9223372036854775808']) {
      expectProblem(await renew(r, bad), { status: 400, type: 'fencing-token-malformed', message: bad })
      expectProblem(await release(r, bad), { status: 400, type: 'fencing-token-malformed', message: bad })
    }
    expect((await read(r)).json()).toEqual(g)
  })

  test('another method: 405 with Allow', async () => {
    const r = await send(L(acct()), { method: 'PATCH', headers: auth })
    expectProblem(r, { status: 405, type: 'method-not-allowed', headers: { allow: 'GET, HEAD, POST, PUT, DELETE' } })
  })

  test('a path that only starts like the lease path goes to the routes', async () => {
    expectProblem(await send(`${gw.url}/_fencegate/leasesX/account%3Aa`), { status: 404, type: 'no-route' })
  })
})

describe('what the lease service records', () => {
  test('grant, renewal, held, release, stale and a takeover of an expired lease on the resource\'s timeline', async () => {
    const r = acct()
    const g = (await acquire(r, { holder: 'a', ttl: '1s' })).json()
    await renew(r, g.token)
    await acquire(r, { holder: 'b' })
    await until(async () => (await acquire(r, { holder: 'b', ttl: '5s' })).status === 201, { timeoutMs: 10_000 })
    await renew(r, g.token)
    await release(r, '2')
    const lease = (await timeline(`account:${r}`)).filter((e) => e.kind === 'lease')
    const results = lease.map((e) => e.result).filter((x, i, a) => x !== 'held' || a[i - 1] !== 'held')
    expect(results).toEqual(['granted', 'renewed', 'held', 'expired', 'granted', 'stale', 'released'])
    expect(lease[0]).toMatchObject({ route: '(leases)', method: 'POST', resource: `account:${r}`, token: '1', by: 'a', status: 201, leaseUntil: expect.any(Number) })
    expect(lease.find((e) => e.result === 'expired')).toMatchObject({ token: '1', by: 'a' })
    expect(lease.find((e) => e.result === 'stale')).toMatchObject({ token: '1', highestToken: '2', status: 412 })
    // lease decisions are the resource's story, not operator actions
    expect((await send(`${gw.adminUrl}/audit?since=1h`)).json().operatorActions).toBeUndefined()
  })

  test('fencegate_leases_total counts each result', async () => {
    const text = await metrics(gw.adminUrl)
    for (const result of ['granted', 'held', 'renewed', 'released', 'stale', 'expired']) expect(metric(text, 'fencegate_leases_total', { result }), result).toBeGreaterThan(0)
  })
})

describe('fail closed', () => {
  test('a store that cannot answer: 503 store-unavailable with Retry-After on every lease call, no token issued', async () => {
    const gw = await startTestGateway({
      store: { kind: 'redis', url: `redis://127.0.0.1:${await freePort()}`, keyPrefix: 'fg-lease-down', timeout: '300ms' },
      leases: { resources: ['account:*'], defaultTtl: '10s' },
      routes: [{ name: 'plain', path: '/plain/*', upstream: 'http://127.0.0.1:9' }],
    })
    try {
      const at = `${gw.url}/_fencegate/leases/account%3Aa`
      for (const r of [await post(at, { holder: 'w' }), await send(at, { method: 'PUT', headers: { 'fencing-token': '1' } }), await send(at, { method: 'DELETE', headers: { 'fencing-token': '1' } }), await send(at)]) {
        expectProblem(r, { status: 503, type: 'store-unavailable', headers: { 'retry-after': /^\d+$/ } })
      }
      expect(metric(await metrics(gw.adminUrl), 'fencegate_leases_total', { result: 'granted' })).toBe(0)
    } finally {
      await gw.close()
    }
  })
})

describe('defaultTtl: advice', () => {
  test('sized from the effect durations of the routes fencing the resource, at most maxTtl; a resource no route fences gets the unsized lease, at most maxTtl', async () => {
    const up = await startUpstream()
    const gw = await startTestGateway({
      leases: { resources: ['account:*', 'job:*'], defaultTtl: 'advice', maxTtl: '20s' },
      routes: [{ name: 'accounts', path: '/accounts/:account/*', upstream: { url: up.url, timeout: '5s' }, fencing: { resource: 'account:{param.account}' } }],
    })
    try {
      // two fenced writes of about 2 s: E = 2 s, margin 2 s, L = 1.5 × (E + M) = 6 s (`fencegate leases`)
      for (const t of ['1', '2']) expect((await post(`${gw.url}/accounts/a/slow?ms=2000`, {}, { 'fencing-token': t })).status).toBe(200)
      await gw.audit.flush()
      const advised = (await post(`${gw.url}/_fencegate/leases/account%3Ab`, { holder: 'w' })).json()
      expect(advised.ttlMs).toBeGreaterThanOrEqual(6_000)
      expect(advised.ttlMs).toBeLessThanOrEqual(7_000)
      expect((await post(`${gw.url}/_fencegate/leases/job%3A1`, { holder: 'w' })).json().ttlMs).toBe(20_000)
    } finally {
      await gw.close()
      await up.close()
    }
  })
})

describe('SIGHUP', () => {
  test('a reload applies a changed leases block to the calls after it; a lease granted before keeps its token; without leases the path goes to the routes', async () => {
    const spec = (leases?: GatewaySpec['leases']): GatewaySpec => ({ leases, routes: [{ name: 'plain', path: '/plain/*', upstream: 'http://127.0.0.1:9' }] })
    const gw = await startTestGateway(spec({ resources: ['account:*'], defaultTtl: '30s' }))
    const reload = (leases?: GatewaySpec['leases']) => gw.reload(parseConfig(gatewayConfig(spec(leases)), `${gw.dir}/fencegate.yaml`))
    try {
      const at = (r: string) => `${gw.url}/_fencegate/leases/${encodeURIComponent(r)}`
      expect((await post(at('account:a'), { holder: 'w' })).json().token).toBe('1')
      expect(await reload({ resources: ['account:*', 'ledger:*'], token: 'new-secret', defaultTtl: '30s' })).toMatchObject({ applied: true })
      expectProblem(await post(at('ledger:l'), { holder: 'w' }), { status: 401, type: 'lease-token-required' })
      expect((await post(at('ledger:l'), { holder: 'w' }, { authorization: 'Bearer new-secret' })).status).toBe(201)
      const kept = await send(at('account:a'), { headers: { authorization: 'Bearer new-secret' } })
      expect(kept.json()).toMatchObject({ token: '1', holder: 'w' })
      expect(await reload(undefined)).toMatchObject({ applied: true })
      expectProblem(await post(at('account:a'), { holder: 'w' }), { status: 404, type: 'no-route', detail: 'No route of this gateway' })
    } finally {
      await gw.close()
    }
  })
})
