/**
 * fencegate/client's decisions (src/client/decisions.ts), answer by answer, against a real
 * gateway in front of a real upstream (test/helpers/upstream.ts answers each case) and one whose
 * store is down: the gateway really gives that answer, and the client decides what the table
 * says. `send`'s loop too: in flight → asked again after Retry-After → replayed; a timeout →
 * backed off → outcome unknown, surfaced with the key hash the gateway lists; the lease
 * service's answers. The last test checks every row of the table was met by an answer here (a
 * gateway-error by decide() alone: no gateway here has that bug).
 */
import { randomUUID } from 'node:crypto'
import { afterAll, beforeAll, describe, expect, test } from 'vitest'
import { DECISIONS, acquireLease, decide, fencedFetch, keyHash, releaseLease, renewLease, send, type FetchLike, type Sent } from '../src/client/index.js'
import { refusedUrl, startTestGateway, withGateway, type TestGateway } from './helpers/gateway.js'
import { send as get } from './helpers/http.js'

const LEASE_TOKEN = 'lease-secret'
const { up, gw } = withGateway(async (up) => ({
  leases: { token: LEASE_TOKEN, resources: ['account:*'], defaultTtl: '5s', maxTtl: '10s' },
  routes: [
    { name: 'pay', path: '/pay/:res/*', upstream: up.url, maxRequestBytes: '2KiB',
      fencing: { resource: 'pay:{param.res}' }, idempotency: { required: true, maxResponseBytes: '1KiB' } },
    { name: 'short', path: '/short/:res/*', upstream: { url: up.url, timeout: '300ms' },
      fencing: { resource: 'short:{param.res}' }, idempotency: { required: true } },
    { name: 'down', path: '/down/:res/*', upstream: await refusedUrl(), fencing: { resource: 'down:{param.res}' }, idempotency: { required: true } },
  ],
}))

/** cases the gateway's answers were decided as, here */
const met = new Set<string>()

let n = 0
const fresh = () => `r${++n}-${randomUUID().slice(0, 8)}`

/** One write through the client's fetch (no retry), decided. */
async function write(path: string, o: { token?: string | null; key?: string | null; body?: string; headers?: Record<string, string> } = {}): Promise<Sent> {
  const headers = new Headers({ 'content-type': 'application/json', ...o.headers })
  let f: FetchLike
  if (o.token === null) {
    if (o.key) headers.set('idempotency-key', o.key)
    f = (input, init) => fetch(`${gw.url}${String(input)}`, init)
  } else {
    f = fencedFetch({ gateway: gw.url, token: o.token ?? '1', key: o.key ?? undefined })
  }
  const r = await send(f, path, { method: 'POST', headers, body: o.body ?? '{"amount":1}' }, { maxAttempts: 1 })
  met.add(r.decision.case)
  return r
}

describe('each answer of the gateway, decided as the table says', () => {
  test('201 → done (applied); the same key again → done (replayed), the upstream called once', async () => {
    const res = fresh()
    const before = up.count(`/pay/${res}/`)
    const a = await write(`/pay/${res}/apply`, { key: 'k1' })
    expect(a).toMatchObject({ status: 201, replayed: false, decision: { action: 'done', case: 'applied' } })
    const b = await write(`/pay/${res}/apply`, { key: 'k1' })
    expect(b).toMatchObject({ status: 201, replayed: true, decision: { action: 'done', case: 'replayed' } })
    expect(b.body).toEqual(a.body)
    expect(up.count(`/pay/${res}/`) - before).toBe(1)
  })

  test('412 stale-fencing-token → stop', async () => {
    const res = fresh()
    await write(`/pay/${res}/apply`, { token: '7', key: 'a' })
    const r = await write(`/pay/${res}/apply`, { token: '6', key: 'b' })
    expect(r).toMatchObject({ status: 412, body: { type: 'urn:fencegate:problem:stale-fencing-token', highestToken: '7' }, decision: { action: 'stop', case: 'stale-fencing-token', problem: 'stale-fencing-token' } })
  })

  test('409 request-in-flight → retry-after (with Retry-After); send asks again after it and gets the first response replayed', async () => {
    const res = fresh()
    const first = write(`/pay/${res}/slow?ms=1500`, { key: 'slow' })
    await expect.poll(() => up.count(`/pay/${res}/slow`)).toBe(1)
    const r = await write(`/pay/${res}/slow?ms=1500`, { key: 'slow' })
    expect(r).toMatchObject({ status: 409, decision: { action: 'retry-after', case: 'request-in-flight', retryAfterMs: expect.any(Number) } })
    expect(r.decision.retryAfterMs).toBeGreaterThanOrEqual(1000)
    const f = fencedFetch({ gateway: gw.url, token: '1', key: 'slow' })
    const again = await send(f, `/pay/${res}/slow?ms=1500`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"amount":1}' })
    expect((await first).decision.case).toBe('applied')
    expect(again.attempts.map((d) => d.case)).toEqual(expect.arrayContaining(['replayed']))
    expect(again).toMatchObject({ status: 200, replayed: true, decision: { action: 'done' } })
    expect(up.count(`/pay/${res}/slow`)).toBe(1)
  })

  test('504 upstream-timeout → backoff; the same key then gets 409 outcome-unknown → surface, with the key hash the gateway lists', async () => {
    const res = fresh()
    const key = `job-${res}`
    const f = fencedFetch({ gateway: gw.url, token: '1', key })
    const r = await send(f, `/short/${res}/hang`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' }, { maxAttempts: 3, backoffMs: 50 })
    for (const d of r.attempts) met.add(d.case)
    expect(r.attempts.map((d) => `${d.status} ${d.action} ${d.case}`)).toEqual(['504 backoff upstream-unavailable', '409 surface outcome-unknown'])
    expect(r.body).toMatchObject({ type: 'urn:fencegate:problem:outcome-unknown', reason: 'timeout' })
    expect(up.count(`/short/${res}/hang`)).toBe(1)
    const unknown = (await get(`${gw.adminUrl}/unknown?route=short`)).json().unknown
    expect(unknown.map((u: { keyHash: string }) => u.keyHash)).toContain(keyHash(key))
  })

  test('a response too large to store → done; the same key again: 409 response-not-stored → done, not applied again', async () => {
    const res = fresh()
    const a = await write(`/pay/${res}/large?bytes=4096`, { key: 'big' })
    expect(a).toMatchObject({ status: 200, decision: { action: 'done', case: 'applied' } })
    const b = await write(`/pay/${res}/large?bytes=4096`, { key: 'big' })
    expect(b).toMatchObject({ status: 409, body: { type: 'urn:fencegate:problem:response-not-stored' }, decision: { action: 'done', case: 'response-not-stored' } })
    expect(up.count(`/pay/${res}/large`)).toBe(1)
  })

  test('422 idempotency-key-reused → dead-letter', async () => {
    const res = fresh()
    await write(`/pay/${res}/apply`, { key: 'same', body: '{"amount":1}' })
    const r = await write(`/pay/${res}/apply`, { key: 'same', body: '{"amount":2}' })
    expect(r).toMatchObject({ status: 422, decision: { action: 'dead-letter', case: 'idempotency-key-reused' } })
  })

  test('400 malformed token, 400 malformed key, 400 no key, 428 no token → dead-letter; nothing forwarded', async () => {
    const res = fresh()
    const cases = [
      await write(`/pay/${res}/apply`, { token: '007', key: 'x' }),
      await write(`/pay/${res}/apply`, { key: 'x'.repeat(300) }),
      await write(`/pay/${res}/apply`, { key: null }),
      await write(`/pay/${res}/apply`, { token: null, key: 'x' }),
    ]
    expect(cases.map((c) => `${c.status} ${c.decision.problem} ${c.decision.action} ${c.decision.case}`)).toEqual([
      '400 fencing-token-malformed dead-letter malformed',
      '400 idempotency-key-malformed dead-letter malformed',
      '400 idempotency-key-required dead-letter malformed',
      '428 fencing-token-required dead-letter fencing-token-required',
    ])
    expect(up.count(`/pay/${res}/`)).toBe(0)
  })

  test('the upstream\'s own answers: 503 and 429 → backoff (the claim is released), 400 → dead-letter, 500 → surface; a redirect → dead-letter', async () => {
    const res = fresh()
    const seen = []
    for (const s of [503, 429, 400, 404, 500]) seen.push(await write(`/pay/${res}/status/${s}`, { key: `s${s}` }))
    seen.push(await write(`/pay/${res}/redirect`, { key: 'redirect' }))
    expect(seen.map((c) => `${c.status} ${c.decision.action} ${c.decision.case}`)).toEqual([
      '503 backoff upstream-unavailable', '429 backoff upstream-unavailable', '400 dead-letter upstream-4xx',
      '404 dead-letter upstream-4xx', '500 surface upstream-5xx', '302 dead-letter unexpected',
    ])
    // released: the same key is forwarded again
    const again = await write(`/pay/${res}/status/503`, { key: 's503' })
    expect(again.decision.case).toBe('upstream-unavailable')
    expect(up.count(`/pay/${res}/status/503`)).toBe(2)
  })

  test('502 upstream-unavailable (connect refused) → backoff; no answer at all (the gateway is not there) → backoff', async () => {
    const r = await write(`/down/${fresh()}/apply`, { key: 'down' })
    expect(r).toMatchObject({ status: 502, decision: { action: 'backoff', case: 'upstream-unavailable', problem: 'upstream-unavailable' } })
    const nobody = await send(fencedFetch({ gateway: await refusedUrl(), token: '1', key: 'k' }), '/pay/x/apply', { method: 'POST', body: '{}' }, { maxAttempts: 2, backoffMs: 10 })
    met.add(nobody.decision.case)
    expect(nobody).toMatchObject({ status: 0, decision: { action: 'backoff', case: 'no-answer' } })
    expect(nobody.attempts).toHaveLength(2)
    expect(nobody.error).toBeInstanceOf(Error)
  })

  test('404 no-route and 413 body-too-large → dead-letter', async () => {
    const a = await write('/nowhere/apply', { key: 'k' })
    const b = await write(`/pay/${fresh()}/apply`, { key: 'k', body: JSON.stringify({ pad: 'x'.repeat(4096) }) })
    expect([a, b].map((c) => `${c.status} ${c.decision.problem} ${c.decision.action} ${c.decision.case}`)).toEqual([
      '404 no-route dead-letter no-route', '413 body-too-large dead-letter no-route',
    ])
  })

  test('an aborted request (the lease was lost) → stop, not retried', async () => {
    const control = new AbortController()
    const f = fencedFetch({ gateway: gw.url, token: '1', key: 'abort', signal: control.signal })
    const res = fresh()
    const pending = send(f, `/pay/${res}/slow?ms=2000`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' }, { maxAttempts: 5, signal: control.signal })
    await expect.poll(() => up.count(`/pay/${res}/slow`)).toBe(1)
    control.abort(new Error('lost'))
    const r = await pending
    met.add(r.decision.case)
    expect(r).toMatchObject({ status: 0, decision: { action: 'stop', case: 'aborted' } })
    expect(r.attempts).toHaveLength(1)
  })
})

describe('the lease service\'s answers', () => {
  const service = () => ({ gateway: gw.url, authToken: LEASE_TOKEN })
  test('201 → done; another holder meanwhile: 409 lease-held → retry-after, by Retry-After; the holder\'s renewal → done, its release → done', async () => {
    const resource = `account:${fresh()}`
    const a = await acquireLease(service(), resource, 'worker-a')
    const b = await acquireLease(service(), resource, 'worker-b')
    const renewed = await renewLease(service(), resource, a.body.token)
    const released = await releaseLease(service(), resource, a.body.token)
    for (const r of [a, b, renewed, released]) met.add(r.decision.case)
    expect([a, b, renewed, released].map((r) => `${r.status} ${r.decision.action} ${r.decision.case}`)).toEqual(['201 done applied', '409 retry-after lease-held', '200 done applied', '204 done applied'])
    expect(b.decision.retryAfterMs).toBeGreaterThanOrEqual(1000)
    expect(b.body).toMatchObject({ holder: 'worker-a' })
  })

  test('a released lease\'s token: 412 → stop, on renew and release', async () => {
    const resource = `account:${fresh()}`
    const a = await acquireLease(service(), resource, 'worker-a')
    await releaseLease(service(), resource, a.body.token)
    const answers = [await renewLease(service(), resource, a.body.token), await releaseLease(service(), resource, a.body.token)]
    expect(answers.map((r) => `${r.status} ${r.decision.action} ${r.decision.problem}`)).toEqual(['412 stop stale-fencing-token', '412 stop stale-fencing-token'])
  })

  test('no Bearer token: 401 → dead-letter; a ttl over maxTtl, no holder: 400 → dead-letter; a resource outside leases.resources: 404 → dead-letter', async () => {
    const resource = `account:${fresh()}`
    const answers = [
      await acquireLease({ gateway: gw.url }, resource, 'w'),
      await acquireLease(service(), resource, 'w', '1h'),
      await acquireLease(service(), resource, ''),
      await acquireLease(service(), `ledger:${fresh()}`, 'w'),
    ]
    for (const r of answers) met.add(r.decision.case)
    expect(answers.map((r) => `${r.status} ${r.decision.problem} ${r.decision.action}`)).toEqual([
      '401 lease-token-required dead-letter', '400 lease-request-invalid dead-letter', '400 lease-request-invalid dead-letter', '404 no-route dead-letter',
    ])
  })
})

describe('a store that cannot answer', () => {
  let down: TestGateway
  beforeAll(async () => {
    down = await startTestGateway({
      store: { kind: 'redis', url: `redis://127.0.0.3:${new URL(await refusedUrl()).port}`, timeout: '200ms' },
      routes: [{ name: 'pay', path: '/pay/:res/*', upstream: up.url, fencing: { resource: 'pay:{param.res}' }, idempotency: { required: true } }],
    })
  })
  afterAll(async () => { await down?.close() })

  test('503 store-unavailable → backoff by Retry-After, the same key asked again; nothing forwarded', async () => {
    const res = fresh()
    const f = fencedFetch({ gateway: down.url, token: '1', key: 'k' })
    const r = await send(f, `/pay/${res}/apply`, { method: 'POST', body: '{}' }, { maxAttempts: 2, maxWaitMs: 5000 })
    met.add(r.decision.case)
    expect(r.attempts.map((d) => `${d.status} ${d.problem} ${d.action}`)).toEqual(['503 store-unavailable backoff', '503 store-unavailable backoff'])
    expect(r.attempts[0].retryAfterMs).toBeGreaterThanOrEqual(1000)
    expect(up.count(`/pay/${res}/`)).toBe(0)
  })
})

describe('the table', () => {
  test('decide() is what the rows say for answers no gateway here gives', () => {
    const gatewayError = decide({ status: 500, headers: {}, body: { type: 'urn:fencegate:problem:gateway-error' } })
    met.add(gatewayError.case)
    expect(gatewayError).toMatchObject({ action: 'surface', case: 'gateway-error' })
  })

  test('every row was met by an answer', () => {
    expect(DECISIONS.map((r) => r.case).filter((c) => !met.has(c))).toEqual([])
  })
})
