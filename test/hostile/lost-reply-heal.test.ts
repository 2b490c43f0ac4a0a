// The first retry after a heal (contract §4, issue 38 item 4): a claim whose reply was lost while
// the store's replies were cut off for longer than the claim's lease (2 s; cut off 4.5 s, then
// every connection reset) was never sent upstream. The gateway keeps giving it back; its first
// retry after the heal must not find it past its lease and declare an unknown outcome (409
// outcome-unknown, reason crash) — it is forwarded (or, while the store reconnects, 503), and
// fencegate_unknown_outcomes_total stays where it was. The case is repeated: which of the retry's
// claim and the give-back reaches the store first after the heal is a race.
import { randomUUID } from 'node:crypto'
import { afterAll, beforeAll, describe, expect, test } from 'vitest'
import { startUpstream, type Upstream } from '../helpers/upstream.js'
import { startTestGateway, type StoreInput, type TestGateway } from '../helpers/gateway.js'
import { metric, metrics, post } from '../helpers/http.js'
import { sleep, until } from '../helpers/wait.js'
import { dropPostgresSchema, dropRedisPrefix, PG_URL, REDIS_URL } from '../helpers/stores.js'
import { startTcpProxy, type TcpProxy } from '../helpers/tcp-proxy.js'

const run = randomUUID().replaceAll('-', '').slice(0, 10)
const ROUNDS = 5

const stores = [
  {
    kind: 'postgres', target: new URL(PG_URL), drop: () => dropPostgresSchema(`fgheal_${run}`),
    store: (port: number): StoreInput => { const u = new URL(PG_URL); u.host = `127.0.0.1:${port}`; return { kind: 'postgres', url: u.toString(), schema: `fgheal_${run}`, pool: 4, timeout: '500ms' } },
  },
  {
    kind: 'redis', target: new URL(REDIS_URL), drop: () => dropRedisPrefix(`fgheal-${run}`),
    store: (port: number): StoreInput => ({ kind: 'redis', url: `redis://127.0.0.1:${port}`, keyPrefix: `fgheal-${run}`, timeout: '500ms' }),
  },
] as const

let up: Upstream
beforeAll(async () => { up = await startUpstream() })
afterAll(async () => { await up?.close() })

describe.each(stores)('the first retry after the $kind store\'s replies come back', (shared) => {
  let proxy: TcpProxy
  let gw: TestGateway
  beforeAll(async () => {
    proxy = await startTcpProxy({ host: shared.target.hostname, port: Number(shared.target.port) })
    gw = await startTestGateway({ store: shared.store(proxy.port), routes: [{ name: 'pay', path: '/pay/*', upstream: { url: up.url, timeout: '1s' }, idempotency: { required: true, lease: '2s' } }] })
  })
  afterAll(async () => {
    await gw?.close()
    await proxy?.close()
    await shared.drop()
  })

  test(`a claim never sent, its reply lost past its lease: the retry after the heal is forwarded, never 409 outcome-unknown (${ROUNDS} rounds)`, async () => {
    const unknowns = async () => metric(await metrics(gw.adminUrl), 'fencegate_unknown_outcomes_total', { route: 'pay' })
    const before = await unknowns()
    const firsts: number[] = []
    for (let round = 1; round <= ROUNDS; round++) {
      const key = `${shared.kind}-${run}-${round}`
      const pay = () => post(`${gw.url}/pay/${key}`, { key }, { 'idempotency-key': key })
      await gw.audit.flush()
      proxy.mode = 'drop-replies'
      expect((await pay()).status).toBe(503)
      await sleep(4_500)
      proxy.mode = 'pass'
      proxy.reset()
      const first = await pay()
      firsts.push(first.status)
      expect([201, 503], `round ${round}: ${first.text}`).toContain(first.status)
      if (first.status === 503) await until(async () => (await pay()).status === 201, { timeoutMs: 15_000, intervalMs: 200, message: `round ${round}: the key forwarded once the store answers` })
      expect(up.count(`/pay/${key}`)).toBe(1)
    }
    expect(await unknowns()).toBe(before)
    expect(firsts).toHaveLength(ROUNDS)
  }, 120_000)
})
