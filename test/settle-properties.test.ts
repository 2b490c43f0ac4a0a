/**
 * Contract §4a as properties (fast-check): random interleavings, per idempotency key and across
 * keys at once, of attempts (answered; applied then hanging past upstream.timeout; applied then
 * reset; hanging without applying; refused with 503 before applying), probe answers (the lookup
 * truthful — 200 when applied, 404 when not — or undecided: 500, 503, or slower than
 * upstream.timeout), operator resolves (admin POST /resolve) and retries, against a real gateway
 * on the memory store and two on one sqlite file (each step goes to one of them), and a real HTTP
 * upstream keeping a ledger of what it applied.
 *
 * 1. The lookup truthful, no key is applied twice by the upstream. An operator who resolves
 *    `failed` a key the upstream holds is not a probe: such a key is left out.
 * 2. No answer replayed with `Fencegate-Settled: probe` is for a key the upstream does not hold.
 *    An operator's resolve `completed` of a key never applied is the operator's word (the key
 *    becomes not_stored, never a probe's replay): it is not checked here.
 */
import http from 'node:http'
import type { AddressInfo, Socket } from 'node:net'
import { join } from 'node:path'
import fc from 'fast-check'
import { afterAll, beforeAll, describe, expect, test } from 'vitest'
import { startTestGateway, tempDir, type RouteSpec, type StoreInput, type TestGateway } from './helpers/gateway.js'
import { post, send, type Reply } from './helpers/http.js'
import { sleep, until } from './helpers/wait.js'

/** What the lookup answers to one probe: the ledger's truth, an undecided status, or the truth too late. */
type Answer = 'truth' | 500 | 503 | 'slow'
type Mode = 'ok' | 'hang' | 'reset' | 'never' | 'refuse'
type Step =
  | { t: 'attempt'; mode: Mode; via: number }
  | { t: 'twice' }
  | { t: 'answers'; list: Answer[] }
  | { t: 'resolve'; as: 'completed' | 'failed'; via: number }
  | { t: 'sleep'; ms: number }
  | { t: 'probed' }

const TIMEOUT_MS = 300

interface Ledger {
  url: string
  applied: Map<string, number>
  probes: Map<string, number>
  /** the answers the next probes of a key get, in order; then the truth */
  answers: Map<string, Answer[]>
  close(): Promise<void>
}

async function ledger(): Promise<Ledger> {
  const sockets = new Set<Socket>()
  const l: Ledger = { url: '', applied: new Map(), probes: new Map(), answers: new Map(), close: async () => {} }
  const server = http.createServer((req, res) => {
    const u = new URL(req.url!, 'http://x')
    if (req.method === 'GET' && u.searchParams.has('idempotencyKey')) {
      const key = u.searchParams.get('idempotencyKey')!
      l.probes.set(key, (l.probes.get(key) ?? 0) + 1)
      const told = l.answers.get(key)?.shift() ?? 'truth'
      const truth = () => {
        if (l.applied.get(key)) res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ charges: [{ idempotencyKey: key, amount: 100 }] }))
        else res.writeHead(404, { 'content-type': 'application/json' }).end('{"charges":[]}')
      }
      if (told === 'truth') truth()
      else if (told === 'slow') setTimeout(truth, TIMEOUT_MS + 150)
      else res.writeHead(told, { 'content-type': 'application/json' }).end('{}')
      return
    }
    req.resume()
    req.on('end', () => {
      const key = String(req.headers['idempotency-key'])
      const mode = req.headers['x-mode'] as Mode | undefined
      if (mode === 'never') return
      if (mode === 'refuse') { res.writeHead(503, { 'content-type': 'application/json' }).end('{"error":"busy"}'); return }
      l.applied.set(key, (l.applied.get(key) ?? 0) + 1)
      if (mode === 'hang') return
      if (mode === 'reset') { req.socket.destroy(); return }
      res.writeHead(201, { 'content-type': 'application/json' }).end(JSON.stringify({ id: `ch-${key}` }))
    })
  })
  server.on('connection', (s) => { sockets.add(s); s.on('close', () => sockets.delete(s)) })
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r))
  l.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  l.close = () => new Promise((r) => { for (const s of sockets) s.destroy(); server.close(() => r()) })
  return l
}

const route = (upstream: string): RouteSpec => ({
  name: 'payments', path: '/accounts/:account/*', methods: ['POST', 'GET'], upstream: { url: upstream, timeout: `${TIMEOUT_MS}ms` },
  idempotency: {
    lease: '2s', unknownOutcome: 'reject',
    settle: { probe: { path: '/accounts/{param.account}/charges?idempotencyKey={key}', applied: [200], notApplied: [404] }, after: '1s', every: '1s' },
  },
})

const step: fc.Arbitrary<Step> = fc.oneof(
  { weight: 4, arbitrary: fc.record({ mode: fc.constantFrom<Mode>('ok', 'hang', 'reset', 'never', 'refuse'), via: fc.nat(1) }).map((a) => ({ t: 'attempt' as const, ...a })) },
  { weight: 1, arbitrary: fc.constant({ t: 'twice' as const }) },
  { weight: 2, arbitrary: fc.array(fc.constantFrom<Answer>('truth', 500, 503, 'slow'), { minLength: 1, maxLength: 3 }).map((list) => ({ t: 'answers' as const, list })) },
  { weight: 1, arbitrary: fc.record({ as: fc.constantFrom('completed' as const, 'failed' as const), via: fc.nat(1) }).map((r) => ({ t: 'resolve' as const, ...r })) },
  { weight: 2, arbitrary: fc.integer({ min: 0, max: 1100 }).map((ms) => ({ t: 'sleep' as const, ms })) },
  { weight: 2, arbitrary: fc.constant({ t: 'probed' as const }) },
)
/** Up to three keys, each with its own steps; the keys' steps run at once. */
const plan = fc.array(fc.array(step, { minLength: 1, maxLength: 4 }), { minLength: 1, maxLength: 3 })

let up: Ledger
beforeAll(async () => { up = await ledger() })
afterAll(() => up?.close())

/** The store, and how many gateways share it (attempts and resolves go to one of them, `via`). */
const STORES: [string, () => StoreInput, number][] = [
  ['memory', () => ({ kind: 'memory' }), 1],
  ['sqlite', () => ({ kind: 'sqlite', path: join(tempDir(), 'shared.db') }), 2],
]

describe.each(STORES)('settling on the %s store, any interleaving', (name, storeOf, count) => {
  let gws: TestGateway[] = []
  beforeAll(async () => {
    const store = storeOf()
    for (let i = 0; i < count; i++) gws.push(await startTestGateway({ store, admin: { writeToken: 'w' }, routes: [route(up.url)] }))
  })
  afterAll(async () => { for (const g of gws) await g.close(); gws = [] })
  const gw = (via = 0) => gws[via % gws.length]

  test('no key applied twice with a truthful lookup; no probe replay of an effect the upstream does not hold', async () => {
    let run = 0
    await fc.assert(fc.asyncProperty(plan, async (keys) => {
      const prefix = `${name}-${process.pid}-${run++}`
      const names = keys.map((_, i) => `${prefix}-k${i}`)
      const replies = new Map<string, Reply[]>(names.map((k) => [k, []]))
      /** keys an operator resolved `failed` while the upstream held their effect */
      const overruled = new Set<string>()
      const charge = async (key: string, mode: Mode, via = 0) => {
        const r = await post(`${gw(via).url}/accounts/acc-1/charges`, { amount: 100 }, { 'idempotency-key': key, ...(mode === 'ok' ? {} : { 'x-mode': mode }) })
        replies.get(key)!.push(r)
        // property 2, at the moment of the replay
        if (r.headers['fencegate-settled'] === 'probe') expect(up.applied.get(key) ?? 0, `${key} replayed as settled by a probe`).toBeGreaterThanOrEqual(1)
        return r
      }
      await Promise.all(keys.map(async (steps, i) => {
        const key = names[i]
        for (const s of steps) {
          if (s.t === 'attempt') await charge(key, s.mode, s.via)
          else if (s.t === 'twice') await Promise.all([charge(key, 'ok', 0), charge(key, 'ok', 1)])
          else if (s.t === 'answers') up.answers.set(key, [...s.list])
          else if (s.t === 'sleep') await sleep(s.ms)
          else if (s.t === 'probed') {
            const seen = up.probes.get(key) ?? 0
            // on as soon as the probe is sent: the next step may meet it unanswered
            await until(() => (up.probes.get(key) ?? 0) > seen, { timeoutMs: 1300 }).catch(() => undefined)
          } else {
            const held = (up.applied.get(key) ?? 0) > 0
            const r = await send(`${gw(s.via).adminUrl}/resolve`, { method: 'POST', headers: { 'content-type': 'application/json', authorization: 'Bearer w' }, body: JSON.stringify({ route: 'payments', key, as: s.as, reason: 'property test' }) })
            expect(r.status, r.text).not.toBeGreaterThanOrEqual(500)
            if (r.status === 200 && s.as === 'failed' && held) overruled.add(key)
          }
        }
      }))
      // the lookup truthful from here on: every unknown outcome of the run gets settled by a probe
      for (const k of names) up.answers.delete(k)
      await until(async () => (await send(`${gw().adminUrl}/unknown`)).json().unknown.length === 0, { timeoutMs: 8000, intervalMs: 100, message: 'every unknown outcome settled by a truthful probe' })
      for (const k of names) {
        const last = await charge(k, 'ok')
        expect(last.status, last.text).toBeLessThan(500)
        // property 1
        if (!overruled.has(k)) expect(up.applied.get(k) ?? 0, `${k}: ${replies.get(k)!.map((r) => r.status).join(' ')}`).toBeLessThanOrEqual(1)
      }
    }), { numRuns: 8, endOnFailure: true })
  }, 90_000)
})
