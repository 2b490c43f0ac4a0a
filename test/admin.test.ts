// Contract §5a and §6: probes without a token, everything else behind the Bearer token, and
// the metric names users' dashboards rely on.
import { describe, expect, test } from 'vitest'
import { headerValues } from './helpers/upstream.js'
import { withGateway } from './helpers/gateway.js'
import { expectProblem, metric, metrics, post, send } from './helpers/http.js'

const TOKEN = 's3cret'
const { up, gw } = withGateway((up) => ({
  admin: { token: TOKEN },
  routes: [{ name: 'ledger', path: '/ledger/:res', upstream: up.url, fencing: { resource: '{param.res}' }, idempotency: { required: true } }],
}))

describe('admin listener', () => {
  test('/healthz and /readyz answer without a token', async () => {
    expect((await send(`${gw.adminUrl}/healthz`)).status).toBe(200)
    const ready = await send(`${gw.adminUrl}/readyz`)
    expect(ready.status).toBe(200)
    expect(ready.json()).toMatchObject({ status: 'ready', store: 'memory' })
  })

  test('/metrics without the token: 401 problem with WWW-Authenticate: Bearer', async () => {
    expectProblem(await send(`${gw.adminUrl}/metrics`), { status: 401, type: 'unauthorized', headers: { 'www-authenticate': /^Bearer/ } })
    expect((await send(`${gw.adminUrl}/metrics`, { headers: { authorization: 'Bearer wrong' } })).status).toBe(401)
  })

  test('/metrics with the token exposes every metric name of the contract', async () => {
    await post(`${gw.url}/ledger/a`, {}, { 'fencing-token': '1', 'idempotency-key': 'k' })
    await post(`${gw.url}/ledger/a`, {}, { 'fencing-token': '0', 'idempotency-key': 'k2' })
    const r = await send(`${gw.adminUrl}/metrics`, { headers: { authorization: `Bearer ${TOKEN}` } })
    expect(r.status).toBe(200)
    expect(r.headers['content-type']).toMatch(/^text\/plain/)
    for (const name of [
      'fencegate_requests_total', 'fencegate_request_duration_seconds', 'fencegate_upstream_duration_seconds',
      'fencegate_fencing_rejections_total', 'fencegate_idempotency_total', 'fencegate_unknown_outcomes_total',
      'fencegate_duplicate_forwards_total', 'fencegate_store_duration_seconds', 'fencegate_store_errors_total',
    ]) expect(r.text).toContain(`# TYPE ${name} `)
    expect(r.text).toMatch(/fencegate_requests_total\{route="ledger",method="POST",code="201",outcome="forwarded"\} 1/)
    expect(r.text).toMatch(/fencegate_fencing_rejections_total\{route="ledger",reason="stale"\} 1/)
    expect(r.text).toMatch(/fencegate_build_info\{version="[^"]+"\} 1/)
  })

  test('a request with a key, a token and a resource is counted under its route, and no label carries any of them', async () => {
    const forwarded = { route: 'ledger', method: 'POST', code: '201', outcome: 'forwarded' }
    const before = metric(await metrics(gw.adminUrl, TOKEN), 'fencegate_requests_total', forwarded)
    const r = await post(`${gw.url}/ledger/secret-resource`, {}, { 'fencing-token': '424242', 'idempotency-key': 'secret-key-xyz' })
    expect(r.status).toBe(201)
    // the three values did pass through the gateway
    expect(up.last().url).toBe('/ledger/secret-resource')
    expect(headerValues(up.last(), 'fencing-token')).toEqual(['424242'])
    expect(headerValues(up.last(), 'idempotency-key')).toEqual(['secret-key-xyz'])

    const text = await metrics(gw.adminUrl, TOKEN)
    // counted: the line with the route's labels, one more than before
    expect(text).toMatch(new RegExp(`^fencegate_requests_total\\{route="ledger",method="POST",code="201",outcome="forwarded"\\} ${before + 1}$`, 'm'))
    expect(metric(text, 'fencegate_idempotency_total', { route: 'ledger', result: 'stored' })).toBeGreaterThanOrEqual(1)
    // and nowhere in the exposition: not a label value, not anything else
    expect(text).not.toContain('secret-resource')
    expect(text).not.toContain('secret-key-xyz')
    expect(text).not.toContain('424242')
  })

  test('an unknown admin path is a 404 problem', async () => {
    expectProblem(await send(`${gw.adminUrl}/nope`, { headers: { authorization: `Bearer ${TOKEN}` } }), { status: 404, type: 'no-route' })
  })
})
