/**
 * `npm run demo` (scripts/demo.ts) against a gateway and the sample payments service started in
 * this process: the lost-ack timeline holds — one charge, the duplicate replayed, the stale
 * retry refused — and the metric deltas the demo prints are the right ones.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { startPayments } from '../examples/payments/server.js'
import { paymentsRoutes } from '../examples/payments/routes.js'
import { runDemo, type DemoStep } from '../scripts/demo.js'
import { startTestGateway, type TestGateway } from './helpers/gateway.js'
import { send } from './helpers/http.js'

const ADMIN_TOKEN = 'demo-admin-token'

// The route shapes of config/fencegate.yaml, in front of a payments service on a free port.
const config = (payments: string) => `admin:
  listen: 127.0.0.1:0
  token: ${ADMIN_TOKEN}
store:
  kind: sqlite
  path: @DIR@/fencegate.db
${paymentsRoutes(payments)}`

const delta = (step: DemoStep, name: string, labels: Record<string, string>): number =>
  step.metrics.filter((d) => d.name === name && Object.entries(labels).every(([k, v]) => d.labels[k] === v)).reduce((s, d) => s + d.delta, 0)

describe('demo timeline (scripts/demo.ts)', () => {
  let payments: Awaited<ReturnType<typeof startPayments>>
  let gateway: TestGateway

  beforeAll(async () => {
    payments = await startPayments(0)
    gateway = await startTestGateway(config(payments.url))
  })
  afterAll(async () => {
    await gateway?.close()
    await payments?.close()
  })

  it('charges once, replays the duplicate, refuses the stale retry, and says so', async () => {
    const lines: string[] = []
    const result = await runDemo({ url: gateway.url, adminUrl: gateway.adminUrl, adminToken: ADMIN_TOKEN, out: { write: (s: string) => lines.push(s) } })

    expect(result.steps.map((s) => s.failures)).toEqual(result.steps.map(() => []))
    expect(result.ok).toBe(true)
    expect(result.metricsAvailable).toBe(true)
    expect(result.account).toMatch(/^acct-/)
    expect(result.jobKey).toMatch(/^job-9-/)

    const http = result.steps.filter((s) => s.http)
    expect(http.map((s) => [s.http!.method, s.http!.status])).toEqual([['POST', 201], ['POST', 201], ['POST', 412], ['GET', 200]])
    const [first, second, stale, ledger] = http

    expect(first.http!.headers['idempotent-replayed']).toBeUndefined()
    expect(second.http!.headers['idempotent-replayed']).toBe('true')
    expect(second.http!.body).toBe(first.http!.body)
    expect(JSON.parse(stale.http!.body)).toMatchObject({ type: 'urn:fencegate:problem:stale-fencing-token', token: '33', highestToken: '34' })

    const charges = JSON.parse(ledger.http!.body).charges
    expect(charges).toHaveLength(1)
    expect(charges[0]).toMatchObject({ id: JSON.parse(first.http!.body).id, account: result.account, fencingToken: '33', idempotencyKey: result.jobKey })

    expect(delta(first, 'fencegate_idempotency_total', { route: 'payments', result: 'stored' })).toBe(1)
    expect(delta(first, 'fencegate_requests_total', { route: 'payments', outcome: 'forwarded', code: '201' })).toBe(1)
    expect(delta(second, 'fencegate_idempotency_total', { route: 'payments', result: 'replayed' })).toBe(1)
    expect(delta(second, 'fencegate_requests_total', { route: 'payments', outcome: 'replayed', code: '201' })).toBe(1)
    expect(delta(stale, 'fencegate_fencing_rejections_total', { route: 'payments', reason: 'stale' })).toBe(1)
    expect(delta(stale, 'fencegate_requests_total', { route: 'payments', outcome: 'stale', code: '412' })).toBe(1)
    expect(delta(ledger, 'fencegate_requests_total', { route: 'payments-read', outcome: 'forwarded', code: '200' })).toBe(1)

    const text = lines.join('')
    expect(text).toContain('Idempotent-Replayed: true')
    expect(text).toContain('412 Precondition Failed')
    expect(text).toContain('fencegate_fencing_rejections_total{route="payments",reason="stale"} +1')
    expect(text).toContain('The timeline held')
  })

  it('can run again against the same store: a fresh account and key each time', async () => {
    const a = await runDemo({ url: gateway.url, adminUrl: gateway.adminUrl, adminToken: ADMIN_TOKEN, out: null })
    const b = await runDemo({ url: gateway.url, adminUrl: gateway.adminUrl, adminToken: ADMIN_TOKEN, out: null })
    expect([a.ok, b.ok]).toEqual([true, true])
    expect(a.account).not.toBe(b.account)
    expect(a.jobKey).not.toBe(b.jobKey)
  })

  it('fails when the timeline does not hold (the key was already used on that account)', async () => {
    const first = await runDemo({ url: gateway.url, adminUrl: gateway.adminUrl, adminToken: ADMIN_TOKEN, out: null })
    // same account and key again: the first charge is now a replay and token 33 is already stale
    const again = await runDemo({ url: gateway.url, adminUrl: gateway.adminUrl, adminToken: ADMIN_TOKEN, out: null, account: first.account, jobKey: first.jobKey })
    expect(again.ok).toBe(false)
    expect(again.steps.some((s) => s.failures.length > 0)).toBe(true)
  })

  it('still runs the timeline without metric deltas when /metrics refuses it (no admin token)', async () => {
    const lines: string[] = []
    const result = await runDemo({ url: gateway.url, adminUrl: gateway.adminUrl, out: { write: (s: string) => lines.push(s) } })
    expect(result.ok).toBe(true)
    expect(result.metricsAvailable).toBe(false)
    expect(result.steps.every((s) => s.metrics.length === 0)).toBe(true)
    expect(lines.join('')).toContain('answered 401')
    // the ledger the demo read is the payments service's own
    const ledger = await send(`${payments.url}/accounts/${result.account}/charges`)
    expect(ledger.json().charges).toHaveLength(1)
  })
})
