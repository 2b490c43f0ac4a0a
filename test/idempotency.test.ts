// Contract §4: idempotency keys against a running gateway and a real upstream: the table rows,
// replay byte for byte, release rules, unknown outcomes, scope, ttl, size limits, concurrency.
import { describe, expect, test } from 'vitest'
import { withGateway, refusedUrl, startTestGateway } from './helpers/gateway.js'
import { startUpstream } from './helpers/upstream.js'
import { expectProblem, post, send, metrics, metric } from './helpers/http.js'
import { sleep } from './helpers/wait.js'

const required = { required: true }
const { up, gw } = withGateway(async (up) => ({
  store: { kind: 'sqlite', path: '@DIR@/fg.db' },
  routes: [
    { name: 'fenced', path: '/fenced/:res', upstream: up.url, fencing: { resource: '{param.res}' }, idempotency: required },
    { name: 'wait', path: '/wait/*', upstream: up.url, idempotency: { ...required, inFlight: 'wait' } },
    { name: 'scoped', path: '/scoped/*', upstream: up.url, idempotency: { ...required, scope: '{header.Authorization}' } },
    { name: 'short', path: '/short/*', upstream: { url: up.url, timeout: '1s' }, idempotency: { ...required, ttl: '1s', lease: '1s' } },
    { name: 'small', path: '/small/*', upstream: up.url, idempotency: { ...required, maxResponseBytes: '1KiB' } },
    { name: 'retry', path: '/retry/*', upstream: { url: up.url, timeout: '300ms' }, idempotency: { ...required, unknownOutcome: 'retry' } },
    { name: 'optional', path: '/optional/*', upstream: up.url, idempotency: { required: false } },
    // nothing listens on that port: connect refused
    { name: 'dead', path: '/dead/*', upstream: await refusedUrl(), idempotency: required },
    { name: 'single', path: '/single/*', upstream: { url: up.url, connections: 1 }, idempotency: required },
    { name: 'main', path: '/*', upstream: { url: up.url, timeout: '300ms' }, idempotency: required },
  ],
}))
let n = 0
const key = () => `k-${++n}-${Math.random().toString(36).slice(2)}`

const call = (path: string, k: string | string[] | undefined, body: unknown = { a: 1 }, headers: Record<string, string> = {}) =>
  post(`${gw.url}${path}`, body, { ...(k === undefined ? {} : { 'idempotency-key': k }), ...headers })
const delta = async (fn: () => Promise<unknown>, name: string, labels: Record<string, string>) => {
  const before = metric(await metrics(gw.adminUrl), name, labels)
  await fn()
  return metric(await metrics(gw.adminUrl), name, labels) - before
}

describe('idempotency keys', () => {
  test('a repeat with the same key and body is replayed byte for byte; the upstream is called once', async () => {
    const k = key()
    const first = await call('/charge', k)
    expect(first.status).toBe(201)
    expect(first.headers['idempotent-replayed']).toBeUndefined()
    const second = await call('/charge', k)
    expect(second.status).toBe(201)
    expect(second.headers['idempotent-replayed']).toBe('true')
    expect(second.body.equals(first.body)).toBe(true)
    expect(second.headers['content-type']).toBe(first.headers['content-type'])
    expect(second.headers['x-upstream']).toBe('yes')
    expect(second.headers.via).toBe('1.1 fencegate')
    expect(up.seen.filter((s) => s.url === '/charge' && s.headers.some(([h, v]) => h.toLowerCase() === 'idempotency-key' && v === k))).toHaveLength(1)
  })

  test('the key is forwarded upstream unchanged', async () => {
    const k = `"${key()}"`
    await call('/charge', k)
    expect(up.last().headers.find(([h]) => h.toLowerCase() === 'idempotency-key')?.[1]).toBe(k)
  })

  test('an sf-string and the same characters bare name the same key', async () => {
    const k = key()
    expect((await call('/charge', `"${k}"`)).status).toBe(201)
    const again = await call('/charge', k)
    expect(again.headers['idempotent-replayed']).toBe('true')
  })

  test('a missing key on a route that requires one gets 400 and nothing is forwarded', async () => {
    const before = up.count('/nokey')
    expectProblem(await call('/nokey', undefined), { status: 400, type: 'idempotency-key-required' })
    expect(up.count('/nokey')).toBe(before)
  })

  test('without required, a request without a key passes through every time', async () => {
    const before = up.count('/optional/x')
    await call('/optional/x', undefined)
    await call('/optional/x', undefined)
    expect(up.count('/optional/x')).toBe(before + 2)
  })

  test.each([
    ['empty', ''],
    ['too long', 'x'.repeat(256)],
    ['with a space', 'a b'],
    ['unterminated quote', '"abc'],
    ['bad escape', '"a\\bc"'],
    ['empty quotes', '""'],
  ])('a malformed key (%s) gets 400', async (_what, bad) => {
    const before = up.seen.length
    expectProblem(await call('/charge', bad), { status: 400, type: 'idempotency-key-malformed' })
    expect(up.seen.length).toBe(before)
  })

  test('a key of exactly 255 characters is accepted', async () => {
    expect((await call('/charge', 'k'.repeat(254) + String(++n % 10))).status).toBe(201)
  })

  test('the key header given twice is malformed', async () => {
    expectProblem(await call('/charge', [key(), key()]), { status: 400, type: 'idempotency-key-malformed' })
  })

  test('the same key with another body, path or content type gets 422', async () => {
    const k = key()
    await call('/charge', k, { a: 1 })
    expectProblem(await call('/charge', k, { a: 2 }), { status: 422, type: 'idempotency-key-reused' })
    expect((await call('/charge2', k, { a: 1 })).status).toBe(422)
    const ct = await send(`${gw.url}/charge`, { method: 'POST', headers: { 'idempotency-key': k, 'content-type': 'text/plain' }, body: '{"a":1}' })
    expect(ct.status).toBe(422)
  })

  test('methods outside idempotency.methods ignore the key', async () => {
    const k = key()
    const before = up.count('/get-me')
    await send(`${gw.url}/get-me`, { headers: { 'idempotency-key': k } })
    await send(`${gw.url}/get-me`, { headers: { 'idempotency-key': k } })
    expect(up.count('/get-me')).toBe(before + 2)
  })

  test('a repeat while the first is in flight gets 409 with Retry-After (inFlight: reject)', async () => {
    const k = key()
    const first = call('/slow?ms=250', k)
    await sleep(60)
    expectProblem(await call('/slow?ms=250', k), { status: 409, type: 'request-in-flight', headers: { 'retry-after': '1' } })
    expect((await first).status).toBe(200)
    expect((await call('/slow?ms=250', k)).headers['idempotent-replayed']).toBe('true')
  })

  test('inFlight: wait answers the repeat with the first response', async () => {
    const k = key()
    const before = up.count('/wait/slow')
    const first = call('/wait/slow?ms=200', k)
    await sleep(50)
    const second = await call('/wait/slow?ms=200', k)
    const a = await first
    expect(second.status).toBe(200)
    expect(second.headers['idempotent-replayed']).toBe('true')
    expect(second.body.equals(a.body)).toBe(true)
    expect(up.count('/wait/slow')).toBe(before + 1)
  })

  test('50 concurrent requests with one key reach the upstream once', async () => {
    const k = key()
    const replies = await Promise.all(Array.from({ length: 50 }, () => call('/concurrent', k)))
    expect(up.seen.filter((s) => s.url === '/concurrent' && s.headers.some(([, v]) => v === k))).toHaveLength(1)
    expect(replies.filter((r) => r.status === 201 && !r.headers['idempotent-replayed'])).toHaveLength(1)
    for (const r of replies) expect([201, 409]).toContain(r.status)
  })

  test.each([502, 503, 504, 429])('an upstream %i releases the claim: the retry is forwarded again', async (status) => {
    const k = key()
    const path = `/status/${status}`
    const before = up.count(path)
    const released = await delta(async () => {
      expect((await call(path, k)).status).toBe(status)
      expect((await call(path, k)).status).toBe(status)
    }, 'fencegate_idempotency_total', { route: 'main', result: 'released' })
    expect(up.count(path)).toBe(before + 2)
    expect(released).toBe(2)
  })

  test('an upstream 500 is stored and replayed, as Stripe does', async () => {
    const k = key()
    const before = up.count('/status/500')
    expect((await call('/status/500', k)).status).toBe(500)
    const again = await call('/status/500', k)
    expect(again.status).toBe(500)
    expect(again.headers['idempotent-replayed']).toBe('true')
    expect(up.count('/status/500')).toBe(before + 1)
  })

  test('connect refused: 502, the claim is released and a retry is forwarded again', async () => {
    const k = key()
    const released = await delta(async () => {
      expectProblem(await call('/dead/x', k), { status: 502, type: 'upstream-unavailable' })
      expect((await call('/dead/x', k)).status).toBe(502) // not 409: nothing was sent
    }, 'fencegate_idempotency_total', { route: 'dead', result: 'released' })
    expect(released).toBe(2)
  })

  test('a client that leaves while its request waits for an upstream connection: nothing was sent, so the key stays free', async () => {
    const busy = call('/single/slow?ms=800', key()) // holds the route's only connection
    await sleep(100)
    const k = key()
    const before = up.count('/single/queued')
    const { request } = await import('node:http')
    await new Promise<void>((resolve) => {
      const req = request(`${gw.url}/single/queued`, { method: 'POST', headers: { 'content-type': 'application/json', 'idempotency-key': k } })
      req.on('error', () => resolve())
      req.end('{"a":1}')
      setTimeout(() => { req.destroy(); resolve() }, 250) // still queued behind the slow one
    })
    await busy
    const retry = await call('/single/queued', k)
    expect(retry.text).not.toContain('outcome-unknown')
    expect(retry.status).toBe(201) // forwarded now, not 409 outcome-unknown
    expect(up.count('/single/queued')).toBe(before + 1)
  })

  test('an upstream reset after the response headers: the client is cut off, the outcome is unknown (reset), the retry gets 409 outcome-unknown and is not forwarded', async () => {
    const k = key()
    const before = up.count('/reset-mid-body')
    const resets = metric(await metrics(gw.adminUrl), 'fencegate_unknown_outcomes_total', { route: 'main', reason: 'reset' })
    // 10 of 1000 bytes, then a reset: never a clean (truncated) answer, nothing stored to replay
    const first = await call('/reset-mid-body', k).then((r) => `answered ${r.status} with ${r.body.length} bytes`, () => 'cut off')
    expect(first).toBe('cut off')
    expect(metric(await metrics(gw.adminUrl), 'fencegate_unknown_outcomes_total', { route: 'main', reason: 'reset' })).toBe(resets + 1)
    expectProblem(await call('/reset-mid-body', k), { status: 409, type: 'outcome-unknown' })
    expect(up.count('/reset-mid-body')).toBe(before + 1)
  })

  test('unknownOutcome: reject — the upstream applied the effect and timed out; the retry gets 409 outcome-unknown and is not forwarded', async () => {
    const k = key()
    const before = up.count('/apply-then-hang')
    expectProblem(await call('/apply-then-hang', k), { status: 504, type: 'upstream-timeout' })
    expectProblem(await call('/apply-then-hang', k), { status: 409, type: 'outcome-unknown' })
    expect(up.count('/apply-then-hang')).toBe(before + 1)
    const m = await metrics(gw.adminUrl)
    expect(metric(m, 'fencegate_unknown_outcomes_total', { route: 'main', reason: 'timeout' })).toBeGreaterThanOrEqual(1)
  })

  test('unknownOutcome: retry — the retry is forwarded again and counted as a duplicate forward', async () => {
    const k = key()
    const before = up.count('/retry/apply-then-hang')
    const dup = await delta(async () => {
      expect((await call('/retry/apply-then-hang', k)).status).toBe(504)
      expect((await call('/retry/apply-then-hang', k)).status).toBe(504)
    }, 'fencegate_duplicate_forwards_total', { route: 'retry' })
    expect(up.count('/retry/apply-then-hang')).toBe(before + 2)
    expect(dup).toBe(1)
  })

  test('scope: the same key under another Authorization is another operation', async () => {
    const k = key()
    const before = up.count('/scoped/x')
    await call('/scoped/x', k, {}, { authorization: 'Bearer alice' })
    await call('/scoped/x', k, {}, { authorization: 'Bearer bob' })
    expect(up.count('/scoped/x')).toBe(before + 2)
    expect((await call('/scoped/x', k, {}, { authorization: 'Bearer alice' })).headers['idempotent-replayed']).toBe('true')
  })

  test('scope: a request that does not carry what the scope names is refused, not put in a shared bucket', async () => {
    const before = up.count('/scoped/anon')
    expectProblem(await call('/scoped/anon', key()), { status: 400, type: 'idempotency-key-malformed' })
    expect(up.count('/scoped/anon')).toBe(before)
  })

  test('ttl: a completed record is replayed for ttl, then the key is new again', async () => {
    const k = key()
    const before = up.count('/short/x')
    await call('/short/x', k)
    expect((await call('/short/x', k)).headers['idempotent-replayed']).toBe('true')
    await sleep(1100)
    expect((await call('/short/x', k)).headers['idempotent-replayed']).toBeUndefined()
    expect(up.count('/short/x')).toBe(before + 2)
  })

  test('a response larger than maxResponseBytes is passed through whole; a repeat gets 409 response-not-stored', async () => {
    const k = key()
    const notStored = await delta(async () => {
      const r = await call('/small/large?bytes=5000', k)
      expect(r.status).toBe(200)
      expect(r.body.length).toBe(5000)
    }, 'fencegate_idempotency_total', { route: 'small', result: 'not_stored' })
    expect(notStored).toBe(1)
    expectProblem(await call('/small/large?bytes=5000', k), { status: 409, type: 'response-not-stored', members: { originalStatus: 200 } })
    expect(up.count('/small/large')).toBe(1)
  })

  test('fencing runs first: a stale token is rejected even when its key has a stored response', async () => {
    const k = key()
    const r = `acct-${n}`
    expect((await call(`/fenced/${r}`, k, {}, { 'fencing-token': '7' })).status).toBe(201)
    expect((await call(`/fenced/${r}`, key(), {}, { 'fencing-token': '8' })).status).toBe(201)
    const stale = await call(`/fenced/${r}`, k, {}, { 'fencing-token': '7' })
    expect(stale.status).toBe(412)
    expect(stale.headers['idempotent-replayed']).toBeUndefined()
  })

  test('a stale token is answered 412 before any idempotency error, and leaves its key untouched', async () => {
    const r = `acct-order-${n}`
    expect((await call(`/fenced/${r}`, key(), {}, { 'fencing-token': '9' })).status).toBe(201)
    const before = up.count(`/fenced/${r}`)
    // no key, a malformed key: the stale token is what the client hears about
    expectProblem(await call(`/fenced/${r}`, undefined, {}, { 'fencing-token': '3' }), { status: 412, type: 'stale-fencing-token' })
    expect((await call(`/fenced/${r}`, 'x'.repeat(300), {}, { 'fencing-token': '3' })).status).toBe(412)
    // a well-formed key sent with a stale token is not claimed: the current holder can use it
    const k = key()
    expect((await call(`/fenced/${r}`, k, {}, { 'fencing-token': '3' })).status).toBe(412)
    const fresh = await call(`/fenced/${r}`, k, {}, { 'fencing-token': '9' })
    expect(fresh.status).toBe(201)
    expect(fresh.headers['idempotent-replayed']).toBeUndefined()
    expect(up.count(`/fenced/${r}`)).toBe(before + 1)
  })

  test('results are counted: stored, replayed, in_flight, key_reused', async () => {
    const k = key()
    const m0 = await metrics(gw.adminUrl)
    await call('/count', k)
    await call('/count', k)
    await call('/count', k, { other: true })
    const m1 = await metrics(gw.adminUrl)
    for (const result of ['stored', 'replayed', 'key_reused']) {
      expect(metric(m1, 'fencegate_idempotency_total', { route: 'main', result }) - metric(m0, 'fencegate_idempotency_total', { route: 'main', result })).toBe(1)
    }
    expect(metric(m1, 'fencegate_requests_total', { route: 'main', outcome: 'replayed' })).toBeGreaterThan(metric(m0, 'fencegate_requests_total', { route: 'main', outcome: 'replayed' }))
  })
})

describe('a retry after an unknown outcome that does nothing upstream', () => {
  // unknownOutcome: retry lets the key be claimed again after an unknown outcome; when that retry
  // then never reaches the upstream (connect refused, or a release status), nothing is known about
  // the first attempt's effect yet: the record must read as unknown again, not be released as if
  // the key were new
  test('the earlier unknown outcome is put back: still listed, and the next retry is again a duplicate forward', async () => {
    const up = await startUpstream()
    const gw = await startTestGateway({
      routes: [{ name: 'retry', path: '/*', upstream: { url: up.url, timeout: '300ms' }, idempotency: { required: true, unknownOutcome: 'retry' } }],
    })
    try {
      const k = key()
      const attempt = () => post(`${gw.url}/apply-then-hang`, { a: 1 }, { 'idempotency-key': k })
      const dup = () => metrics(gw.adminUrl).then((m) => metric(m, 'fencegate_duplicate_forwards_total', { route: 'retry' }))
      const unknown = async () => ((await send(`${gw.adminUrl}/unknown`)).json() as { unknown: unknown[] }).unknown.length
      expect((await attempt()).status).toBe(504) // applied upstream, then timed out: outcome unknown
      expect(up.count('/apply-then-hang')).toBe(1)
      expect(await unknown()).toBe(1)
      await up.close() // the retries are refused at connect: nothing reaches an upstream
      const d0 = await dup()
      expectProblem(await attempt(), { status: 502, type: 'upstream-unavailable' })
      expect(await dup()).toBe(d0 + 1)
      expect(await unknown()).toBe(1) // put back, reason timeout, not forgotten
      expectProblem(await attempt(), { status: 502, type: 'upstream-unavailable' })
      expect(await dup()).toBe(d0 + 2) // claimed again after the same unknown outcome, counted again
    } finally {
      await gw.close()
      await up.close().catch(() => {})
    }
  })
})
