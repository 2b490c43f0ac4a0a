// Contract §5a and §6: probes without a token, everything else behind the Bearer token, and
// the metric names users' dashboards rely on.
import { afterAll, beforeAll, describe, expect, test } from 'vitest'
import { startUpstream, type Upstream } from './helpers/upstream.js'
import { startTestGateway, route, type TestGateway } from './helpers/gateway.js'
import { post, send } from './helpers/http.js'

let up: Upstream
let gw: TestGateway
beforeAll(async () => {
  up = await startUpstream()
  gw = await startTestGateway(`admin:
  listen: 127.0.0.1:0
  token: s3cret
store:
  kind: memory
routes:
${route('ledger', '/ledger/:res', up.url, `    fencing:
      resource: "{param.res}"
    idempotency:
      required: true
`)}`)
})
afterAll(async () => { await gw?.close(); await up?.close() })

describe('admin listener', () => {
  test('/healthz and /readyz answer without a token', async () => {
    expect((await send(`${gw.adminUrl}/healthz`)).status).toBe(200)
    const ready = await send(`${gw.adminUrl}/readyz`)
    expect(ready.status).toBe(200)
    expect(ready.json()).toMatchObject({ status: 'ready', store: 'memory' })
  })

  test('/metrics without the token: 401 problem with WWW-Authenticate: Bearer', async () => {
    const r = await send(`${gw.adminUrl}/metrics`)
    expect(r.status).toBe(401)
    expect(String(r.headers['www-authenticate'])).toMatch(/^Bearer/)
    expect(r.headers['content-type']).toMatch(/^application\/problem\+json/)
    expect((await send(`${gw.adminUrl}/metrics`, { headers: { authorization: 'Bearer wrong' } })).status).toBe(401)
  })

  test('/metrics with the token exposes every metric name of the contract', async () => {
    await post(`${gw.url}/ledger/a`, {}, { 'fencing-token': '1', 'idempotency-key': 'k' })
    await post(`${gw.url}/ledger/a`, {}, { 'fencing-token': '0', 'idempotency-key': 'k2' })
    const r = await send(`${gw.adminUrl}/metrics`, { headers: { authorization: 'Bearer s3cret' } })
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

  test('no label carries a key, a token or a resource', async () => {
    await post(`${gw.url}/ledger/secret-resource`, {}, { 'fencing-token': '424242', 'idempotency-key': 'secret-key-xyz' })
    const r = await send(`${gw.adminUrl}/metrics`, { headers: { authorization: 'Bearer s3cret' } })
    expect(r.text).not.toContain('secret-resource')
    expect(r.text).not.toContain('secret-key-xyz')
    expect(r.text).not.toContain('424242')
  })

  test('an unknown admin path is a 404 problem', async () => {
    const r = await send(`${gw.adminUrl}/nope`, { headers: { authorization: 'Bearer s3cret' } })
    expect(r.status).toBe(404)
    expect(r.headers['content-type']).toMatch(/^application\/problem\+json/)
  })
})
