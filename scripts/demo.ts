/**
 * `npm run demo`: plays the lost-ack timeline against a RUNNING gateway (start one with
 * `npm start`) and shows what the gateway decided at each step, with the fencegate_* counters
 * that changed on the admin /metrics.
 *
 *   Queue → Worker A    job 9, lease 30 s, claim generation 33
 *   A → Payments        charge, Idempotency-Key job-9, Fencing-Token 33      → 201
 *   A → Queue           ack (lost)
 *   lease expires; Queue → Worker B: job 9 again, generation 34
 *   B → Payments        charge, Idempotency-Key job-9, Fencing-Token 34      → same response, Idempotent-Replayed: true
 *   A wakes up, retries charge, Idempotency-Key job-9, Fencing-Token 33      → 412 stale
 *   ledger (GET /accounts/<acct>/charges through the gateway)                → exactly one charge
 *
 * Then the second story (./demo-settle.ts): a charge applied whose answer is lost (504), listed
 * as an unknown outcome, settled by the gateway's probe of the payments service's lookup, its
 * retry replayed — one charge.
 *
 * Environment: FENCEGATE_URL (default http://127.0.0.1:8080), FENCEGATE_ADMIN_URL (default
 * http://127.0.0.1:9464), FENCEGATE_ADMIN_TOKEN (bearer token for /metrics, when the admin
 * listener has one). Each run uses a fresh account and job key, so it can run again and again
 * against a persistent store. FENCEGATE_DEMO_HANG_MS: how long the payments service holds the
 * second story's answer (default 15000). Exit 0 when both stories held, 1 when one did not (or
 * the gateway could not be reached).
 */
import { randomBytes } from 'node:crypto'
import { Agent } from 'undici'
import { isMain } from '../examples/is-main.js'
import { narrator, parseJson, type DemoResult } from './demo-steps.js'
import { runSettleDemo } from './demo-settle.js'

export { parseCounters, type DemoResult, type DemoStep, type MetricDelta } from './demo-steps.js'

export interface DemoOptions {
  /** the gateway, e.g. http://127.0.0.1:8080 */
  url?: string
  /** the gateway's admin listener, e.g. http://127.0.0.1:9464 */
  adminUrl?: string
  /** bearer token for admin /metrics */
  adminToken?: string
  /** where the readable report goes; default process.stdout, `null` for silence */
  out?: { write(text: string): unknown } | null
  /** the account to charge; default `acct-<random>` */
  account?: string
  /** the job's idempotency key; default `job-9-<random>` */
  jobKey?: string
}

const FIRST_GENERATION = '33'
const SECOND_GENERATION = '34'
const CHARGE = { amount: 1250, currency: 'eur' }

/**
 * Runs the timeline against a running gateway.
 * @returns every step with its status, checks and metric deltas; `ok` says whether the timeline held
 * @throws Error when the gateway cannot be reached at all
 */
export async function runDemo(options: DemoOptions = {}): Promise<DemoResult> {
  const url = (options.url ?? 'http://127.0.0.1:8080').replace(/\/+$/, '')
  const adminUrl = (options.adminUrl ?? 'http://127.0.0.1:9464').replace(/\/+$/, '')
  const out = options.out === undefined ? process.stdout : options.out
  const run = randomBytes(4).toString('hex')
  const account = options.account ?? `acct-${run}`
  const jobKey = options.jobKey ?? `job-9-${run}`
  const chargesPath = `/accounts/${encodeURIComponent(account)}/charges`
  const agent = new Agent({ keepAliveTimeout: 1_000 })
  const { say, steps, narrate, exchange, finish, expect, expectMetric, metricsAvailable } = narrator({ url, adminUrl, adminToken: options.adminToken, out }, agent)

  try {
    say(`fencegate demo: gateway ${url}, admin ${adminUrl}`)
    say(`account ${account}, job key ${jobKey}`)
    say()
    const json = JSON.stringify(CHARGE)
    const chargeHeaders = (token: string) => ({ 'content-type': 'application/json', 'idempotency-key': jobKey, 'fencing-token': token })

    narrate('Queue → Worker A', `job 9, lease 30 s, claim generation ${FIRST_GENERATION}`)

    const first = await exchange('Worker A → Payments', `charge ${(CHARGE.amount / 100).toFixed(2)} ${CHARGE.currency} with key ${jobKey} and fencing token ${FIRST_GENERATION}`, 'POST', chargesPath, chargeHeaders(FIRST_GENERATION), 201, json)
    const firstCharge = parseJson(first.http!.body)
    expect(first, first.http!.headers['idempotent-replayed'] === undefined, 'forwarded, not replayed')
    expect(first, firstCharge?.fencingToken === FIRST_GENERATION && firstCharge?.idempotencyKey === jobKey, 'the upstream saw the token and the key unchanged')
    expectMetric(first, 'fencegate_idempotency_total', { result: 'stored' })
    finish(first, `charged once (${firstCharge?.id ?? '?'}); the response is stored under the key`)

    narrate('Worker A → Queue', 'ack — lost on the way; the queue never hears that job 9 is done')
    narrate('Queue', `the lease of 30 s expires; Queue → Worker B: job 9 again, claim generation ${SECOND_GENERATION}`)

    const second = await exchange('Worker B → Payments', `the same charge with key ${jobKey} and fencing token ${SECOND_GENERATION}`, 'POST', chargesPath, chargeHeaders(SECOND_GENERATION), first.http!.status, json)
    expect(second, second.http!.headers['idempotent-replayed'] === 'true', 'Idempotent-Replayed: true')
    expect(second, second.http!.body === first.http!.body, 'the body is the first response, byte for byte')
    expectMetric(second, 'fencegate_idempotency_total', { result: 'replayed' })
    finish(second, 'the stored response was replayed; the payments service was not called, no second charge')

    const stale = await exchange('Worker A (wakes up) → Payments', `retries the charge with key ${jobKey} and its old fencing token ${FIRST_GENERATION}`, 'POST', chargesPath, chargeHeaders(FIRST_GENERATION), 412, json)
    const problem = parseJson(stale.http!.body)
    expect(stale, (stale.http!.headers['content-type'] ?? '').startsWith('application/problem+json'), 'an application/problem+json answer')
    expect(stale, problem?.type === 'urn:fencegate:problem:stale-fencing-token', 'type urn:fencegate:problem:stale-fencing-token')
    expect(stale, problem?.highestToken === SECOND_GENERATION && problem?.token === FIRST_GENERATION, `token ${FIRST_GENERATION} refused, highestToken ${SECOND_GENERATION}`)
    expectMetric(stale, 'fencegate_fencing_rejections_total', { reason: 'stale' })
    finish(stale, `the stale holder was stopped at the gateway, even though its key has a stored response (highest token ${problem?.highestToken ?? '?'})`)

    const ledger = await exchange('Anyone → Payments', 'read the ledger of the account through the gateway', 'GET', chargesPath, {}, 200)
    const charges = parseJson(ledger.http!.body)?.charges
    const count = Array.isArray(charges) ? charges.length : -1
    expect(ledger, count === 1, `exactly one charge in the ledger (found ${count < 0 ? 'no ledger' : count})`)
    if (count >= 1) expect(ledger, charges[0].id === firstCharge?.id, `the charge is ${firstCharge?.id ?? '?'} from step ${first.n}`)
    finish(ledger, `exactly one charge: ${firstCharge?.id ?? '?'}, ${(CHARGE.amount / 100).toFixed(2)} ${CHARGE.currency}, token ${FIRST_GENERATION}, key ${jobKey}`)

    const ok = steps.every((s) => s.ok)
    if (ok) say('The timeline held: one charge, the duplicate replayed, the stale retry refused.')
    else say(`The timeline did NOT hold: ${steps.filter((s) => !s.ok).map((s) => `step ${s.n} (${s.failures.join('; ')})`).join(', ')}`)
    return { ok, account, jobKey, steps, metricsAvailable: metricsAvailable() }
  } finally {
    await agent.close()
  }
}

async function main(): Promise<number> {
  const url = (process.env.FENCEGATE_URL || 'http://127.0.0.1:8080').replace(/\/+$/, '')
  const adminUrl = (process.env.FENCEGATE_ADMIN_URL || 'http://127.0.0.1:9464').replace(/\/+$/, '')
  const adminToken = process.env.FENCEGATE_ADMIN_TOKEN || undefined
  try {
    const lostAck = await runDemo({ url, adminUrl, adminToken })
    process.stdout.write('\n')
    const hangMs = process.env.FENCEGATE_DEMO_HANG_MS ? Number(process.env.FENCEGATE_DEMO_HANG_MS) : undefined
    const lostAnswer = await runSettleDemo({ url, adminUrl, adminToken, out: process.stdout, hangMs })
    return lostAck.ok && lostAnswer.ok ? 0 : 1
  } catch (e) {
    process.stderr.write(`demo: ${(e as Error).message}\n`)
    return 1
  }
}

if (isMain(import.meta.url)) process.exitCode = await main()
