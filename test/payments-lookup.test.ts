// The sample payments service's lookup by idempotency key (what an `idempotency.settle` probe
// asks, contract §4a) and its hang after applying (the charge done, the answer lost behind the
// gateway's upstream timeout), over real HTTP.
import { afterAll, beforeAll, describe, expect, test } from 'vitest'
import { startPayments } from '../examples/payments/server.js'
import { paymentsRoutes } from '../examples/payments/routes.js'
import { startTestGateway, type TestGateway } from './helpers/gateway.js'
import { post, send } from './helpers/http.js'
import { until } from './helpers/wait.js'

let svc: Awaited<ReturnType<typeof startPayments>>
beforeAll(async () => { svc = await startPayments(0) })
afterAll(async () => { await svc?.close() })

const charges = async (account: string) => (await send(`${svc.url}/accounts/${account}/charges`)).json().charges as unknown[]

describe('lookup by idempotency key', () => {
  test('200 with the body the charge\'s POST answered; 404 problem for a key never charged', async () => {
    const made = await post(`${svc.url}/accounts/acct-l/charges`, { amount: 250, currency: 'eur' }, { 'idempotency-key': 'pay 1/ü' })
    expect(made.status).toBe(201)
    await post(`${svc.url}/accounts/acct-l/charges`, { amount: 9, currency: 'eur' }, { 'idempotency-key': 'other' })
    const found = await send(`${svc.url}/accounts/acct-l/charges?idempotencyKey=${encodeURIComponent('pay 1/ü')}`)
    expect(found.status).toBe(200)
    expect(found.headers['content-type']).toBe('application/json')
    expect(found.json()).toEqual(made.json())

    const none = await send(`${svc.url}/accounts/acct-l/charges?idempotencyKey=never`)
    expect(none.status).toBe(404)
    expect(none.headers['content-type']).toBe('application/problem+json')
    expect(none.json()).toMatchObject({ status: 404, detail: expect.stringContaining('"never"') })
  })

  test('a key charged on another account is not found on this one', async () => {
    await post(`${svc.url}/accounts/acct-m/charges`, { amount: 1, currency: 'eur' }, { 'idempotency-key': 'only-on-m' })
    expect((await send(`${svc.url}/accounts/acct-n/charges?idempotencyKey=only-on-m`)).status).toBe(404)
    expect((await send(`${svc.url}/accounts/acct-m/charges?idempotencyKey=only-on-m`)).status).toBe(200)
  })

  test('the list without the query still lists every charge', async () => {
    expect(await charges('acct-l')).toHaveLength(2)
  })
})

describe('Sample-Hang-After-Apply', () => {
  test('the charge is in the ledger and found by the lookup before its answer is sent', async () => {
    const answer = post(`${svc.url}/accounts/acct-h/charges`, { amount: 70, currency: 'eur' }, { 'idempotency-key': 'h1', 'sample-hang-after-apply': '1500' })
    let settled = false
    void answer.then(() => { settled = true })
    let seen: unknown[] = []
    while (seen.length === 0) seen = await charges('acct-h')
    expect(settled).toBe(false)
    const looked = await send(`${svc.url}/accounts/acct-h/charges?idempotencyKey=h1`)
    expect(looked.status).toBe(200)
    expect(settled).toBe(false)
    const r = await answer
    expect(r.status).toBe(201)
    expect(r.json()).toEqual(looked.json())
  })

  test.each(['0', 'soon', '-5', '600001', '1.5'])('%j: 400 problem, nothing applied', async (value) => {
    const r = await post(`${svc.url}/accounts/acct-bad-hang/charges`, { amount: 1, currency: 'eur' }, { 'sample-hang-after-apply': value })
    expect(r.status).toBe(400)
    expect(r.json().detail).toContain('sample-hang-after-apply')
    expect(await charges('acct-bad-hang')).toHaveLength(0)
  })

  test('close() does not wait for a held-back answer', async () => {
    const other = await startPayments(0)
    const pending = post(`${other.url}/accounts/a/charges`, { amount: 1, currency: 'eur' }, { 'sample-hang-after-apply': '600000' }).catch((e: Error) => e)
    while ((await send(`${other.url}/accounts/a/charges`)).json().charges.length === 0) { /* until applied */ }
    await other.close()
    expect(await pending).toBeInstanceOf(Error)
  })
})

describe('behind the gateway', () => {
  let gw: TestGateway
  beforeAll(async () => {
    gw = await startTestGateway(`admin:
  listen: 127.0.0.1:0
store:
  kind: sqlite
  path: @DIR@/fencegate.db
${paymentsRoutes(svc.url).replace('timeout: 10s', 'timeout: 300ms')}`)
  })
  afterAll(async () => { await gw?.close() })

  test('applied, then hung past upstream.timeout: 504, the key listed as unknown, one charge that the lookup finds', async () => {
    const r = await post(`${gw.url}/accounts/acct-g/charges`, { amount: 500, currency: 'eur' }, { 'idempotency-key': 'lost-answer', 'fencing-token': '1', 'sample-hang-after-apply': '5000' })
    expect(r.status).toBe(504)
    const unknown = (await send(`${gw.adminUrl}/unknown`)).json().unknown as { route: string }[]
    expect(unknown).toHaveLength(1)
    expect(unknown[0]).toMatchObject({ route: 'payments' })
    expect(await charges('acct-g')).toHaveLength(1)
    const looked = await send(`${gw.url}/accounts/acct-g/charges?idempotencyKey=lost-answer`)
    expect(looked.status).toBe(200)
    expect(looked.json()).toMatchObject({ amount: 500, idempotencyKey: 'lost-answer', fencingToken: '1' })

    // the route's settle block asks that lookup after 2 s: the charge is found, the record completed
    await until(async () => ((await send(`${gw.adminUrl}/unknown`)).json().unknown as unknown[]).length === 0, { timeoutMs: 15_000, intervalMs: 200, message: 'the probe to settle the key' })
    const retry = await post(`${gw.url}/accounts/acct-g/charges`, { amount: 500, currency: 'eur' }, { 'idempotency-key': 'lost-answer', 'fencing-token': '1' })
    expect(retry.status).toBe(200)
    expect(retry.headers['idempotent-replayed']).toBe('true')
    expect(retry.headers['fencegate-settled']).toBe('probe')
    expect(retry.json()).toEqual(looked.json())
    expect(await charges('acct-g')).toHaveLength(1)
  })
})
