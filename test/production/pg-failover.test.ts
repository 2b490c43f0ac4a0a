// Issue 26 items 3 and 4 on a real PostgreSQL failover: a private primary with a streaming
// standby (./pg-cluster.ts), two gateways sharing it. Async: the standby misses the last commits
// (it is stopped while the primary takes them), the primary crashes, the standby is promoted on
// the gateways' port — both gateways answer 503 store-state-lost before anything is forwarded on
// what it lacked. Sync (store.replicas: 1): the promoted standby has every acknowledged commit —
// no loss, no alarm: a stale token is still 412, a completed key still replayed.
import { afterEach, beforeAll, describe, expect, test } from 'vitest'
import { startUpstream, type Upstream } from '../helpers/upstream.js'
import { freePort, startTestGateway, type RouteSpec, type TestGateway } from '../helpers/gateway.js'
import { expectProblem, metric, metrics, post, send, type Reply } from '../helpers/http.js'
import { until } from '../helpers/wait.js'
import { PgPair } from './pg-cluster.js'

let up: Upstream
const opened: { close(): Promise<void> }[] = []
beforeAll(async () => {
  up = await startUpstream()
  return () => up.close()
})
afterEach(async () => {
  for (const o of opened.splice(0).reverse()) await o.close()
})

const ledger = (): RouteSpec => ({
  name: 'ledger', path: '/ledger/:res', upstream: up.url,
  fencing: { resource: '{param.res}' },
  idempotency: { lease: '5s' },
})

async function gateways(url: string, replicas: number): Promise<[TestGateway, TestGateway]> {
  const spec = { store: { kind: 'postgres' as const, url, replicas, timeout: '2s' }, routes: [ledger()] }
  const a = await startTestGateway(spec)
  opened.push(a)
  const b = await startTestGateway(spec)
  opened.push(b)
  return [a, b]
}

const write = (gw: TestGateway, res: string, token: number, key: string) =>
  post(`${gw.url}/ledger/${res}`, { token, key }, { 'fencing-token': String(token), 'idempotency-key': key })

/**
 * The first answer that is not 503 store-unavailable: right after the failover a gateway's pooled
 * connections to the crashed primary fail (503, nothing forwarded) until the pool reconnects.
 */
async function reconnected(attempt: () => Promise<Reply>): Promise<Reply> {
  let last: Reply | undefined
  await until(async () => {
    last = await attempt()
    return last.status !== 503 || !/store-unavailable/.test(String((last.json() as { type?: string }).type))
  }, { timeoutMs: 20_000, intervalMs: 200, message: 'the gateway to reach the promoted standby' })
  return last!
}

/** Waits until the gateway's store answers again after the failover (its pool reconnects on its own). */
const answers = (gw: TestGateway, ok: (status: number) => boolean, message: string) =>
  until(async () => ok((await send(`${gw.adminUrl}/readyz`)).status), { timeoutMs: 20_000, intervalMs: 200, message })

describe('PostgreSQL failover', () => {
  test('to an asynchronous standby that lacked the last commits: every gateway answers 503 store-state-lost before anything is forwarded on what it lacked', async () => {
    const pair = new PgPair(await freePort(), await freePort())
    opened.push(pair)
    await pair.start({ sync: false })
    const [a, b] = await gateways(pair.url, 0)
    const res = `acct-${Date.now()}`
    // replicated: both gateways wrote while the standby streamed
    expect((await write(a, res, 100, 'k-100')).status).toBe(201)
    expect((await write(b, `${res}-b`, 1, 'k-b1')).status).toBe(201)
    // the standby falls behind: these commits never reach it
    await pair.stop(pair.standby)
    expect((await write(a, res, 200, 'k-200')).status).toBe(201)
    const applied = up.count(`/ledger/${res}`)
    await pair.failover()

    // b never saw token 200 nor k-200: the new timeline refuses its writes; a is behind what it saw
    expectProblem(await reconnected(() => write(b, res, 150, 'k-150')), { status: 503, type: 'store-state-lost' })
    expectProblem(await reconnected(() => write(a, res, 200, 'k-200')), { status: 503, type: 'store-state-lost' })
    expectProblem(await write(b, res, 200, 'k-200'), { status: 503, type: 'store-state-lost' })
    // nothing stale, nothing doubled
    expect(up.count(`/ledger/${res}`)).toBe(applied)
    for (const gw of [a, b]) {
      expect((await send(`${gw.adminUrl}/readyz`)).status).toBe(503)
      expect(metric(await metrics(gw.adminUrl), 'fencegate_store_state_lost', { store: 'postgres' })).toBe(1)
    }
    expect(b.logs.join('')).toMatch(/store went back in time.*timeline 00000002 after 00000001/)
    // a gateway started now reads the loss note on the promoted standby and refuses too
    const [c] = await gateways(pair.url, 0)
    const ready = await send(`${c.adminUrl}/readyz`)
    expect(ready.status).toBe(503)
    expect(ready.json().note).toMatchObject({ signal: expect.stringMatching(/^(timeline|sequence)$/), by: expect.stringMatching(/:\d+$/) })
    expectProblem(await write(c, res, 300, 'k-300'), { status: 503, type: 'store-state-lost' })
    expect(up.count(`/ledger/${res}`)).toBe(applied)
  })

  test('to a synchronous standby (store.replicas: 1): nothing lost, no alarm — a stale token is still 412, a completed key replayed', async () => {
    const pair = new PgPair(await freePort(), await freePort())
    opened.push(pair)
    await pair.start({ sync: true })
    const [a, b] = await gateways(pair.url, 1)
    const res = `acct-${Date.now()}`
    expect((await write(a, res, 100, 'k-100')).status).toBe(201)
    expect((await write(a, res, 200, 'k-200')).status).toBe(201)
    const applied = up.count(`/ledger/${res}`)
    await pair.failover()
    // the promoted primary's commits wait for a synchronous standby of their own
    await pair.newStandby(await freePort())

    await answers(b, (s) => s === 200, 'b to be ready on the promoted standby')
    const stale = await reconnected(() => write(b, res, 150, 'k-150'))
    expect(stale.status).toBe(412)
    const again = await write(b, res, 200, 'k-200')
    expect(again.status).toBe(201)
    expect(again.headers['idempotent-replayed']).toBe('true')
    expect(up.count(`/ledger/${res}`)).toBe(applied)
    expect((await reconnected(() => write(a, res, 300, 'k-300'))).status).toBe(201)
    expect(up.count(`/ledger/${res}`)).toBe(applied + 1)
    for (const gw of [a, b]) expect(metric(await metrics(gw.adminUrl), 'fencegate_store_state_lost', { store: 'postgres' })).toBe(0)
  })
})
