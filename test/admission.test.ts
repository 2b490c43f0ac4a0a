// The admission step (src/admission.ts): contract precedence in one place, and one rule for the
// high-water mark — a request refused for its own mistake never raises it, whatever the cause,
// but is still answered 412 first when its token is stale.
import net from 'node:net'
import { describe, expect, test } from 'vitest'
import { gatewayConfig, startTestGateway, withGateway } from './helpers/gateway.js'
import http from 'node:http'
import { expectProblem, metric, metrics, post, type Reply } from './helpers/http.js'
import { sleep, until } from './helpers/wait.js'
import type { AddressInfo } from 'node:net'
import { routingUrl } from '../src/front-door.js'
import { parseConfig } from '../src/config/load.js'
import { createGateway } from '../src/gateway.js'
import { createMetrics } from '../src/telemetry/metrics.js'
import { createLogger } from '../src/log.js'
import { MemoryStore } from '../src/store/index.js'

const { up, gw } = withGateway((up) => ({
  routes: [{
    name: 'pay', path: '/accounts/:account/*', upstream: up.url, maxRequestBytes: 64,
    fencing: { resource: 'account:{param.account}' },
    idempotency: { required: true, scope: '{header.X-Tenant}' },
  }],
}))

const ok = { 'x-tenant': 't1', 'idempotency-key': 'k' }

/** A chunked POST (no Content-Length) of `size` bytes: the limit is found while the body is read. */
function chunked(path: string, headers: Record<string, string>, size: number): Promise<Reply> {
  return new Promise((resolve, reject) => {
    const req = http.request(`${gw.url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers } }, (res) => {
      const parts: Buffer[] = []
      res.on('data', (d: Buffer) => parts.push(d))
      res.on('end', () => {
        const body = Buffer.concat(parts)
        resolve({ status: res.statusCode!, headers: res.headers, body, text: body.toString('utf8'), json: () => JSON.parse(body.toString('utf8')) })
      })
      res.on('error', reject)
    })
    req.on('error', reject)
    req.end('x'.repeat(size))
  })
}

// every way a well-tokened request can be the client's own mistake after fencing's headers, and
// the one problem each gets while its token is not stale
const causes: [string, (acct: string, token: string) => Promise<Reply>, { status: number; type: string }][] = [
  ['a malformed key', (a, t) => post(`${gw.url}/accounts/${a}/c`, {}, { ...ok, 'idempotency-key': '', 'fencing-token': t }), { status: 400, type: 'idempotency-key-malformed' }],
  ['no key where one is required', (a, t) => post(`${gw.url}/accounts/${a}/c`, {}, { 'x-tenant': 't1', 'fencing-token': t }), { status: 400, type: 'idempotency-key-required' }],
  ['a missing scope', (a, t) => post(`${gw.url}/accounts/${a}/c`, {}, { 'idempotency-key': 'k', 'fencing-token': t }), { status: 400, type: 'idempotency-key-malformed' }],
  ['a declared body over the limit', (a, t) => post(`${gw.url}/accounts/${a}/c`, 'x'.repeat(100), { ...ok, 'fencing-token': t }), { status: 413, type: 'body-too-large' }],
  ['a chunked body over the limit', (a, t) => chunked(`/accounts/${a}/c`, { ...ok, 'fencing-token': t }, 100), { status: 413, type: 'body-too-large' }],
]

describe('a refused request never raises the high-water mark; a stale one is answered 412 first', () => {
  for (const [cause, send1, own] of causes) {
    test(cause, async () => {
      const acct = `acct-${cause.replace(/\W+/g, '-')}`
      const before = up.count(`/accounts/${acct}/`)
      // refused with token 50 on a fresh resource: the mark stays unset
      expectProblem(await send1(acct, '50'), own)
      // so token 10 is still accepted afterwards
      const accepted = await post(`${gw.url}/accounts/${acct}/c`, { n: 1 }, { ...ok, 'idempotency-key': `${acct}-10`, 'fencing-token': '10' })
      expect(accepted.status).toBe(201)
      // the same mistake with a stale token (5 < 10): 412 first, and the mark stays 10
      expectProblem(await send1(acct, '5'), { status: 412, type: 'stale-fencing-token', members: { token: '5', highestToken: '10' } })
      expect((await post(`${gw.url}/accounts/${acct}/c`, { n: 2 }, { ...ok, 'idempotency-key': `${acct}-10b`, 'fencing-token': '10' })).status).toBe(201)
      expect(up.count(`/accounts/${acct}/`)).toBe(before + 2)
    })
  }

  test('fencing\'s own refusals come before everything, and change nothing', async () => {
    const r = await post(`${gw.url}/accounts/own/c`, 'x'.repeat(100), { 'fencing-token': '07', 'idempotency-key': '' })
    expectProblem(r, { status: 400, type: 'fencing-token-malformed' })
    expect((await post(`${gw.url}/accounts/own/c`, {}, { 'idempotency-key': '' })).status).toBe(428)
  })

  test('a replay under a newer token raises the mark: that lease holder did write (the seed timeline)', async () => {
    const h = { ...ok, 'idempotency-key': 'seed-1' }
    expect((await post(`${gw.url}/accounts/seed/c`, { a: 1 }, { ...h, 'fencing-token': '33' })).status).toBe(201)
    const replay = await post(`${gw.url}/accounts/seed/c`, { a: 1 }, { ...h, 'fencing-token': '34' })
    expect(replay.headers['idempotent-replayed']).toBe('true')
    expect((await post(`${gw.url}/accounts/seed/c`, { a: 1 }, { ...h, 'fencing-token': '33' })).status).toBe(412)
  })
})

test('a bug on the request path is the gateway\'s 500 problem with the request id, not an upstream error', async () => {
  // a store that answers with nonsense: admission trips over it (a TypeError, not a StoreError)
  const store = new MemoryStore()
  const broken = Object.assign(Object.create(store) as MemoryStore, { admit: async () => ({}) as never })
  const config = parseConfig(gatewayConfig({ routes: [{ name: 'pay', path: '/accounts/:account/*', upstream: up.url, fencing: { resource: 'a:{param.account}' }, idempotency: {} }] }), '/tmp/x.yaml')
  const logs: string[] = []
  const log = createLogger({ write: (l: string) => { logs.push(l); return true } } as unknown as NodeJS.WritableStream)
  const { handle, pools } = createGateway(config, broken, createMetrics('test'), log)
  const server = http.createServer((req, res) => void handle(req, res, routingUrl(req) as string))
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r))
  try {
    const before = up.count('/accounts/bug/')
    const r = await post(`http://127.0.0.1:${(server.address() as AddressInfo).port}/accounts/bug/c`, {}, { 'fencing-token': '1', 'idempotency-key': 'k', 'x-request-id': 'req-bug' })
    expectProblem(r, { status: 500, type: 'gateway-error', instance: 'req-bug', members: { error: { type: 'api_error' } } })
    expect(up.count('/accounts/bug/')).toBe(before)
    expect(logs.some((l) => l.includes('unexpected error on the request path') && l.includes('req-bug'))).toBe(true)
  } finally {
    server.close()
    await Promise.all(pools.map((p) => p.close()))
  }
})

test('inFlight: wait — a request that waited for its key is checked again: a newer token accepted meanwhile makes it stale, not forwarded', async () => {
  // the first attempt of K answers 503 after 400 ms (released); others answer 201 at once
  const seen: string[] = []
  const slow = http.createServer((req, res) => {
    req.resume()
    req.on('end', () => {
      seen.push(`${req.headers['fencing-token']} ${req.url}`)
      if (req.url === '/w/acct/k' && seen.filter((s) => s.endsWith('/w/acct/k')).length === 1) {
        setTimeout(() => { res.writeHead(503); res.end() }, 400)
        return
      }
      res.writeHead(201, { 'content-type': 'application/json' })
      res.end('{}')
    })
  })
  await new Promise<void>((r) => slow.listen(0, '127.0.0.1', r))
  const gw2 = await startTestGateway({
    routes: [{
      name: 'w', path: '/w/:account/*', upstream: `http://127.0.0.1:${(slow.address() as AddressInfo).port}`,
      fencing: { resource: 'account:{param.account}' }, idempotency: { inFlight: 'wait' },
    }],
  })
  try {
    const a = post(`${gw2.url}/w/acct/k`, { n: 1 }, { 'fencing-token': '5', 'idempotency-key': 'K' })
    await sleep(50)
    const b = post(`${gw2.url}/w/acct/k`, { n: 1 }, { 'fencing-token': '5', 'idempotency-key': 'K' }) // waits for K
    await sleep(50)
    expect((await post(`${gw2.url}/w/acct/other`, { n: 2 }, { 'fencing-token': '6', 'idempotency-key': 'L' })).status).toBe(201)
    expect((await a).status).toBe(503) // released: K is free again while B waits
    expectProblem(await b, { status: 412, type: 'stale-fencing-token', members: { highestToken: '6' } })
    expect(seen).toEqual(['5 /w/acct/k', '6 /w/acct/other']) // token 5 never reached the upstream after 6
  } finally {
    await gw2.close()
    slow.closeAllConnections()
    slow.close()
  }
})

test('a client that leaves while its request is queued for an upstream connection gives its claim back at once', async () => {
  // one upstream connection, held by a request the upstream answers after 1.5 s
  const hold = http.createServer((req, res) => {
    req.resume()
    req.on('end', () => setTimeout(() => { res.writeHead(201); res.end('{}') }, req.url === '/q/hold' ? 1500 : 0))
  })
  await new Promise<void>((r) => hold.listen(0, '127.0.0.1', r))
  const gw3 = await startTestGateway({
    routes: [{ name: 'q', path: '/q/*', upstream: { url: `http://127.0.0.1:${(hold.address() as AddressInfo).port}`, connections: 1 }, idempotency: { required: true } }],
  })
  try {
    const first = post(`${gw3.url}/q/hold`, {}, { 'idempotency-key': 'h' })
    await sleep(100)
    const released = () => metrics(gw3.adminUrl).then((m) => metric(m, 'fencegate_idempotency_total', { route: 'q', result: 'released' }))
    const before = await released()
    // a raw client that sends its request and leaves while it waits in the pool's queue
    await new Promise<void>((resolve) => {
      const s = net.connect(Number(new URL(gw3.url).port), '127.0.0.1', () => {
        s.write('POST /q/queued HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\nidempotency-key: queued\r\ncontent-length: 2\r\n\r\n{}')
        setTimeout(() => { s.destroy(); resolve() }, 150)
      })
    })
    // the claim is given back now, not when the held connection frees up 1.5 s later
    const t0 = Date.now()
    await until(async () => (await released()) !== before, { timeoutMs: 1000, message: 'the queued request\'s claim to be released' })
    expect(await released()).toBe(before + 1)
    expect(Date.now() - t0).toBeLessThan(1000)
    expect((await first).status).toBe(201)
  } finally {
    await gw3.close()
    hold.closeAllConnections()
    hold.close()
  }
})
