// Issue 5 §3, the check-to-apply window: an upstream that delays writes forces an older token's
// write to land after a newer one. Default mode detects it (fencegate_fencing_overtaken_total, a
// warning); `fencing.serialize` prevents it within the gateway process.
import { describe, expect, test } from 'vitest'
import { request } from 'undici'
import { type Applied } from './helpers/upstream.js'
import { withGateway, type RouteSpec } from './helpers/gateway.js'
import { expectProblem, post, send, metrics, metric } from './helpers/http.js'
import { sleep, until } from './helpers/wait.js'

const { up, gw } = withGateway((up) => {
  /** a route `/NAME/:res/*` fencing the resource `doc:{param.res}` */
  const fenced = (name: string, fencing: Partial<NonNullable<RouteSpec['fencing']>> = {}, more: Partial<RouteSpec> = {}): RouteSpec =>
    ({ name, path: `/${name}/:res/*`, upstream: up.url, ...more, fencing: { resource: 'doc:{param.res}', ...fencing } })
  return {
    store: { kind: 'sqlite', path: '@DIR@/fg.db' },
    routes: [
      fenced('detect'),
      fenced('serial', { serialize: true }),
      fenced('short', { serialize: true, serializeWait: '200ms' }),
      fenced('held', { serialize: true, serializeWait: '3s' }, { upstream: { url: up.url, timeout: '300ms' }, idempotency: { lease: '1500ms' } }),
      fenced('bare', { serialize: true, serializeWait: '3s' }, { upstream: { url: up.url, timeout: '300ms' } }),
    ],
  }
})
let n = 0
const res = () => `r${++n}-${Date.now()}`

/** What `/apply` saw for one resource, as "arrived 5", "applied 6", ... */
const events = (prefix: string) => up.applied.filter((a: Applied) => a.url.startsWith(prefix)).map((a) => `${a.event} ${a.token}`)
/** polling for these tests: every 5 ms, they measure how long a request was held */
const often = { intervalMs: 5, timeoutMs: 3000 }

const write = (route: string, r: string, token: string, path = 'apply', headers: Record<string, string> = {}) =>
  post(`${gw.url}/${route}/${r}/${path}`, { token }, { 'fencing-token': token, ...headers })

const overtaken = async (route: string) => metric(await metrics(gw.adminUrl), 'fencegate_fencing_overtaken_total', { route })

describe('default mode: the window is detected', () => {
  test('token 5 slow, token 6 fast: the upstream applies 6 then 5, and the overtaken write is counted and logged', async () => {
    const r = res()
    const before = await overtaken('detect')
    const slow = write('detect', r, '5', 'apply?ms=400')
    await until(() => events(`/detect/${r}/`).includes('arrived 5'), { ...often, message: 'token 5 to reach the upstream' })
    const fast = await write('detect', r, '6')
    expect(fast.status).toBe(201)
    expect((await slow).status).toBe(201)
    // the gateway accepted both (5 was the highest when it was checked), and the upstream applied
    // them out of order: exactly the window the store check alone cannot close
    expect(events(`/detect/${r}/`)).toEqual(['arrived 5', 'arrived 6', 'applied 6', 'applied 5'])
    await until(async () => (await overtaken('detect')) === before + 1, { ...often, message: 'the overtaken counter' })
    const line = gw.logs.map((l) => JSON.parse(l)).find((l) => l.route === 'detect' && l.token === '5' && l.newerToken === '6')
    expect(line).toMatchObject({ level: 'warn' })
    // the resource can carry tenant data: not in the log line
    expect(JSON.stringify(line)).not.toContain(r)
  })

  test('in order (5 ends before 6 starts) nothing is counted', async () => {
    const r = res()
    const before = await overtaken('detect')
    expect((await write('detect', r, '5', 'apply?ms=50')).status).toBe(201)
    expect((await write('detect', r, '6')).status).toBe(201)
    await sleep(50)
    expect(await overtaken('detect')).toBe(before)
  })
})

describe('fencing.serialize: the window is closed within the gateway', () => {
  test('token 6 reaches the upstream only after token 5 completed; nothing is overtaken', async () => {
    const r = res()
    const slow = write('serial', r, '5', 'apply?ms=400')
    await until(() => events(`/serial/${r}/`).includes('arrived 5'), { ...often, message: 'token 5 to reach the upstream' })
    const started = Date.now()
    const fast = await write('serial', r, '6')
    expect(fast.status).toBe(201)
    expect(Date.now() - started).toBeGreaterThanOrEqual(150) // it waited for 5 (400 ms upstream)
    expect((await slow).status).toBe(201)
    expect(events(`/serial/${r}/`)).toEqual(['arrived 5', 'applied 5', 'arrived 6', 'applied 6'])
    await sleep(50)
    expect(await overtaken('serial')).toBe(0)
  })

  test('several older tokens: each newer one goes after all older ones, in token order', async () => {
    const r = res()
    const five = write('serial', r, '5', 'apply?ms=200')
    await until(() => events(`/serial/${r}/`).includes('arrived 5'), { ...often, message: 'token 5 to reach the upstream' })
    const six = write('serial', r, '6', 'apply?ms=200')
    // 7 must be checked after 6 (else 6 is stale): a refused probe tells when the mark is 6
    await until(async () => (await write('serial', r, '1')).json().highestToken === '6', { ...often, message: 'token 6 to pass the check' })
    const seven = write('serial', r, '7')
    expect((await Promise.all([five, six, seven])).map((x) => x.status)).toEqual([201, 201, 201])
    expect(events(`/serial/${r}/`)).toEqual(['arrived 5', 'applied 5', 'arrived 6', 'applied 6', 'arrived 7', 'applied 7'])
  })

  test('equal tokens do not wait for each other (one lease holder writing many times)', async () => {
    const r = res()
    const slow = write('serial', r, '7', 'apply?ms=400')
    await until(() => events(`/serial/${r}/`).includes('arrived 7'), { ...often, message: 'the first write to reach the upstream' })
    expect((await write('serial', r, '7')).status).toBe(201)
    expect((await slow).status).toBe(201)
    // the second arrived and was applied while the first was still being applied
    expect(events(`/serial/${r}/`)).toEqual(['arrived 7', 'arrived 7', 'applied 7', 'applied 7'])
  })

  test('the wait is bounded: 503 serialize-timeout with Retry-After, and the newer write is not forwarded', async () => {
    const r = res()
    const before = metric(await metrics(gw.adminUrl), 'fencegate_requests_total', { route: 'short', outcome: 'serialize_timeout', code: '503' })
    const slow = write('short', r, '5', 'apply?ms=800')
    await until(() => events(`/short/${r}/`).includes('arrived 5'), { ...often, message: 'token 5 to reach the upstream' })
    const started = Date.now()
    const refused = await write('short', r, '6')
    expect(Date.now() - started).toBeGreaterThanOrEqual(190)
    expectProblem(refused, { status: 503, type: 'serialize-timeout', headers: { 'retry-after': /^[1-9]\d*$/ }, members: { token: '6' } })
    expect((await slow).status).toBe(201)
    expect(events(`/short/${r}/`)).toEqual(['arrived 5', 'applied 5'])
    expect(metric(await metrics(gw.adminUrl), 'fencegate_requests_total', { route: 'short', outcome: 'serialize_timeout', code: '503' })).toBe(before + 1)
    // once 5 is done, the client's retry goes through (token 6 was accepted by the store already)
    expect((await write('short', r, '6')).status).toBe(201)
    expect(events(`/short/${r}/`)).toEqual(['arrived 5', 'applied 5', 'arrived 6', 'applied 6'])
  })

  test('a client that leaves while its request is held: the request is never forwarded', async () => {
    const r = res()
    const slow = write('serial', r, '5', 'apply?ms=400')
    await until(() => events(`/serial/${r}/`).includes('arrived 5'), { ...often, message: 'token 5 to reach the upstream' })
    const gone = request(`${gw.url}/serial/${r}/apply`, { method: 'POST', headers: { 'fencing-token': '6', 'content-type': 'application/json' }, body: '{}', signal: AbortSignal.timeout(100) })
    await expect(gone).rejects.toThrow()
    expect((await slow).status).toBe(201)
    await sleep(150)
    expect(events(`/serial/${r}/`)).toEqual(['arrived 5', 'applied 5'])
    expect(metric(await metrics(gw.adminUrl), 'fencegate_requests_total', { route: 'serial', code: '499', outcome: 'serialize_timeout' })).toBeGreaterThanOrEqual(1)
  })

  test('an older request with an unknown outcome holds the resource until its idempotency lease ends', async () => {
    const r = res()
    const started = Date.now()
    // upstream timeout 300 ms, lease 1500 ms: the upstream may still apply token 5 after the 504
    const lost = await write('held', r, '5', 'hang', { 'idempotency-key': `k-${r}` })
    expect(lost.status).toBe(504)
    const six = await write('held', r, '6', 'apply', { 'idempotency-key': `k6-${r}` })
    expect(six.status).toBe(201)
    expect(Date.now() - started).toBeGreaterThanOrEqual(1400)
    expect(events(`/held/${r}/`)).toEqual(['arrived 6', 'applied 6'])
  })

  test('without an idempotency record, an unknown outcome holds the resource for one more upstream timeout', async () => {
    const r = res()
    const lost = await write('bare', r, '5', 'hang')
    expect(lost.status).toBe(504)
    const ended = Date.now()
    expect((await write('bare', r, '6')).status).toBe(201)
    expect(Date.now() - ended).toBeGreaterThanOrEqual(150) // held 300 ms after the 504
    // the same token is not held back by its own unknown outcome
    const r2 = res()
    expect((await write('bare', r2, '5', 'hang')).status).toBe(504)
    const again = Date.now()
    expect((await write('bare', r2, '5')).status).toBe(201)
    expect(Date.now() - again).toBeLessThan(250)
  })
})

describe('memory', () => {
  test('1000 resources with one request each: the tracking map is empty again afterwards', async () => {
    const gauges = async () => {
      const text = await metrics(gw.adminUrl)
      return { resources: metric(text, 'fencegate_fencing_tracked_resources'), inFlight: metric(text, 'fencegate_fencing_in_flight') }
    }
    // wait out the holds of the tests above
    await until(async () => (await gauges()).resources === 0, { ...often, timeoutMs: 5000, message: 'the holds to end' })
    // while a request is in flight its resource is tracked
    const r = res()
    const slow = write('serial', r, '1', 'apply?ms=300')
    await until(() => events(`/serial/${r}/`).includes('arrived 1'), { ...often, message: 'the request to reach the upstream' })
    expect(await gauges()).toEqual({ resources: 1, inFlight: 1 })
    await slow
    const ids = Array.from({ length: 1000 }, (_, i) => `mem${i}-${Date.now()}`)
    for (let i = 0; i < ids.length; i += 50) {
      const batch = ids.slice(i, i + 50).map((id, j) => write(j % 2 ? 'serial' : 'detect', id, String(i + j)))
      for (const reply of await Promise.all(batch)) expect(reply.status).toBe(201)
    }
    // plus requests that end early: stale, store-checked but refused, malformed
    expect((await write('detect', ids[4], '3')).status).toBe(412)
    expect((await send(`${gw.url}/detect/${ids[1]}/apply`, { method: 'POST', headers: { 'fencing-token': '01' } })).status).toBe(400)
    await until(async () => { const g = await gauges(); return g.resources === 0 && g.inFlight === 0 }, { ...often, message: 'the tracking map to empty' })
  })
})
