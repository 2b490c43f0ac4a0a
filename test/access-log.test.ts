// Request ids and the access log (contract §5, issue: the audit loop in production): an id per
// request, echoed, forwarded, in problems and in the attempt log; one access line per decision.
import { describe, expect, test } from 'vitest'
import { startTestGateway, withGateway, type RouteSpec, type TestGateway } from './helpers/gateway.js'
import { startUpstream, headerValues } from './helpers/upstream.js'
import { expectProblem, post, send } from './helpers/http.js'

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/
const lines = (gw: TestGateway) => gw.logs.map((l) => JSON.parse(l) as Record<string, unknown>)
const accessLines = (gw: TestGateway) => lines(gw).filter((l) => l.msg === 'request')

describe('request ids and the access log (log.access: decisions, the default)', () => {
  const { up, gw } = withGateway((up) => ({
    routes: [
      { name: 'pay', path: '/accounts/:account/*', upstream: up.url, fencing: { resource: 'account:{param.account}' }, idempotency: { required: true, scope: '{header.Authorization}' } },
      { name: 'plain', path: '/plain/*', upstream: up.url },
    ],
  }))

  const secret = { authorization: 'Bearer sk_live_secret', cookie: 'session=cookie-secret' }

  test('a sane client id is echoed and forwarded as the one line of its header; an insane one is replaced', async () => {
    const r = await send(`${gw.url}/plain/a`, { headers: { 'x-request-id': 'req-01HZX' } })
    expect(r.headers['x-request-id']).toBe('req-01HZX')
    expect(headerValues(up.last(), 'x-request-id')).toEqual(['req-01HZX'])

    const bad = await send(`${gw.url}/plain/b`, { headers: { 'x-request-id': 'evil id "with" spaces' } })
    expect(bad.headers['x-request-id']).toMatch(UUID)
    expect(headerValues(up.last(), 'x-request-id')).toEqual([bad.headers['x-request-id']])

    const none = await send(`${gw.url}/plain/c`)
    expect(none.headers['x-request-id']).toMatch(UUID)
    expect(headerValues(up.last(), 'x-request-id')).toEqual([none.headers['x-request-id']])
  })

  test('every problem carries the id as instance and a Stripe-style error member', async () => {
    const r = await post(`${gw.url}/accounts/a1/charges`, {}, { 'x-request-id': 'req-missing-token', 'idempotency-key': 'k0', ...secret })
    expectProblem(r, {
      status: 428, type: 'fencing-token-required', instance: 'req-missing-token',
      headers: { 'x-request-id': 'req-missing-token' }, members: { error: { type: 'invalid_request_error' } },
    })
    const nf = await send(`${gw.url}/nowhere`, { headers: { 'x-request-id': 'req-404' } })
    expectProblem(nf, { status: 404, type: 'no-route', instance: 'req-404' })
  })

  test('a replay echoes the replaying request\'s id, not the first one\'s', async () => {
    const h = { 'fencing-token': '5', 'idempotency-key': 'replay-1', ...secret }
    const first = await post(`${gw.url}/accounts/a2/charges`, { amount: 1 }, { ...h, 'x-request-id': 'req-first' })
    expect(first.status).toBe(201)
    const again = await post(`${gw.url}/accounts/a2/charges`, { amount: 1 }, { ...h, 'x-request-id': 'req-second' })
    expect(again.headers['idempotent-replayed']).toBe('true')
    expect(again.headers['x-request-id']).toBe('req-second')
    expect(again.body.equals(first.body)).toBe(true)
  })

  test('refused and replayed requests get an access line with their id; a plain forward gets none; no secret is ever printed', async () => {
    const before = accessLines(gw).length
    await send(`${gw.url}/plain/quiet?token=q`, { headers: { 'x-request-id': 'req-quiet' } })
    await post(`${gw.url}/accounts/a3/charges`, { amount: 1 }, { 'fencing-token': '9', 'idempotency-key': 'k-stale-1', 'x-request-id': 'req-ok', ...secret })
    const stale = await post(`${gw.url}/accounts/a3/charges`, { amount: 2 }, { 'fencing-token': '8', 'idempotency-key': 'k-stale-2', 'x-request-id': 'req-stale', ...secret })
    expect(stale.status).toBe(412)
    await post(`${gw.url}/accounts/a3/charges`, { amount: 1 }, { 'fencing-token': '9', 'idempotency-key': 'k-stale-1', 'x-request-id': 'req-replay', ...secret })
    const got = accessLines(gw).slice(before)
    expect(got.map((l) => l.requestId)).toEqual(['req-stale', 'req-replay'])
    expect(got[0]).toMatchObject({ route: 'pay', method: 'POST', path: '/accounts/a3/charges', status: 412, outcome: 'stale', resource: 'account:a3', token: '8', client: '127.0.0.1' })
    expect(got[0].keyHash).toMatch(/^[0-9a-f]{64}$/)
    expect(typeof got[0].durationMs).toBe('number')
    expect(Date.parse(String(got[0].time))).toBeGreaterThan(0)
    expect(got[1]).toMatchObject({ status: 201, outcome: 'replayed', result: 'replayed' })
    // the audit view's timeline: a stale write's resource, a replay's key (a path on the admin listener)
    expect(got.map((l) => l.view)).toEqual(['/ui/timeline?resource=account%3Aa3', `/ui/timeline?keyHash=${got[1].keyHash}`])
    expect(stale.json().timeline).toBeUndefined() // without admin.publicUrl a client is not told where the admin listener is
    const printed = gw.logs.join('\n')
    for (const secretText of ['sk_live_secret', 'cookie-secret', 'k-stale-1', 'k-stale-2', 'replay-1']) expect(printed).not.toContain(secretText)
  })

  test('the attempt log entry carries the request id', async () => {
    await post(`${gw.url}/accounts/a4/charges`, { amount: 1 }, { 'fencing-token': '1', 'idempotency-key': 'k-entry', 'x-request-id': 'req-entry', ...secret })
    await gw.audit.flush()
    const t = (await send(`${gw.adminUrl}/audit/timeline?resource=account:a4`)).json()
    expect(t.entries.map((e: { requestId: string }) => e.requestId)).toEqual(['req-entry'])
  })
})

test('log.access: all writes a line for every request; off writes none; the request id header is configurable', async () => {
  const up = await startUpstream()
  const routes: RouteSpec[] = [{ name: 'plain', path: '/plain/*', upstream: up.url }]
  const mk = (access: 'all' | 'off') => startTestGateway({ log: { access, requestIdHeader: 'X-Correlation-Id' }, routes })
  const all = await mk('all')
  const off = await mk('off')
  try {
    const r = await send(`${all.url}/plain/x`, { headers: { 'x-correlation-id': 'corr-1' } })
    expect(r.headers['x-correlation-id']).toBe('corr-1')
    expect(headerValues(up.last(), 'x-correlation-id')).toEqual(['corr-1'])
    expect(accessLines(all)).toEqual([expect.objectContaining({ requestId: 'corr-1', status: 201, outcome: 'forwarded', path: '/plain/x' })])
    await send(`${off.url}/nowhere`)
    expect(accessLines(off)).toEqual([])
  } finally {
    await all.close(); await off.close(); await up.close()
  }
})

describe('with admin.publicUrl, access lines and problems link to the audit view there', () => {
  const { gw } = withGateway((up) => ({
    admin: { publicUrl: 'https://ops.example/fencegate/' },
    routes: [{ name: 'pay', path: '/accounts/:account/*', upstream: up.url, fencing: { resource: 'account:{param.account}' }, idempotency: { required: true } }],
  }))

  test('a 412 names its resource\'s timeline, a 409 its key\'s', async () => {
    const h = (token: string, key: string) => ({ 'fencing-token': token, 'idempotency-key': key })
    expect((await post(`${gw.url}/accounts/p1/charges`, { amount: 1 }, h('7', 'pk-1'))).status).toBe(201)
    const stale = await post(`${gw.url}/accounts/p1/charges`, { amount: 1 }, { ...h('6', 'pk-2'), 'x-request-id': 'req-pub-stale' })
    expectProblem(stale, { status: 412, type: 'stale-fencing-token', instance: 'req-pub-stale', members: { timeline: 'https://ops.example/fencegate/ui/timeline?resource=account%3Ap1' } })
    const reused = await post(`${gw.url}/accounts/p1/charges`, { amount: 2 }, h('7', 'pk-1'))
    const line = accessLines(gw).find((l) => l.requestId === reused.headers['x-request-id'])!
    expectProblem(reused, { status: 422, type: 'idempotency-key-reused', members: { timeline: `https://ops.example/fencegate/ui/timeline?keyHash=${line.keyHash}` } })
    expect(line.view).toBe(reused.json().timeline)
  })
})
