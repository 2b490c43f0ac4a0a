/**
 * `npm run demo` (scripts/demo.ts) against a gateway and the sample payments service started in
 * this process: the lease story holds with two real worker processes on fencegate/client — A's
 * lease granted and its charge applied, A frozen with SIGSTOP until its lease runs out, B waiting
 * out lease-held and taking over with the next token, B's charge replayed, A's renewal refused
 * 412 and its late charge stopped — one charge in the ledger, the lease entries on the
 * resource's timeline, and the demo prints each answer with the client's decision.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { startPayments } from '../examples/payments/server.js'
import { paymentsRoutes } from '../examples/payments/routes.js'
import { runDemo, type DemoStep } from '../scripts/demo.js'
import { startTestGateway, type TestGateway } from './helpers/gateway.js'
import { send } from './helpers/http.js'

const ADMIN_TOKEN = 'demo-admin-token'
// short enough to keep the story quick, long enough for B to find A's lease live
const TTL = '3s'

// The shapes of config/fencegate.yaml (the lease service on account:*, its routes), in front of
// a payments service on a free port.
const config = (payments: string) => `admin:
  listen: 127.0.0.1:0
  token: ${ADMIN_TOKEN}
store:
  kind: sqlite
  path: @DIR@/fencegate.db
leases:
  resources: ["account:*"]
  defaultTtl: advice
  maxTtl: 5m
${paymentsRoutes(payments)}`

const delta = (step: DemoStep, name: string, labels: Record<string, string>): number =>
  step.metrics.filter((d) => d.name === name && Object.entries(labels).every(([k, v]) => d.labels[k] === v)).reduce((s, d) => s + d.delta, 0)

// each run waits out a lease and starts two worker processes
describe('demo lease story (scripts/demo.ts)', { timeout: 60_000 }, () => {
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

  it('A charges, is frozen past its lease, B takes over and is replayed, A is stopped; one charge, and it says so', async () => {
    const lines: string[] = []
    const result = await runDemo({ url: gateway.url, adminUrl: gateway.adminUrl, adminToken: ADMIN_TOKEN, leaseTtl: TTL, out: { write: (s: string) => lines.push(s) } })

    expect(result.steps.map((s) => s.failures)).toEqual(result.steps.map(() => []))
    expect(result.ok).toBe(true)
    expect(result.metricsAvailable).toBe(true)
    expect(result.account).toMatch(/^acct-/)
    expect(result.jobKey).toMatch(/^job-9-/)
    const text = lines.join('')

    // each answer next to the client's decision, in the story's order
    const order = [
      /Worker A → Lease service: takes the lease[^\n]*\n[^\n]*\n {4}→ 201 Created {3}decide\(\): done \(applied\)\n {4}\{"resource":"account:acct-[0-9a-f]+","token":"1","holder":"worker-a"/,
      /Worker A → Payments: charge[^\n]*\n {4}POST \/accounts\/acct-[0-9a-f]+\/charges {2}\(fencing-token: 1, idempotency-key: job-9-[0-9a-f]+\)\n {4}→ 201 Created {3}decide\(\): done \(applied\)/,
      /Worker A: paused \(SIGSTOP, pid \d+\)/,
      /Worker B → Lease service:[^\n]*\n[^\n]*\n {4}→ 409 Conflict {3}decide\(\): retry-after \(lease-held\), Retry-After \d+ s/,
      /Worker B → Lease service: asks again[^\n]*\n[^\n]*\n {4}→ 201 Created {3}decide\(\): done \(applied\)\n {4}\{"resource":"account:acct-[0-9a-f]+","token":"2","holder":"worker-b"/,
      /Worker B → Payments: the same charge[^\n]*\n {4}POST [^\n]*\(fencing-token: 2, idempotency-key: job-9-[0-9a-f]+\)\n {4}→ 201 Created, Idempotent-Replayed: true {3}decide\(\): done \(replayed\)/,
      /Worker B → Lease service: done with the job: releases[^\n]*\n {4}DELETE [^\n]*\(fencing-token: 2\)\n {4}→ 204 No Content {3}decide\(\): done/,
      /Worker A: resumes \(SIGCONT\)/,
      /Worker A → Lease service: renews its lease, token 1\n {4}PUT [^\n]*\(fencing-token: 1\)\n {4}→ 412 Precondition Failed {3}decide\(\): stop \(stale-fencing-token\)/,
      /Worker A → Payments: its late retry[^\n]*\n {4}POST [^\n]*\(fencing-token: 1, [^\n]*\n {4}→ (412 Precondition Failed {3}decide\(\): stop \(stale-fencing-token\)|no answer \(LeaseLostError\) {3}decide\(\): stop \(aborted\))/,
      /"charges":\[\{"id":"ch_\d+","account":"acct-[0-9a-f]+","amount":1250,"currency":"eur","fencingToken":"1"[^\]]*\}\]/,
      /lease {2}POST {2}201 {2}granted {2}token 1 {2}holder worker-a/,
      /lease {2}POST {2}409 {2}held {2}token 1 {2}holder worker-a/,
      /lease {2}POST {2}201 {2}expired {2}token 1 {2}holder worker-a/,
      /lease {2}POST {2}201 {2}granted {2}token 2 {2}holder worker-b/,
      /payments {2}POST {2}201 {2}replayed {2}replayed {2}token 2/,
      /lease {2}DELETE {2}204 {2}released {2}token 2 {2}holder worker-b/,
      /lease {2}PUT {2}412 {2}stale {2}token 1 {2}token 2 holds it/,
      /fencegate_leases_total\{result="expired"\} \+1/,
      /The timeline held/,
    ]
    let at = 0
    for (const re of order) {
      const m = re.exec(text.slice(at))
      expect(m, `${re} after offset ${at} in:\n${text}`).not.toBeNull()
      at += m!.index + m![0].length
    }
    // whatever reached the gateway with token 1 after the takeover was refused, never forwarded
    const timelineLines = text.split('\n').filter((l) => / {2}payments {2}POST {2}/.test(l))
    expect(timelineLines.filter((l) => /token 1 /.test(l) && / forwarded /.test(l))).toHaveLength(1)

    expect(result.timeline?.entries.filter((e) => e.kind === 'lease').map((e) => [e.result, e.token])).toEqual(expect.arrayContaining([['granted', '1'], ['held', '1'], ['expired', '1'], ['granted', '2'], ['released', '2'], ['stale', '1']]))

    const counted = result.steps.at(-1)!
    expect(delta(counted, 'fencegate_leases_total', { result: 'granted' })).toBe(2)
    expect(delta(counted, 'fencegate_leases_total', { result: 'expired' })).toBe(1)
    expect(delta(counted, 'fencegate_leases_total', { result: 'released' })).toBe(1)
    expect(delta(counted, 'fencegate_leases_total', { result: 'stale' })).toBe(1)
    expect(delta(counted, 'fencegate_requests_total', { route: 'payments', outcome: 'forwarded', code: '201' })).toBe(1)
    expect(delta(counted, 'fencegate_requests_total', { route: 'payments', outcome: 'replayed', code: '201' })).toBe(1)

    // the ledger the demo read is the payments service's own: A's late write never reached it
    const ledger = await send(`${payments.url}/accounts/${result.account}/charges`)
    expect(ledger.json().charges).toEqual([expect.objectContaining({ account: result.account, fencingToken: '1', idempotencyKey: result.jobKey })])
  })

  it('can run again against the same store: a fresh account and key each time', async () => {
    const a = await runDemo({ url: gateway.url, adminUrl: gateway.adminUrl, adminToken: ADMIN_TOKEN, leaseTtl: TTL, out: null })
    const b = await runDemo({ url: gateway.url, adminUrl: gateway.adminUrl, adminToken: ADMIN_TOKEN, leaseTtl: TTL, out: null })
    expect([a.ok, b.ok]).toEqual([true, true])
    expect(a.account).not.toBe(b.account)
    expect(a.jobKey).not.toBe(b.jobKey)
  })

  it('fails when the timeline does not hold (the key was already used on that account)', async () => {
    const first = await runDemo({ url: gateway.url, adminUrl: gateway.adminUrl, adminToken: ADMIN_TOKEN, leaseTtl: TTL, out: null })
    // same account and key again: A's charge under its new lease is now a replay, not applied
    const again = await runDemo({ url: gateway.url, adminUrl: gateway.adminUrl, adminToken: ADMIN_TOKEN, leaseTtl: TTL, out: null, account: first.account, jobKey: first.jobKey })
    expect(again.ok).toBe(false)
    expect(again.steps.some((s) => s.failures.length > 0)).toBe(true)
  })

  it('still runs the timeline without metric deltas when /metrics refuses it (no admin token)', async () => {
    const lines: string[] = []
    const result = await runDemo({ url: gateway.url, adminUrl: gateway.adminUrl, leaseTtl: TTL, out: { write: (s: string) => lines.push(s) } })
    expect(result.ok).toBe(true)
    expect(result.metricsAvailable).toBe(false)
    expect(result.steps.every((s) => s.metrics.length === 0)).toBe(true)
    expect(lines.join('')).toContain('answered 401')
    // the ledger the demo read is the payments service's own
    const ledger = await send(`${payments.url}/accounts/${result.account}/charges`)
    expect(ledger.json().charges).toHaveLength(1)
  })
})
