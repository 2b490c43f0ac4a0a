// The bundled sample payments service (contract §1): naive on purpose, but never down because
// of one bad request.
import { afterAll, beforeAll, describe, expect, test } from 'vitest'
import { startPayments } from '../examples/payments/server.js'
import { post, send } from './helpers/http.js'

let svc: Awaited<ReturnType<typeof startPayments>>
beforeAll(async () => { svc = await startPayments(0) })
afterAll(async () => { await svc?.close() })

describe('sample payments service', () => {
  test('applies every charge it receives and lists them in order', async () => {
    const a = await post(`${svc.url}/accounts/acct-1/charges`, { amount: 100, currency: 'eur' }, { 'fencing-token': '7', 'idempotency-key': 'k1' })
    expect(a.status).toBe(201)
    expect(a.json()).toMatchObject({ account: 'acct-1', amount: 100, currency: 'eur', fencingToken: '7', idempotencyKey: 'k1' })
    await post(`${svc.url}/accounts/acct-1/charges`, { amount: 100, currency: 'eur' })
    const list = (await send(`${svc.url}/accounts/acct-1/charges`)).json()
    expect(list.charges).toHaveLength(2)
  })

  test.each([
    ['not JSON', 'nope'],
    ['amount not an integer', { amount: 1.5, currency: 'eur' }],
    ['bad currency', { amount: 1, currency: 'EURO' }],
  ])('%s: 400 problem, nothing applied', async (_what, body) => {
    const r = await post(`${svc.url}/accounts/acct-2/charges`, body)
    expect(r.status).toBe(400)
    expect(r.headers['content-type']).toBe('application/problem+json')
    expect((await send(`${svc.url}/accounts/acct-2/charges`)).json().charges).toHaveLength(0)
  })

  test('a path that is not valid percent-encoding is a 400, and the service stays up', async () => {
    const r = await send(`${svc.url}/accounts/%ZZ/charges`)
    expect(r.status).toBe(400)
    expect((await send(`${svc.url}/accounts/acct-1/charges`)).status).toBe(200)
  })
})
