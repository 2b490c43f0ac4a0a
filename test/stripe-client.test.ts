// Issue 15 §7: clients that read errors their own way. The official `stripe` client decides that
// a call failed only when the JSON body has an `error` member; every problem the gateway makes
// carries one ({type, code, message}, Stripe's shape) beside the RFC 9457 members. Here the real
// client talks to a small Stripe-like upstream through the gateway: a reused key throws with
// status 422, and a concurrent duplicate ends in the first call's response, replayed, after the
// client's own retries of the gateway's 409s.
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import Stripe from 'stripe'
import { afterAll, beforeAll, expect, test } from 'vitest'
import { startTestGateway, type TestGateway } from './helpers/gateway.js'
import { metric, metrics } from './helpers/http.js'
import { sleep } from './helpers/wait.js'

/** A Stripe-like API: POST /v1/charges (form-encoded) → 200 charge JSON after `delayMs`. */
interface FakeStripe { url: string; charges: { id: string; amount: number; key: string | undefined }[]; close(): Promise<void> }
async function fakeStripe(delayMs: number): Promise<FakeStripe> {
  const charges: FakeStripe['charges'] = []
  const server = http.createServer(async (req, res) => {
    let body = ''
    for await (const c of req) body += c
    if (req.method !== 'POST' || req.url !== '/v1/charges') {
      res.writeHead(404, { 'content-type': 'application/json' })
      return res.end(JSON.stringify({ error: { type: 'invalid_request_error', message: 'Unrecognized request URL' } }))
    }
    await sleep(delayMs)
    const form = new URLSearchParams(body)
    const charge = { id: `ch_${charges.length + 1}`, object: 'charge', amount: Number(form.get('amount')), currency: form.get('currency'), status: 'succeeded' }
    charges.push({ id: charge.id, amount: charge.amount, key: req.headers['idempotency-key'] as string | undefined })
    res.writeHead(200, { 'content-type': 'application/json', 'request-id': `req_${charges.length}` })
    res.end(JSON.stringify(charge))
  })
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r))
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, charges, close: () => new Promise((r) => server.close(() => r())) }
}

let api: FakeStripe
let gw: TestGateway
let stripe: Stripe
/** the status of every response the client received, in order */
let statuses: number[] = []

beforeAll(async () => {
  api = await fakeStripe(1200)
  gw = await startTestGateway({
    routes: [{ name: 'stripe', path: '/v1/*', upstream: { url: api.url, timeout: '5s' }, idempotency: { scope: '{header.Authorization}' } }],
  })
  const { hostname, port } = new URL(gw.url)
  // the client's host, port and protocol point it at the gateway; it retries 409s on its own
  stripe = new Stripe('sk_test_fencegate', { host: hostname, port: Number(port), protocol: 'http', maxNetworkRetries: 6, telemetry: false })
  stripe.on('response', (e: { status: number }) => { statuses.push(e.status) })
})
afterAll(async () => { await gw?.close(); await api?.close() })

test('a key reused with another request throws, with status 422 and the idempotency_error type', async () => {
  statuses = []
  const first = await stripe.charges.create({ amount: 100, currency: 'eur' }, { idempotencyKey: 'order-1' })
  expect(first).toMatchObject({ id: 'ch_1', amount: 100 })
  const reused = stripe.charges.create({ amount: 250, currency: 'eur' }, { idempotencyKey: 'order-1' })
  const err = await reused.then(() => undefined, (e: unknown) => e)
  // (stripe-node makes a StripeIdempotencyError of idempotency_error on 400 only, Stripe's own
  // status; on the contract's 422 it is its generic StripeAPIError, with the same raw type)
  expect(err).toBeInstanceOf(Stripe.errors.StripeError)
  expect(err).toMatchObject({ statusCode: 422, rawType: 'idempotency_error', code: 'idempotency-key-reused' })
  expect((err as Error).message).toContain('already used with a different request')
  expect(api.charges).toHaveLength(1)
  expect(statuses).toEqual([200, 422]) // not retried: the client knows a 422 is final
})

test('a concurrent duplicate gets 409s while the first is in flight, retries, and ends with the first one\'s charge, replayed', async () => {
  statuses = []
  const a = stripe.charges.create({ amount: 300, currency: 'eur' }, { idempotencyKey: 'order-2' })
  await sleep(100)
  const b = stripe.charges.create({ amount: 300, currency: 'eur' }, { idempotencyKey: 'order-2' })
  const [ca, cb] = await Promise.all([a, b])
  expect(cb.id).toBe(ca.id)
  expect(cb.lastResponse.headers['idempotent-replayed']).toBe('true')
  expect(api.charges.filter((c) => c.key === 'order-2')).toHaveLength(1)
  // the client retried the gateway's 409 request-in-flight itself (its retries emit no event)
  const m = await metrics(gw.adminUrl)
  expect(metric(m, 'fencegate_idempotency_total', { route: 'stripe', result: 'in_flight' })).toBeGreaterThanOrEqual(1)
  expect(metric(m, 'fencegate_requests_total', { route: 'stripe', code: '409', outcome: 'in_flight' })).toBeGreaterThanOrEqual(1)
  expect(metric(m, 'fencegate_idempotency_total', { route: 'stripe', result: 'replayed' })).toBe(1)
  expect(statuses).toEqual([200, 200])
}, 20_000)
