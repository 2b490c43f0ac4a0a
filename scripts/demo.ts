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
 * Environment: FENCEGATE_URL (default http://127.0.0.1:8080), FENCEGATE_ADMIN_URL (default
 * http://127.0.0.1:9464), FENCEGATE_ADMIN_TOKEN (bearer token for /metrics, when the admin
 * listener has one). Each run uses a fresh account and job key, so it can run again and again
 * against a persistent store. Exit 0 when the timeline held, 1 when it did not (or the gateway
 * could not be reached).
 */
import { randomBytes } from 'node:crypto'
import { Agent, request } from 'undici'
import { isMain } from '../examples/is-main.js'

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

/** One counter series that changed during a step. */
export interface MetricDelta {
  /** `name{labels}` as exposed */
  series: string
  name: string
  labels: Record<string, string>
  delta: number
}

export interface DemoStep {
  n: number
  /** who acts, e.g. "Worker A → Payments" */
  actor: string
  /** what happens, in words */
  action: string
  /** the HTTP exchange, for steps that make one */
  http?: {
    method: string
    path: string
    requestHeaders: Record<string, string>
    status: number
    expectedStatus: number
    headers: Record<string, string>
    body: string
  }
  /** fencegate_* counters that changed during the step (empty when /metrics is unreadable) */
  metrics: MetricDelta[]
  /** what was checked and held */
  checks: string[]
  /** what was checked and did not hold */
  failures: string[]
  ok: boolean
}

export interface DemoResult {
  /** true when every step held */
  ok: boolean
  account: string
  jobKey: string
  steps: DemoStep[]
  /** false when admin /metrics could not be read (no deltas then) */
  metricsAvailable: boolean
}

const FIRST_GENERATION = '33'
const SECOND_GENERATION = '34'
const CHARGE = { amount: 1250, currency: 'eur' }

/** Counter samples (`*_total`) of the fencegate_* families, by series. */
export function parseCounters(exposition: string): Map<string, { name: string; labels: Record<string, string>; value: number }> {
  const out = new Map<string, { name: string; labels: Record<string, string>; value: number }>()
  for (const line of exposition.split('\n')) {
    if (!line.startsWith('fencegate_')) continue
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})? (\S+)/.exec(line)
    if (!m || !m[1].endsWith('_total')) continue
    const labels = Object.fromEntries([...(m[2] ?? '').matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)].map((x) => [x[1], x[2]]))
    out.set(`${m[1]}${m[2] ?? ''}`, { name: m[1], labels, value: Number(m[3]) })
  }
  return out
}

function diff(before: ReturnType<typeof parseCounters>, after: ReturnType<typeof parseCounters>): MetricDelta[] {
  const out: MetricDelta[] = []
  for (const [series, a] of after) {
    const delta = a.value - (before.get(series)?.value ?? 0)
    if (delta !== 0) out.push({ series, name: a.name, labels: a.labels, delta })
  }
  return out.sort((x, y) => x.series.localeCompare(y.series))
}

const sumDelta = (deltas: MetricDelta[], name: string, labels: Record<string, string>): number =>
  deltas.filter((d) => d.name === name && Object.entries(labels).every(([k, v]) => d.labels[k] === v)).reduce((s, d) => s + d.delta, 0)

const flatHeaders = (h: Record<string, string | string[] | undefined>): Record<string, string> => {
  const out: Record<string, string> = {}
  for (const [k, v] of Object.entries(h)) if (v !== undefined) out[k] = Array.isArray(v) ? v.join(', ') : v
  return out
}

const parseJson = (text: string): any => { try { return JSON.parse(text) } catch { return undefined } }

const STATUS_TEXT: Record<number, string> = { 200: 'OK', 201: 'Created', 400: 'Bad Request', 401: 'Unauthorized', 404: 'Not Found', 409: 'Conflict', 412: 'Precondition Failed', 422: 'Unprocessable Content', 428: 'Precondition Required', 502: 'Bad Gateway', 503: 'Service Unavailable', 504: 'Gateway Timeout' }

/**
 * Runs the timeline against a running gateway.
 * @returns every step with its status, checks and metric deltas; `ok` says whether the timeline held
 * @throws Error when the gateway cannot be reached at all
 */
export async function runDemo(options: DemoOptions = {}): Promise<DemoResult> {
  const url = (options.url ?? 'http://127.0.0.1:8080').replace(/\/+$/, '')
  const adminUrl = (options.adminUrl ?? 'http://127.0.0.1:9464').replace(/\/+$/, '')
  const out = options.out === undefined ? process.stdout : options.out
  const say = (text = '') => { out?.write(`${text}\n`) }
  const run = randomBytes(4).toString('hex')
  const account = options.account ?? `acct-${run}`
  const jobKey = options.jobKey ?? `job-9-${run}`
  const chargesPath = `/accounts/${encodeURIComponent(account)}/charges`
  const agent = new Agent({ keepAliveTimeout: 1_000 })
  const steps: DemoStep[] = []
  let metricsAvailable = true

  const readMetrics = async (): Promise<ReturnType<typeof parseCounters> | undefined> => {
    if (!metricsAvailable) return undefined
    try {
      const r = await request(`${adminUrl}/metrics`, { dispatcher: agent, headers: options.adminToken ? { authorization: `Bearer ${options.adminToken}` } : {} })
      const text = await r.body.text()
      if (r.statusCode === 200) return parseCounters(text)
      const hint = r.statusCode === 401 ? ' (set FENCEGATE_ADMIN_TOKEN to the admin token)' : ''
      say(`    (admin ${adminUrl}/metrics answered ${r.statusCode}${hint}: metric deltas are not shown)`)
    } catch (e) {
      say(`    (admin ${adminUrl}/metrics cannot be read (${(e as { code?: string }).code ?? (e as Error).message}): metric deltas are not shown)`)
    }
    metricsAvailable = false
    return undefined
  }

  const narrate = (actor: string, action: string) => {
    const step: DemoStep = { n: steps.length + 1, actor, action, metrics: [], checks: [], failures: [], ok: true }
    steps.push(step)
    say(`[${step.n}] ${actor}: ${action}`)
    say()
    return step
  }

  const exchange = async (actor: string, action: string, method: 'GET' | 'POST', requestHeaders: Record<string, string>, expectedStatus: number, body?: string) => {
    const step: DemoStep = { n: steps.length + 1, actor, action, metrics: [], checks: [], failures: [], ok: true }
    steps.push(step)
    say(`[${step.n}] ${actor}: ${action}`)
    const shown = Object.entries(requestHeaders).filter(([k]) => k !== 'content-type').map(([k, v]) => `${k}: ${v}`).join(', ')
    say(`    ${method} ${chargesPath}${shown ? `  (${shown})` : ''}${body ? `  ${body}` : ''}`)
    const before = await readMetrics()
    let r
    try {
      r = await request(`${url}${chargesPath}`, { method, headers: requestHeaders, body, dispatcher: agent })
    } catch (e) {
      const code = (e as { code?: string }).code ?? (e as Error).message
      throw new Error(`cannot reach the gateway at ${url} (${code}); is it running? Start it with npm start, or set FENCEGATE_URL.`, { cause: e })
    }
    const text = await r.body.text()
    const after = before && await readMetrics()
    step.metrics = before && after ? diff(before, after) : []
    step.http = { method, path: chargesPath, requestHeaders, status: r.statusCode, expectedStatus, headers: flatHeaders(r.headers), body: text }
    const replayed = step.http.headers['idempotent-replayed']
    say(`    → ${r.statusCode} ${STATUS_TEXT[r.statusCode] ?? ''}${replayed ? `, Idempotent-Replayed: ${replayed}` : ''}   (expected ${expectedStatus})`)
    say(`    ${text.length > 400 ? `${text.slice(0, 400)}…` : text}`)
    if (r.statusCode === expectedStatus) step.checks.push(`status ${expectedStatus}`)
    else step.failures.push(`status ${r.statusCode}, expected ${expectedStatus}`)
    return step
  }

  const finish = (step: DemoStep, holds: string) => {
    if (step.metrics.length) {
      say('    metrics:')
      for (const d of step.metrics) say(`      ${d.series} ${d.delta > 0 ? '+' : ''}${d.delta}`)
    } else if (metricsAvailable) {
      say('    metrics: no fencegate_* counter changed')
    }
    step.ok = step.failures.length === 0
    say(step.ok ? `    ok: ${holds}` : `    NOT AS EXPECTED: ${step.failures.join('; ')}`)
    say()
  }

  const expect = (step: DemoStep, cond: boolean, what: string) => { (cond ? step.checks : step.failures).push(what) }
  const expectMetric = (step: DemoStep, name: string, labels: Record<string, string>) => {
    if (!metricsAvailable) return
    const shown = `${name}{${Object.entries(labels).map(([k, v]) => `${k}="${v}"`).join(',')}}`
    expect(step, sumDelta(step.metrics, name, labels) >= 1, `${shown} went up`)
  }

  try {
    say(`fencegate demo: gateway ${url}, admin ${adminUrl}`)
    say(`account ${account}, job key ${jobKey}`)
    say()
    const json = JSON.stringify(CHARGE)
    const chargeHeaders = (token: string) => ({ 'content-type': 'application/json', 'idempotency-key': jobKey, 'fencing-token': token })

    narrate('Queue → Worker A', `job 9, lease 30 s, claim generation ${FIRST_GENERATION}`)

    const first = await exchange('Worker A → Payments', `charge ${(CHARGE.amount / 100).toFixed(2)} ${CHARGE.currency} with key ${jobKey} and fencing token ${FIRST_GENERATION}`, 'POST', chargeHeaders(FIRST_GENERATION), 201, json)
    const firstCharge = parseJson(first.http!.body)
    expect(first, first.http!.headers['idempotent-replayed'] === undefined, 'forwarded, not replayed')
    expect(first, firstCharge?.fencingToken === FIRST_GENERATION && firstCharge?.idempotencyKey === jobKey, 'the upstream saw the token and the key unchanged')
    expectMetric(first, 'fencegate_idempotency_total', { result: 'stored' })
    finish(first, `charged once (${firstCharge?.id ?? '?'}); the response is stored under the key`)

    narrate('Worker A → Queue', 'ack — lost on the way; the queue never hears that job 9 is done')
    narrate('Queue', `the lease of 30 s expires; Queue → Worker B: job 9 again, claim generation ${SECOND_GENERATION}`)

    const second = await exchange('Worker B → Payments', `the same charge with key ${jobKey} and fencing token ${SECOND_GENERATION}`, 'POST', chargeHeaders(SECOND_GENERATION), first.http!.status, json)
    expect(second, second.http!.headers['idempotent-replayed'] === 'true', 'Idempotent-Replayed: true')
    expect(second, second.http!.body === first.http!.body, 'the body is the first response, byte for byte')
    expectMetric(second, 'fencegate_idempotency_total', { result: 'replayed' })
    finish(second, 'the stored response was replayed; the payments service was not called, no second charge')

    const stale = await exchange('Worker A (wakes up) → Payments', `retries the charge with key ${jobKey} and its old fencing token ${FIRST_GENERATION}`, 'POST', chargeHeaders(FIRST_GENERATION), 412, json)
    const problem = parseJson(stale.http!.body)
    expect(stale, (stale.http!.headers['content-type'] ?? '').startsWith('application/problem+json'), 'an application/problem+json answer')
    expect(stale, problem?.type === 'urn:fencegate:problem:stale-fencing-token', 'type urn:fencegate:problem:stale-fencing-token')
    expect(stale, problem?.highestToken === SECOND_GENERATION && problem?.token === FIRST_GENERATION, `token ${FIRST_GENERATION} refused, highestToken ${SECOND_GENERATION}`)
    expectMetric(stale, 'fencegate_fencing_rejections_total', { reason: 'stale' })
    finish(stale, `the stale holder was stopped at the gateway, even though its key has a stored response (highest token ${problem?.highestToken ?? '?'})`)

    const ledger = await exchange('Anyone → Payments', 'read the ledger of the account through the gateway', 'GET', {}, 200)
    const charges = parseJson(ledger.http!.body)?.charges
    const count = Array.isArray(charges) ? charges.length : -1
    expect(ledger, count === 1, `exactly one charge in the ledger (found ${count < 0 ? 'no ledger' : count})`)
    if (count >= 1) expect(ledger, charges[0].id === firstCharge?.id, `the charge is ${firstCharge?.id ?? '?'} from step ${first.n}`)
    finish(ledger, `exactly one charge: ${firstCharge?.id ?? '?'}, ${(CHARGE.amount / 100).toFixed(2)} ${CHARGE.currency}, token ${FIRST_GENERATION}, key ${jobKey}`)

    const ok = steps.every((s) => s.ok)
    if (ok) say('The timeline held: one charge, the duplicate replayed, the stale retry refused.')
    else say(`The timeline did NOT hold: ${steps.filter((s) => !s.ok).map((s) => `step ${s.n} (${s.failures.join('; ')})`).join(', ')}`)
    return { ok, account, jobKey, steps, metricsAvailable }
  } finally {
    await agent.close()
  }
}

async function main(): Promise<number> {
  try {
    const result = await runDemo({
      url: process.env.FENCEGATE_URL || undefined,
      adminUrl: process.env.FENCEGATE_ADMIN_URL || undefined,
      adminToken: process.env.FENCEGATE_ADMIN_TOKEN || undefined,
    })
    return result.ok ? 0 : 1
  } catch (e) {
    process.stderr.write(`demo: ${(e as Error).message}\n`)
    return 1
  }
}

if (isMain(import.meta.url)) process.exitCode = await main()
