/**
 * `npm run demo`: plays the seed's timeline against a RUNNING gateway (start one with
 * `npm start`) with two worker processes (./demo-worker.ts) holding leases from the gateway's
 * lease service through fencegate/client's `withLease`, and prints every answer they got next to
 * the client's decision (`decide`):
 *
 *   Worker A            POST lease on account:<acct> (ttl 5 s)                      → 201, token 1
 *   A → Payments        charge, Idempotency-Key job-9, Fencing-Token 1             → 201
 *   A → Queue           ack (lost); A is paused (SIGSTOP) and its lease runs out
 *   Worker B            POST lease                      → 409 lease-held; waits Retry-After → 201, token 2
 *   B → Payments        the same charge, key job-9, token 2                        → replayed
 *   B                   DELETE lease                                               → 204
 *   A resumes (SIGCONT) its renewal, PUT with token 1                              → 412: stop
 *                       its late charge with token 1 → 412 (or cancelled by the client once the
 *                       renewal's 412 lost the lease): stop either way, nothing reaches Payments
 *   ledger              exactly one charge; the resource's timeline, lease entries included
 *
 * Then the second story (./demo-settle.ts): a charge applied whose answer is lost (504), listed
 * as an unknown outcome, settled by the gateway's probe of the payments service's lookup, its
 * retry replayed — one charge.
 *
 * Environment: FENCEGATE_URL (default http://127.0.0.1:8080), FENCEGATE_ADMIN_URL (default
 * http://127.0.0.1:9464), FENCEGATE_ADMIN_TOKEN (bearer token for /metrics and the timeline,
 * when the admin listener has one), FENCEGATE_LEASE_TOKEN (`leases.token`, when set),
 * FENCEGATE_DEMO_LEASE_TTL (A's lease, default 5s). Each run uses a fresh account and job key,
 * so it can run again and again against a persistent store. FENCEGATE_DEMO_HANG_MS: how long the
 * payments service holds the second story's answer (default 15000). Exit 0 when both stories
 * held, 1 when one did not — the ledger holds other than one charge, or A's late write reached
 * the payments service — or the gateway could not be reached.
 */
import { randomBytes } from 'node:crypto'
import { Agent, request } from 'undici'
import { isMain } from '../examples/is-main.js'
import { distPath, killChildrenOnExit, startChild, type Child, type ChildEvent } from '../examples/children.js'
import { formatTimeline, type Timeline } from '../src/audit/timeline.js'
import { diff, narrator, parseJson, STATUS_TEXT, type DemoResult, type DemoStep } from './demo-steps.js'
import { runSettleDemo } from './demo-settle.js'

export { parseCounters, type DemoResult, type DemoStep, type MetricDelta } from './demo-steps.js'

export interface DemoOptions {
  /** the gateway, e.g. http://127.0.0.1:8080 */
  url?: string
  /** the gateway's admin listener, e.g. http://127.0.0.1:9464 */
  adminUrl?: string
  /** bearer token for admin /metrics and /audit/timeline */
  adminToken?: string
  /** `leases.token`, when the gateway's lease service has one */
  leaseToken?: string
  /** worker A's lease, a duration (default 5s): how long the story waits for it to run out */
  leaseTtl?: string
  /** where the readable report goes; default process.stdout, `null` for silence */
  out?: { write(text: string): unknown } | null
  /** the account to charge; default `acct-<random>` */
  account?: string
  /** the job's idempotency key; default `job-9-<random>` */
  jobKey?: string
}

/** The lease story's result: the steps, and the resource's timeline when the admin listener gave it. */
export interface LeaseDemoResult extends DemoResult {
  timeline?: Timeline
}

/** A child's JSON events one after another, each read once. */
function reader(c: Child, timeoutMs: number) {
  let cursor = 0
  return async (what: string): Promise<ChildEvent> => {
    let i = -1
    const hit = await c.waitFor(what, (_line, e) => (++i >= cursor && e ? { e, i } : undefined), timeoutMs)
    cursor = hit.i + 1
    return hit.e
  }
}

const LEASE = '/_fencegate/leases/'

/**
 * Runs the lease story against a running gateway whose lease service covers `account:*`.
 * @returns every step with its checks; `ok` says whether the timeline held
 * @throws Error when the gateway cannot be reached at all, or a worker process fails
 */
export async function runDemo(options: DemoOptions = {}): Promise<LeaseDemoResult> {
  const url = (options.url ?? 'http://127.0.0.1:8080').replace(/\/+$/, '')
  const adminUrl = (options.adminUrl ?? 'http://127.0.0.1:9464').replace(/\/+$/, '')
  const out = options.out === undefined ? process.stdout : options.out
  const run = randomBytes(4).toString('hex')
  const account = options.account ?? `acct-${run}`
  const jobKey = options.jobKey ?? `job-9-${run}`
  const ttl = options.leaseTtl ?? '5s'
  const resource = `account:${account}`
  const chargesPath = `/accounts/${encodeURIComponent(account)}/charges`
  const agent = new Agent({ keepAliveTimeout: 1_000 })
  const n = narrator({ url, adminUrl, adminToken: options.adminToken, out }, agent)
  const { say, steps, narrate, observe, exchange, finish, expect, expectMetric } = n
  const adminHeaders: Record<string, string> = options.adminToken ? { authorization: `Bearer ${options.adminToken}` } : {}
  const env = { DEMO_GATEWAY: url, DEMO_ACCOUNT: account, DEMO_KEY: jobKey, DEMO_TTL: ttl, ...(options.leaseToken && { DEMO_LEASE_TOKEN: options.leaseToken }) }
  const script = distPath('scripts/demo-worker.js')
  const workers: Child[] = []
  let timeline: Timeline | undefined

  /** One worker's answer as a step: the request, the answer, and the client's decision. */
  const answer = (who: string, e: ChildEvent, action: string): DemoStep => {
    const target = e.call === 'charge' || e.call === 'late charge' ? 'Payments' : 'Lease service'
    const step = observe(`${who} → ${target}`, action)
    const headers = [e.token && e.call !== 'acquire' ? `fencing-token: ${e.token}` : '', e.key ? `idempotency-key: ${e.key}` : ''].filter(Boolean).join(', ')
    say(`    ${e.method} ${e.path}${headers ? `  (${headers})` : ''}`)
    const d = e.decision
    const status = e.status === 0 ? `no answer (${e.error ?? 'aborted'})` : `${e.status} ${STATUS_TEXT[e.status] ?? ''}${e.replayed ? ', Idempotent-Replayed: true' : ''}`
    say(`    → ${status}   decide(): ${d.action} (${d.case})${d.retryAfterMs !== undefined ? `, Retry-After ${d.retryAfterMs / 1000} s` : ''}`)
    if (e.body) say(`    ${e.body.length > 400 ? `${e.body.slice(0, 400)}…` : e.body}`)
    return step
  }
  const holds = (step: DemoStep, e: ChildEvent, status: number, action: string, kase?: string) => {
    expect(step, e.status === status, `status ${status}${e.status === status ? '' : ` (got ${e.status})`}`)
    expect(step, e.decision.action === action && (kase === undefined || e.decision.case === kase), `decision ${action}${kase ? ` (${kase})` : ''}${e.decision.action === action ? '' : ` (got ${e.decision.action} (${e.decision.case}))`}`)
  }

  try {
    say(`fencegate demo: gateway ${url}, admin ${adminUrl}`)
    say(`account ${account} (lease on ${resource}), job key ${jobKey}`)
    say()
    const before = await n.readMetrics()
    // both processes start now, so B is ready to ask the moment A is paused
    const a = startChild('worker A', script, [], { ...env, DEMO_HOLDER: 'worker-a', DEMO_RETRY_ON: 'SIGUSR2' })
    const b = startChild('worker B', script, [], { ...env, DEMO_HOLDER: 'worker-b', DEMO_START_ON: 'SIGUSR2' })
    workers.push(a, b)
    const m = /^(\d+(?:\.\d+)?)(ms|s|m)$/.exec(ttl)
    const ttlMs = m ? Number(m[1]) * { ms: 1, s: 1000, m: 60_000 }[m[2] as 'ms' | 's' | 'm'] : 60_000
    const nextA = reader(a, ttlMs + 30_000)
    const nextB = reader(b, ttlMs + 30_000)
    await nextB('worker B ready')

    // A: the lease, the charge, renewals, until it waits for its retry
    let aToken = ''
    let aExpires = ''
    let firstBody = ''
    for (let e = await nextA('worker A\'s first answer'); e.event !== 'waiting'; e = await nextA('worker A\'s next answer')) {
      if (e.event !== 'answer') continue
      if (e.call === 'acquire') {
        const body = parseJson(e.body)
        aToken = body?.token ?? ''
        aExpires = body?.expiresAt ?? ''
        const s = answer('Worker A', e, `takes the lease on ${resource} (holder worker-a, ttl ${ttl}) with withLease()`)
        holds(s, e, 201, 'done')
        finish(s, `lease granted: token ${aToken}, until ${aExpires}; withLease renews it every ${body?.renewEveryMs ?? '?'} ms`)
      } else if (e.call === 'charge') {
        firstBody = e.body
        const charge = parseJson(e.body)
        const s = answer('Worker A', e, `charge ${(1250 / 100).toFixed(2)} eur with key ${jobKey} and its lease's token ${aToken} (lease.send)`)
        holds(s, e, 201, 'done', 'applied')
        expect(s, charge?.fencingToken === aToken && charge?.idempotencyKey === jobKey, 'the upstream saw the token and the key unchanged')
        finish(s, `charged once (${charge?.id ?? '?'}); the response is stored under the key`)
      } else if (e.call === 'renew') {
        aExpires = parseJson(e.body)?.expiresAt ?? aExpires
        const s = answer('Worker A', e, `renews its lease (token ${aToken})`)
        holds(s, e, 200, 'done')
        finish(s, `renewed until ${aExpires}`)
      }
    }
    narrate('Worker A → Queue', `ack — lost on the way; the queue never hears that job ${jobKey} is done`)
    a.freeze()
    narrate('Worker A', `paused (SIGSTOP, pid ${a.proc.pid}): it neither renews nor writes; its lease ends at ${aExpires}`)

    // B: waits out A's lease, takes over, sends the same charge, releases
    b.proc.kill('SIGUSR2')
    let bToken = ''
    let held = 0
    for (let e = await nextB('worker B\'s first answer'); e.event !== 'done'; e = await nextB('worker B\'s next answer')) {
      if (e.event !== 'answer') continue
      if (e.call === 'acquire' && e.status === 409) {
        held++
        const s = answer('Worker B', e, `the queue gives job ${jobKey} to worker B, which asks for the lease on ${resource}`)
        holds(s, e, 409, 'retry-after', 'lease-held')
        finish(s, `worker A's lease is still live: withLease waits Retry-After and asks again`)
      } else if (e.call === 'acquire') {
        const body = parseJson(e.body)
        bToken = body?.token ?? ''
        const s = answer('Worker B', e, `asks again: worker A's lease has run out while it was paused`)
        holds(s, e, 201, 'done')
        expect(s, /^\d+$/.test(bToken) && /^\d+$/.test(aToken) && BigInt(bToken) > BigInt(aToken), `token ${bToken} above worker A's ${aToken}`)
        finish(s, `worker B took over: token ${bToken}; from now on token ${aToken} is refused`)
      } else if (e.call === 'charge') {
        const s = answer('Worker B', e, `the same charge with key ${jobKey} and token ${bToken}`)
        holds(s, e, 201, 'done', 'replayed')
        expect(s, e.body === firstBody, 'the body is the first response, byte for byte')
        finish(s, 'the stored response was replayed; the payments service was not called, no second charge')
      } else if (e.call === 'release') {
        const s = answer('Worker B', e, `done with the job: releases its lease (token ${bToken})`)
        holds(s, e, 204, 'done')
        finish(s, 'released: the next holder need not wait for it to run out')
      } else if (e.call === 'renew') {
        const s = answer('Worker B', e, `renews its lease (token ${bToken})`)
        holds(s, e, 200, 'done')
        finish(s, 'renewed')
      }
    }
    await b.exited
    if (held === 0) say('    (worker B found the lease free at once: worker A\'s had already run out)\n')

    // A resumes: its renewal timer is long overdue and its code goes on with the retry
    a.proc.kill('SIGUSR2')
    a.thaw()
    narrate('Worker A', `resumes (SIGCONT): its renewal is overdue, and it retries the charge with token ${aToken}`)
    let renewed412 = false
    let lateStopped = false
    for (let e = await nextA('worker A\'s answers after the pause'); e.event !== 'done'; e = await nextA('worker A\'s next answer')) {
      if (e.event === 'lease' && e.lease === 'lost') {
        say(`    withLease: the lease is lost (${e.decision?.case ?? e.reason}); lease.signal aborts every request made through lease.fetch\n`)
      }
      if (e.event !== 'answer') continue
      if (e.call === 'renew') {
        renewed412 ||= e.status === 412
        const s = answer('Worker A', e, `renews its lease, token ${aToken}`)
        holds(s, e, 412, 'stop', 'stale-fencing-token')
        finish(s, `the lease is gone (token ${bToken} took over): stop, never retry with token ${aToken}`)
      } else if (e.call === 'late charge') {
        lateStopped = e.decision.action === 'stop'
        const s = answer('Worker A', e, `its late retry of the charge with key ${jobKey} and token ${aToken}`)
        expect(s, e.status === 412 || (e.status === 0 && e.decision.case === 'aborted'), 'refused 412 at the gateway, or cancelled by the client before it went out')
        expect(s, e.decision.action === 'stop', 'decision stop')
        finish(s, e.status === 412 ? 'the stale holder was stopped at the gateway, even though its key has a stored response' : 'the client cancelled it when the renewal\'s 412 lost the lease; had it gone out already, the fence refused it (the timeline below shows it then)')
      }
    }
    await a.exited
    const resumed = narrate('Worker A', 'stops: no ack, no further write; the job is done by worker B\'s replay')
    expect(resumed, renewed412, 'worker A\'s renewal was refused 412')
    expect(resumed, lateStopped, 'worker A\'s late charge was decided stop')
    resumed.ok = resumed.failures.length === 0

    const ledger = await exchange('Anyone → Payments', 'read the ledger of the account through the gateway', 'GET', chargesPath, {}, 200)
    const charges = parseJson(ledger.http!.body)?.charges
    const count = Array.isArray(charges) ? charges.length : -1
    expect(ledger, count === 1, `exactly one charge in the ledger (found ${count < 0 ? 'no ledger' : count}): worker A's late write did not reach the payments service`)
    if (count >= 1) expect(ledger, charges[0].fencingToken === aToken && charges[0].idempotencyKey === jobKey, `the charge is worker A's first, token ${aToken}`)
    finish(ledger, `exactly one charge: ${charges?.[0]?.id ?? '?'}, 12.50 eur, token ${aToken}, key ${jobKey}`)

    const read = await readTimeline(agent, adminUrl, adminHeaders, resource)
    if (typeof read === 'string') {
      say(`    (admin ${adminUrl}/audit/timeline ${read}: the resource's timeline is not shown)\n`)
    } else {
      timeline = read
      const s = narrate('Admin → /audit/timeline', `the resource's timeline (fencegate audit --resource ${resource})`)
      say(formatTimeline(timeline).split('\n').map((l) => `    ${l}`).join('\n'))
      checkTimeline(s, timeline, aToken, bToken, expect)
      const refused = timeline.entries.find((e) => e.kind === 'attempt' && e.token === aToken && e.outcome === 'stale')
      if (refused) say(`    worker A's late charge reached the gateway and was refused 412${refused.lateMs !== undefined ? `, ${Math.round(refused.lateMs)} ms after token ${bToken} took over` : ''}`)
      say()
      finish(s, `lease granted to worker-a (${aToken}), expired, taken over by worker-b (${bToken}) and released; worker A's renewal refused; no write with token ${aToken} forwarded after the takeover`)
    }

    const after = before && await n.readMetrics()
    if (before && after) {
      const s = narrate('Admin → /metrics', 'what the story counted')
      s.metrics = diff(before, after)
      for (const result of ['granted', 'expired', 'released', 'stale']) expectMetric(s, 'fencegate_leases_total', { result })
      if (held) expectMetric(s, 'fencegate_leases_total', { result: 'held' })
      expectMetric(s, 'fencegate_idempotency_total', { result: 'replayed' })
      finish(s, 'the grants, the expiry, the release and the stale renewal are counted')
    }

    const ok = steps.every((s) => s.ok)
    if (ok) say('The timeline held: one charge, worker B\'s duplicate replayed, worker A stopped by the 412 of its renewal and kept out of the ledger.')
    else say(`The timeline did NOT hold: ${steps.filter((s) => !s.ok).map((s) => `step ${s.n} (${s.failures.join('; ')})`).join(', ')}`)
    return { ok, account, jobKey, steps, metricsAvailable: n.metricsAvailable(), timeline }
  } finally {
    await Promise.all(workers.map((w) => w.stop().catch(() => {})))
    await agent.close()
  }
}

/** The resource's timeline from the admin listener, or why not (a status, an error code). */
async function readTimeline(agent: Agent, adminUrl: string, headers: Record<string, string>, resource: string): Promise<Timeline | string> {
  try {
    const r = await request(`${adminUrl}/audit/timeline?since=1h&resource=${encodeURIComponent(resource)}`, { dispatcher: agent, headers })
    const text = await r.body.text()
    if (r.statusCode !== 200) return `answered ${r.statusCode}${r.statusCode === 401 ? ' (set FENCEGATE_ADMIN_TOKEN to the admin token)' : ''}`
    return parseJson(text) ?? 'answered no JSON'
  } catch (e) {
    return `cannot be read (${(e as { code?: string }).code ?? (e as Error).message})`
  }
}

/** The lease entries of the story, and no write with A's token forwarded once B was granted. */
function checkTimeline(s: DemoStep, t: Timeline, aToken: string, bToken: string, expect: (s: DemoStep, c: boolean, what: string) => void): void {
  const lease = (result: string, token: string, by?: string) => t.entries.findIndex((e) => e.kind === 'lease' && e.result === result && e.token === token && (by === undefined || e.by === by))
  const takeover = lease('granted', bToken, 'worker-b')
  expect(s, lease('granted', aToken, 'worker-a') >= 0, `lease granted: token ${aToken} to worker-a`)
  expect(s, lease('expired', aToken) >= 0, `lease expired: token ${aToken}`)
  expect(s, takeover >= 0, `lease granted: token ${bToken} to worker-b`)
  expect(s, lease('released', bToken) >= 0, `lease released: token ${bToken}`)
  expect(s, t.entries.some((e) => e.kind === 'lease' && e.result === 'stale' && e.method === 'PUT' && e.token === aToken), `stale renewal: token ${aToken} refused 412`)
  const late = takeover < 0 ? [] : t.entries.slice(takeover).filter((e) => e.kind === 'attempt' && e.token === aToken && e.outcome !== 'stale')
  expect(s, takeover >= 0 && late.length === 0, `no write with token ${aToken} passed the fence after the takeover${late.length ? ` (found ${late.map((e) => e.outcome).join(', ')})` : ''}`)
}

async function main(): Promise<number> {
  const url = (process.env.FENCEGATE_URL || 'http://127.0.0.1:8080').replace(/\/+$/, '')
  const adminUrl = (process.env.FENCEGATE_ADMIN_URL || 'http://127.0.0.1:9464').replace(/\/+$/, '')
  const adminToken = process.env.FENCEGATE_ADMIN_TOKEN || undefined
  killChildrenOnExit()
  try {
    const lostAck = await runDemo({ url, adminUrl, adminToken, leaseToken: process.env.FENCEGATE_LEASE_TOKEN || undefined, leaseTtl: process.env.FENCEGATE_DEMO_LEASE_TTL || undefined })
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
