// The admission step (src/admission.ts): contract precedence in one place, and one rule for the
// high-water mark — a request refused for its own mistake never raises it, whatever the cause,
// but is still answered 412 first when its token is stale.
import net from 'node:net'
import { afterAll, beforeAll, describe, expect, test } from 'vitest'
import { startTestGateway, route, type TestGateway } from './helpers/gateway.js'
import { startUpstream, type Upstream } from './helpers/upstream.js'
import { post } from './helpers/http.js'
import type { Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { createAdaptorServer } from '@hono/node-server'
import { parseConfig } from '../src/config/load.js'
import { createGateway } from '../src/gateway.js'
import { createMetrics } from '../src/telemetry/metrics.js'
import { createLogger } from '../src/log.js'
import { MemoryStore } from '../src/store/memory.js'

const P = 'urn:fencegate:problem:'

let up: Upstream
let gw: TestGateway
beforeAll(async () => {
  up = await startUpstream()
  gw = await startTestGateway(`store:
  kind: memory
routes:
${route('pay', '/accounts/:account/*', up.url, `    maxRequestBytes: 64
    fencing:
      resource: "account:{param.account}"
    idempotency:
      required: true
      scope: "{header.X-Tenant}"
`)}`)
})
afterAll(async () => { await gw?.close(); await up?.close() })

const ok = { 'x-tenant': 't1', 'idempotency-key': 'k' }

/** A chunked POST of `size` bytes over a raw socket; resolves with the status line's code. */
function chunked(path: string, headers: Record<string, string>, size: number): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = net.connect(Number(new URL(gw.url).port), '127.0.0.1')
    let got = ''
    s.on('data', (d) => { got += d.toString('latin1'); const m = /^HTTP\/1\.1 (\d{3})/.exec(got); if (m) { resolve(Number(m[1])); s.destroy() } })
    s.on('error', reject)
    const lines = Object.entries(headers).map(([k, v]) => `${k}: ${v}\r\n`).join('')
    s.write(`POST ${path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n${lines}\r\n`)
    const body = 'x'.repeat(size)
    s.write(`${body.length.toString(16)}\r\n${body}\r\n0\r\n\r\n`)
  })
}

// every way a well-tokened request can be the client's own mistake after fencing's headers
const causes: [string, (acct: string, token: string) => Promise<{ status: number; type?: string }>][] = [
  ['a malformed key', async (a, t) => { const r = await post(`${gw.url}/accounts/${a}/c`, {}, { ...ok, 'idempotency-key': '', 'fencing-token': t }); return { status: r.status, type: r.json().type } }],
  ['no key where one is required', async (a, t) => { const r = await post(`${gw.url}/accounts/${a}/c`, {}, { 'x-tenant': 't1', 'fencing-token': t }); return { status: r.status, type: r.json().type } }],
  ['a missing scope', async (a, t) => { const r = await post(`${gw.url}/accounts/${a}/c`, {}, { 'idempotency-key': 'k', 'fencing-token': t }); return { status: r.status, type: r.json().type } }],
  ['a declared body over the limit', async (a, t) => { const r = await post(`${gw.url}/accounts/${a}/c`, 'x'.repeat(100), { ...ok, 'fencing-token': t }); return { status: r.status, type: r.json().type } }],
  ['a chunked body over the limit', async (a, t) => ({ status: await chunked(`/accounts/${a}/c`, { ...ok, 'fencing-token': t }, 100) })],
]

describe('a refused request never raises the high-water mark; a stale one is answered 412 first', () => {
  for (const [cause, send1] of causes) {
    test(cause, async () => {
      const acct = `acct-${cause.replace(/\W+/g, '-')}`
      const before = up.count(`/accounts/${acct}/`)
      // refused with token 50 on a fresh resource: the mark stays unset
      const refused = await send1(acct, '50')
      expect([400, 413]).toContain(refused.status)
      // so token 10 is still accepted afterwards
      const accepted = await post(`${gw.url}/accounts/${acct}/c`, { n: 1 }, { ...ok, 'idempotency-key': `${acct}-10`, 'fencing-token': '10' })
      expect(accepted.status).toBe(201)
      // the same mistake with a stale token (5 < 10): 412 first, and the mark stays 10
      const stale = await send1(acct, '5')
      expect(stale.status).toBe(412)
      if (stale.type) expect(stale.type).toBe(`${P}stale-fencing-token`)
      expect((await post(`${gw.url}/accounts/${acct}/c`, { n: 2 }, { ...ok, 'idempotency-key': `${acct}-10b`, 'fencing-token': '10' })).status).toBe(201)
      expect(up.count(`/accounts/${acct}/`)).toBe(before + 2)
    })
  }

  test('fencing\'s own refusals come before everything, and change nothing', async () => {
    const r = await post(`${gw.url}/accounts/own/c`, 'x'.repeat(100), { 'fencing-token': '07', 'idempotency-key': '' })
    expect(r.status).toBe(400)
    expect(r.json().type).toBe(`${P}fencing-token-malformed`)
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
  const config = parseConfig(`store:\n  kind: memory\nroutes:\n${route('pay', '/accounts/:account/*', up.url, '    fencing:\n      resource: "a:{param.account}"\n    idempotency: {}\n')}`, '/tmp/x.yaml')
  const logs: string[] = []
  const log = createLogger({ write: (l: string) => { logs.push(l); return true } } as unknown as NodeJS.WritableStream)
  const { app, pools } = createGateway(config, broken, createMetrics('test'), log)
  const server = createAdaptorServer({ fetch: app.fetch }) as Server
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r))
  try {
    const before = up.count('/accounts/bug/')
    const r = await post(`http://127.0.0.1:${(server.address() as AddressInfo).port}/accounts/bug/c`, {}, { 'fencing-token': '1', 'idempotency-key': 'k', 'x-request-id': 'req-bug' })
    expect(r.status).toBe(500)
    expect(r.json()).toMatchObject({ type: `${P}gateway-error`, instance: 'req-bug', error: { type: 'api_error' } })
    expect(up.count('/accounts/bug/')).toBe(before)
    expect(logs.some((l) => l.includes('unexpected error on the request path') && l.includes('req-bug'))).toBe(true)
  } finally {
    server.close()
    await Promise.all(pools.map((p) => p.close()))
  }
})
