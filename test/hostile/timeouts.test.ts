/**
 * Timer precision and live leases (issue: promises that hold in the corners, items 1 and 2).
 * - `upstream.timeout` is kept to the millisecond: no 504 before it, every 504 soon after it.
 * - An answer still streaming past the idempotency lease keeps its claim: a second attempt is
 *   told the first is in flight (never outcome-unknown, never forwarded again), and the first
 *   attempt's response is stored and replayed.
 */
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { afterAll, beforeAll, describe, expect, test } from 'vitest'
import { startTestGateway, withGateway, type RouteSpec, type TestGateway } from '../helpers/gateway.js'
import { expectProblem, send, post } from '../helpers/http.js'
import { sleep } from '../helpers/wait.js'

/** Sends one request and measures how long its answer took, ms. */
async function timed(url: string, init: Parameters<typeof send>[1] = {}) {
  const t0 = performance.now()
  const r = await send(url, init)
  return { r, ms: performance.now() - t0 }
}

const median = (xs: number[]) => xs.slice().sort((a, b) => a - b)[Math.floor(xs.length / 2)]

describe('upstream.timeout is precise to the millisecond', () => {
  const { gw } = withGateway((up) => ({
    routes: [
      { name: 't600', path: '/t600/*', upstream: { url: up.url, timeout: '600ms' }, idempotency: { required: true, lease: '1s' } },
      { name: 't400', path: '/t400/*', upstream: { url: up.url, timeout: '400ms' }, idempotency: { required: true, lease: '1s' } },
      { name: 't100', path: '/t100/*', upstream: { url: up.url, timeout: '100ms' } },
    ],
  }))
  let n = 0

  test('an answer at 550 ms under a 600 ms timeout always arrives (no early 504 turning it into an unknown outcome)', async () => {
    // the input: about one POST a second, at phases that fall between the ticks of a
    // coarse shared clock (undici's fires such a timeout anywhere from 100 ms to 500 ms early)
    const jitter = [0, 137, 251, 64, 199, 288]
    const statuses: number[] = []
    for (const j of jitter) {
      const t0 = Date.now()
      const r = await post(`${gw.url}/t600/slow?ms=550`, { j }, { 'idempotency-key': `early-${++n}` })
      statuses.push(r.status)
      await sleep(Math.max(0, 1_000 - (Date.now() - t0) + j))
    }
    expect(statuses).toEqual(jitter.map(() => 200))
  })

  test('an upstream that never answers gets its 504 at 400 ms, not a second later; one answering at 800 ms gets 504 too', async () => {
    const took: number[] = []
    for (let i = 0; i < 5; i++) {
      const { r, ms } = await timed(`${gw.url}/t400/hang`, { method: 'POST', headers: { 'idempotency-key': `hang-${++n}` }, body: 'x' })
      expectProblem(r, { status: 504, type: 'upstream-timeout' })
      took.push(ms)
    }
    expect(Math.min(...took)).toBeGreaterThanOrEqual(399)
    expect(median(took)).toBeLessThan(450)
    expect(Math.max(...took)).toBeLessThan(600)
    const late = await post(`${gw.url}/t400/slow?ms=800`, {}, { 'idempotency-key': `late-${++n}` })
    expect(late.status).toBe(504)
  })

  test('a 100 ms timeout holds too (plain route)', async () => {
    const took: number[] = []
    for (let i = 0; i < 5; i++) {
      const { r, ms } = await timed(`${gw.url}/t100/hang`)
      expect(r.status).toBe(504)
      took.push(ms)
    }
    expect(Math.min(...took)).toBeGreaterThanOrEqual(99)
    expect(median(took)).toBeLessThan(150)
    expect((await send(`${gw.url}/t100/slow?ms=40`)).status).toBe(200)
  })
})

/** An upstream that answers 201 at once, then `chunks` × 10 bytes, one every `everyMs`. */
async function dripUpstream(chunks: number, everyMs: number) {
  let hits = 0
  const server = http.createServer((req, res) => {
    req.resume()
    req.on('end', () => {
      hits++
      res.writeHead(201, { 'content-type': 'text/plain', 'content-length': chunks * 10 })
      let sent = 0
      const t = setInterval(() => {
        res.write(String(sent).padStart(10, '.'))
        if (++sent === chunks) { clearInterval(t); res.end() }
      }, everyMs)
      res.on('close', () => clearInterval(t))
    })
  })
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r))
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    hits: () => hits,
    close: () => new Promise<void>((r) => { server.closeAllConnections(); server.close(() => r()) }),
  }
}

for (const store of ['memory', 'sqlite'] as const) {
  describe(`the lease is renewed while the answer is alive (${store})`, () => {
    let up: Awaited<ReturnType<typeof dripUpstream>>
    let gw: TestGateway
    beforeAll(async () => {
      // the input: timeout 2 s, lease 2 s, 100 bytes in 10-byte chunks every 400 ms
      up = await dripUpstream(10, 400)
      const route = (mode: 'reject' | 'retry'): RouteSpec => ({ name: mode, path: `/${mode}/*`, upstream: up.url, idempotency: { required: true, lease: '2s', unknownOutcome: mode } })
      gw = await startTestGateway({
        store: store === 'sqlite' ? { kind: 'sqlite', path: '@DIR@/fg.db' } : { kind: 'memory' },
        routes: [route('reject'), route('retry')],
      })
    })
    afterAll(async () => { await gw?.close(); await up?.close() })

    for (const mode of ['reject', 'retry']) {
      test(`unknownOutcome: ${mode} — a second attempt at 2.6 s is told "in flight", the first gets its 201 and is replayed after`, async () => {
        const k = `drip-${mode}-${Date.now()}`
        const hits = up.hits()
        const a = post(`${gw.url}/${mode}/charge`, { amount: 1 }, { 'idempotency-key': k })
        await sleep(2_600)
        expectProblem(await post(`${gw.url}/${mode}/charge`, { amount: 1 }, { 'idempotency-key': k }), { status: 409, type: 'request-in-flight' })
        const first = await a
        expect(first.status).toBe(201)
        expect(first.body.length).toBe(100)
        const again = await post(`${gw.url}/${mode}/charge`, { amount: 1 }, { 'idempotency-key': k })
        expect(again.status).toBe(201)
        expect(again.headers['idempotent-replayed']).toBe('true')
        expect(again.body.equals(first.body)).toBe(true)
        expect(up.hits()).toBe(hits + 1) // applied once
      }, 15_000)
    }
  })
}
