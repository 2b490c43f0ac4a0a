// Issue 15 §8: `idempotency.releaseStatuses` per route. The default ([429, 502, 503, 504], the
// contract's) releases the claim on "not done" answers and stores everything else; a route may
// add the statuses its upstream answers without doing anything (Stripe keeps no validation
// failures), so a corrected retry with the same key is forwarded instead of replayed for 24 h.
import { expect, test } from 'vitest'
import { withGateway } from './helpers/gateway.js'
import { metric, metrics, post } from './helpers/http.js'

const { up, gw } = withGateway((up) => ({
  routes: [
    { name: 'strict', path: '/strict/*', upstream: up.url, idempotency: { required: true } },
    { name: 'lenient', path: '/lenient/*', upstream: up.url, idempotency: { required: true, releaseStatuses: [400, 422, 429, 502, 503, 504] } },
  ],
}))

test('the default stores a 422 and replays it; a route listing 422 releases the key and forwards the retry', async () => {
  const key = { 'idempotency-key': 'charge-1' }
  // default: the 422 is the answer for this key from now on
  expect((await post(`${gw.url}/strict/status/422`, {}, key)).status).toBe(422)
  const replay = await post(`${gw.url}/strict/status/422`, {}, key)
  expect(replay.status).toBe(422)
  expect(replay.headers['idempotent-replayed']).toBe('true')
  expect(up.count('/strict/')).toBe(1)

  // releaseStatuses with 422: nothing is kept, the retry goes upstream
  expect((await post(`${gw.url}/lenient/status/422`, {}, key)).status).toBe(422)
  const again = await post(`${gw.url}/lenient/status/422`, {}, key)
  expect(again.status).toBe(422)
  expect(again.headers['idempotent-replayed']).toBeUndefined()
  expect(up.count('/lenient/')).toBe(2)
  // a status not listed (409 here) is still stored on that route
  const k2 = { 'idempotency-key': 'charge-2' }
  expect((await post(`${gw.url}/lenient/status/409`, {}, k2)).status).toBe(409)
  expect((await post(`${gw.url}/lenient/status/409`, {}, k2)).headers['idempotent-replayed']).toBe('true')
  expect(up.count('/lenient/')).toBe(3)

  const m = await metrics(gw.adminUrl)
  expect(metric(m, 'fencegate_idempotency_total', { route: 'lenient', result: 'released' })).toBe(2)
  expect(metric(m, 'fencegate_idempotency_total', { route: 'strict', result: 'released' })).toBe(0)
  expect(metric(m, 'fencegate_idempotency_total', { route: 'strict', result: 'stored' })).toBe(1)
})
