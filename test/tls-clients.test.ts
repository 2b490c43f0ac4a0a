// Contract §5b with real clients: `curl --cacert` plays the README's session (a charge, its
// retry replayed by a newer lease holder, the old token refused 412) against the HTTPS listener,
// and the official `stripe` client does the same over HTTPS with the private CA in its agent.
import { execFile } from 'node:child_process'
import http from 'node:http'
import https from 'node:https'
import type { AddressInfo } from 'node:net'
import { promisify } from 'node:util'
import Stripe from 'stripe'
import { afterAll, beforeAll, describe, expect, test } from 'vitest'
import { makePki, type Pki } from './helpers/certs.js'
import { startTestGateway, type TestGateway } from './helpers/gateway.js'
import { startUpstream, headerValues, type Upstream } from './helpers/upstream.js'

const run = promisify(execFile)
let pki: Pki

beforeAll(() => { pki = makePki() })

describe('curl --cacert, the README\'s session over HTTPS', () => {
  let up: Upstream
  let gw: TestGateway
  beforeAll(async () => {
    const server = pki.issue('server')
    up = await startUpstream()
    gw = await startTestGateway({
      tls: { cert: server.cert, key: server.key },
      store: { kind: 'sqlite', path: '@DIR@/fg.db' },
      routes: [{ name: 'payments', path: '/accounts/:account/*', methods: ['POST'], upstream: up.url, fencing: { resource: 'account:{param.account}' }, idempotency: {} }],
    })
  })
  afterAll(async () => { await gw?.close(); await up?.close() })

  /** `curl -si --cacert` a charge; the status line, the headers (lower-case names) and the body. */
  const charge = async (token: string) => {
    const { stdout } = await run('curl', ['-si', '--cacert', pki.ca.cert, `${gw.url}/accounts/acct-9f2c/charges`, '-H', 'Content-Type: application/json',
      '-H', `Fencing-Token: ${token}`, '-H', 'Idempotency-Key: job-9-9f2c', '-d', '{"amount":1250,"currency":"eur"}'])
    const [head, body] = stdout.split('\r\n\r\n')
    const [status, ...lines] = head.split('\r\n')
    return { status, headers: Object.fromEntries(lines.map((l) => [l.slice(0, l.indexOf(':')).toLowerCase(), l.slice(l.indexOf(':') + 1).trim()])), body }
  }

  test('201, the retry replayed, the old token 412; one charge upstream, X-Forwarded-Proto https', async () => {
    const first = await charge('33')
    expect(first.status).toBe('HTTP/1.1 201 Created')
    const replay = await charge('34')
    expect(replay.status).toBe('HTTP/1.1 201 Created')
    expect(replay.headers['idempotent-replayed']).toBe('true')
    expect(replay.body).toBe(first.body)
    const stale = await charge('33')
    expect(stale.status).toBe('HTTP/1.1 412 Precondition Failed')
    expect(stale.headers['content-type']).toBe('application/problem+json')
    expect(JSON.parse(stale.body)).toMatchObject({ type: 'urn:fencegate:problem:stale-fencing-token', status: 412, token: '33', highestToken: '34' })
    expect(up.count('/accounts/')).toBe(1)
    expect(headerValues(up.last(), 'x-forwarded-proto')).toEqual(['https'])
  })

  test('curl without the CA refuses the certificate; cleartext gets no HTTP answer', async () => {
    await expect(run('curl', ['-s', gw.url])).rejects.toMatchObject({ code: 60 }) // CURLE_PEER_FAILED_VERIFICATION
    const plain = await run('curl', ['-s', '-o', '/dev/null', '-w', '%{http_code}', gw.url.replace('https:', 'http:')]).catch((e: { code: number; stdout: string }) => e)
    expect((plain as { code?: number }).code).toBeGreaterThan(0)
    expect((plain as { stdout: string }).stdout).toBe('000')
  })
})

describe('the stripe client over HTTPS', () => {
  let api: http.Server
  let apiUrl: string
  let charges: { id: string; key?: string; token?: string }[]
  let gw: TestGateway
  let stripe: Stripe
  beforeAll(async () => {
    charges = []
    api = http.createServer(async (req, res) => {
      let body = ''
      for await (const c of req) body += c
      const form = new URLSearchParams(body)
      const charge = { id: `ch_${charges.length + 1}`, object: 'charge', amount: Number(form.get('amount')), currency: form.get('currency'), status: 'succeeded' }
      charges.push({ id: charge.id, key: req.headers['idempotency-key'] as string, token: req.headers['fencing-token'] as string })
      res.writeHead(200, { 'content-type': 'application/json', 'request-id': `req_${charges.length}` })
      res.end(JSON.stringify(charge))
    })
    await new Promise<void>((r) => api.listen(0, '127.0.0.1', r))
    apiUrl = `http://127.0.0.1:${(api.address() as AddressInfo).port}`
    const server = pki.issue('stripe-gw')
    gw = await startTestGateway({
      tls: { cert: server.cert, key: server.key },
      routes: [{ name: 'stripe', path: '/v1/*', upstream: apiUrl, fencing: { resource: 'charges' }, idempotency: { scope: '{header.Authorization}' } }],
    })
    const { hostname, port } = new URL(gw.url)
    stripe = new Stripe('sk_test_fencegate', { host: hostname, port: Number(port), protocol: 'https', httpAgent: new https.Agent({ ca: pki.ca.certPem }), maxNetworkRetries: 0, telemetry: false })
  })
  afterAll(async () => { await gw?.close(); await new Promise((r) => api?.close(r)) })

  test('a charge, its retry by a newer lease holder replayed, the old holder refused 412', async () => {
    const create = (token: string) => stripe.charges.create({ amount: 1250, currency: 'eur' }, { idempotencyKey: 'job-9', headers: { 'Fencing-Token': token } })
    const first = await create('33')
    expect(first).toMatchObject({ id: 'ch_1', amount: 1250 })
    const replay = await create('34')
    expect(replay.id).toBe('ch_1')
    expect(replay.lastResponse.headers['idempotent-replayed']).toBe('true')
    const err = await create('33').then(() => undefined, (e: unknown) => e)
    expect(err).toBeInstanceOf(Stripe.errors.StripeError)
    expect(err).toMatchObject({ statusCode: 412, code: 'stale-fencing-token' })
    expect(charges).toEqual([{ id: 'ch_1', key: 'job-9', token: '33' }])
  })
})
