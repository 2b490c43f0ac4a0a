/**
 * `npm run demo`, the second story: the seed's hardest case, a charge applied whose answer is
 * lost, settled by asking the payments service instead of an operator (contract §4a).
 *
 *   Worker C → Payments   charge, key job-12, token 1; the service applies it and holds its answer
 *                         → 504 after the route's upstream.timeout: the outcome is unknown
 *   admin GET /unknown    the key is listed, with its next probe
 *   the gateway probes    GET /accounts/<acct>/charges?idempotencyKey=job-12 → 200: applied
 *   Worker C retries      the same charge, key job-12, token 2 → the lookup's 200 replayed,
 *                         Idempotent-Replayed: true, Fencegate-Settled: probe
 *   ledger                exactly one charge
 *
 * It needs the sample payments service (`npm start` runs it): its `Sample-Hang-After-Apply`
 * header holds the answer of an applied charge (FENCEGATE_DEMO_HANG_MS, default 15000: longer
 * than the route's upstream.timeout of 10 s), and its lookup answers the probe.
 */
import { hash, randomBytes } from 'node:crypto'
import { Agent, request } from 'undici'
import { narrator, parseJson, type DemoResult, type StoryOptions } from './demo-steps.js'

export interface SettleDemoOptions extends StoryOptions {
  /** how long the payments service holds the applied charge's answer, ms */
  hangMs?: number
  /** how long to wait for the probe to settle the key, ms */
  settleWithinMs?: number
  account?: string
  jobKey?: string
}

const CHARGE = { amount: 4200, currency: 'eur' }

/**
 * Runs the story against a running gateway in front of the sample payments service.
 * @returns every step with its checks; `ok` says whether the story held
 * @throws Error when the gateway cannot be reached at all
 */
export async function runSettleDemo(o: SettleDemoOptions): Promise<DemoResult> {
  const run = randomBytes(4).toString('hex')
  const account = o.account ?? `acct-${run}`
  const jobKey = o.jobKey ?? `job-12-${run}`
  const chargesPath = `/accounts/${encodeURIComponent(account)}/charges`
  const agent = new Agent({ keepAliveTimeout: 1_000 })
  const n = narrator(o, agent)
  const { say, narrate, exchange, finish, expect, expectMetric } = n
  const adminHeaders = o.adminToken ? { authorization: `Bearer ${o.adminToken}` } : {}
  // the payments route has no idempotency.scope: the key hash is SHA-256 of "" and the key
  const keyHash = hash('sha256', `\n${jobKey}`, 'hex')
  const unknownEntry = async (): Promise<Record<string, unknown> | undefined> => {
    const r = await request(`${o.adminUrl}/unknown?route=payments`, { dispatcher: agent, headers: adminHeaders })
    const body = parseJson(await r.body.text())
    const list: Record<string, unknown>[] = body?.unknown ?? []
    return list.find((u) => u.keyHash === keyHash)
  }
  try {
    say(`the lost answer: account ${account}, job key ${jobKey}`)
    say()
    const json = JSON.stringify(CHARGE)
    const headers = (token: string, hang?: number) => ({ 'content-type': 'application/json', 'idempotency-key': jobKey, 'fencing-token': token, ...(hang ? { 'sample-hang-after-apply': String(hang) } : {}) })

    const lost = await exchange('Worker C → Payments', `charge ${(CHARGE.amount / 100).toFixed(2)} ${CHARGE.currency} with key ${jobKey}, token 1; the service applies it and holds its answer`, 'POST', chargesPath, headers('1', o.hangMs ?? 15_000), 504, json)
    expectMetric(lost, 'fencegate_unknown_outcomes_total', {})
    finish(lost, 'the gateway gave up on the answer: the charge may or may not have happened, so the key is an unknown outcome')

    const listed = narrate('Operator', `GET ${o.adminUrl}/unknown: the key is listed, its probe scheduled`)
    const entry = await unknownEntry()
    expect(listed, entry !== undefined, `key hash ${keyHash.slice(0, 12)}… listed as unknown`)
    if (entry) say(`    ${JSON.stringify(entry)}`)
    finish(listed, 'listed; the gateway asks the resource before anyone is paged to')

    const settled = narrate('fencegate → Payments', `GET ${chargesPath}?idempotencyKey=${jobKey} once the route's settle.after has passed`)
    const deadline = Date.now() + (o.settleWithinMs ?? 20_000)
    let left = entry !== undefined
    while (left && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 250))
      left = (await unknownEntry()) !== undefined
    }
    expect(settled, !left, 'the probe settled the key (no longer listed as unknown)')
    finish(settled, 'the lookup answered 200 with the charge: the first attempt was applied, and its answer is stored')

    const retry = await exchange('Worker C (redelivered) → Payments', `the same charge with key ${jobKey}, token 2`, 'POST', chargesPath, headers('2'), 200, json)
    expect(retry, retry.http!.headers['idempotent-replayed'] === 'true', 'Idempotent-Replayed: true')
    expect(retry, retry.http!.headers['fencegate-settled'] === 'probe', 'Fencegate-Settled: probe')
    expectMetric(retry, 'fencegate_idempotency_total', { result: 'replayed' })
    finish(retry, 'the lookup\'s answer (200, the charge) replayed: the contract stores the probe\'s status, headers and body; no second charge')

    const ledger = await exchange('Anyone → Payments', 'read the ledger of the account through the gateway', 'GET', chargesPath, {}, 200)
    const charges = parseJson(ledger.http!.body)?.charges
    const count = Array.isArray(charges) ? charges.length : -1
    expect(ledger, count === 1, `exactly one charge in the ledger (found ${count < 0 ? 'no ledger' : count})`)
    finish(ledger, 'exactly one charge, settled without an operator')

    const ok = n.steps.every((s) => s.ok)
    say(ok ? 'The lost answer was settled by asking the resource: one charge, the retry replayed.' : `The lost answer was NOT settled as expected: ${n.steps.filter((s) => !s.ok).map((s) => `step ${s.n} (${s.failures.join('; ')})`).join(', ')}`)
    return { ok, account, jobKey, steps: n.steps, metricsAvailable: n.metricsAvailable() }
  } finally {
    await agent.close()
  }
}
