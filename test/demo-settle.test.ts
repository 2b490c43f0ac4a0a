/**
 * `npm run demo`'s second story (scripts/demo-settle.ts) against a gateway and the sample
 * payments service started in this process: a charge applied whose answer is lost (504) is
 * listed as unknown, settled by the gateway's probe of the sample's lookup, and its retry is
 * replayed — one charge. Without `settle` the same story does not hold, and says so.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { startPayments } from '../examples/payments/server.js'
import { paymentsRoutes } from '../examples/payments/routes.js'
import { runSettleDemo } from '../scripts/demo-settle.js'
import { startTestGateway, type TestGateway } from './helpers/gateway.js'
import { metric, metrics, send } from './helpers/http.js'

const ADMIN_TOKEN = 'demo-admin-token'

// config/fencegate.yaml's routes with a short upstream timeout, so the held answer is lost fast
const config = (payments: string, settle: boolean) => {
  let routes = paymentsRoutes(payments).replace('timeout: 10s', 'timeout: 1s')
  if (!settle) routes = routes.replace(/\n {6}settle:\n(?: {8}.*\n)+/, '\n')
  return `admin:
  listen: 127.0.0.1:0
  token: ${ADMIN_TOKEN}
store:
  kind: sqlite
  path: @DIR@/fencegate.db
${routes}`
}

describe('demo, the lost answer (scripts/demo-settle.ts)', () => {
  let payments: Awaited<ReturnType<typeof startPayments>>
  let settling: TestGateway
  let waiting: TestGateway

  beforeAll(async () => {
    payments = await startPayments(0)
    settling = await startTestGateway(config(payments.url, true))
    waiting = await startTestGateway(config(payments.url, false))
  })
  afterAll(async () => {
    await settling?.close()
    await waiting?.close()
    await payments?.close()
  })

  it('the applied charge whose answer was lost is settled by the probe and its retry replayed: one charge', async () => {
    const lines: string[] = []
    const result = await runSettleDemo({ url: settling.url, adminUrl: settling.adminUrl, adminToken: ADMIN_TOKEN, out: { write: (s: string) => lines.push(s) }, hangMs: 2500, settleWithinMs: 15_000 })

    expect(result.steps.map((s) => s.failures)).toEqual(result.steps.map(() => []))
    expect(result.ok).toBe(true)
    const http = result.steps.filter((s) => s.http)
    expect(http.map((s) => [s.http!.method, s.http!.status])).toEqual([['POST', 504], ['POST', 200], ['GET', 200]])
    const [, retry] = http
    expect(retry.http!.headers['idempotent-replayed']).toBe('true')
    expect(retry.http!.headers['fencegate-settled']).toBe('probe')
    expect(JSON.parse(retry.http!.body)).toMatchObject({ account: result.account, idempotencyKey: result.jobKey, fencingToken: '1' })

    // the payments service's own ledger, not only what the demo read through the gateway
    const ledger = await send(`${payments.url}/accounts/${result.account}/charges`)
    expect(ledger.json().charges).toHaveLength(1)
    const text = await metrics(settling.adminUrl, ADMIN_TOKEN)
    expect(metric(text, 'fencegate_unknown_outcomes_settled_total', { route: 'payments', by: 'probe', as: 'applied' })).toBe(1)
    expect(lines.join('')).toContain('settled by asking the resource')
  }, 30_000)

  it('without settle the key stays unknown, the retry is not replayed, and the story says it did not hold', async () => {
    const result = await runSettleDemo({ url: waiting.url, adminUrl: waiting.adminUrl, adminToken: ADMIN_TOKEN, out: null, hangMs: 2500, settleWithinMs: 3000 })
    expect(result.ok).toBe(false)
    const failures = result.steps.flatMap((s) => s.failures)
    expect(failures).toContain('the probe settled the key (no longer listed as unknown)')
    expect(result.steps.filter((s) => s.http).map((s) => s.http!.status)).toEqual([504, 409, 200])
  }, 30_000)
})
