/**
 * The steps of `npm run demo`'s stories (./demo.ts, ./demo-settle.ts): each HTTP exchange with
 * the gateway printed with its answer, the fencegate_* counters that changed during it (read off
 * the admin /metrics before and after), and what was checked.
 */
import { Agent, request } from 'undici'

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

/** The counter series that changed between two readings of /metrics. */
export function diff(before: ReturnType<typeof parseCounters>, after: ReturnType<typeof parseCounters>): MetricDelta[] {
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

export const STATUS_TEXT: Record<number, string> = { 200: 'OK', 201: 'Created', 204: 'No Content', 400: 'Bad Request', 401: 'Unauthorized', 404: 'Not Found', 409: 'Conflict', 412: 'Precondition Failed', 422: 'Unprocessable Content', 428: 'Precondition Required', 502: 'Bad Gateway', 503: 'Service Unavailable', 504: 'Gateway Timeout' }

/** Where a story runs and what it prints to. */
export interface StoryOptions {
  url: string
  adminUrl: string
  adminToken?: string
  out: { write(text: string): unknown } | null
}

/**
 * The narrator of one story: numbered steps, each an exchange or a narrated event.
 * @throws Error from `exchange` when the gateway cannot be reached at all
 */
export function narrator(o: StoryOptions, agent: Agent) {
  const { url, adminUrl, out } = o
  const say = (text = '') => { out?.write(`${text}\n`) }
  const steps: DemoStep[] = []
  let metricsAvailable = true
  const options = o

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

  const exchange = async (actor: string, action: string, method: 'GET' | 'POST', path: string, requestHeaders: Record<string, string>, expectedStatus: number, body?: string) => {
    const step: DemoStep = { n: steps.length + 1, actor, action, metrics: [], checks: [], failures: [], ok: true }
    steps.push(step)
    say(`[${step.n}] ${actor}: ${action}`)
    const shown = Object.entries(requestHeaders).filter(([k]) => k !== 'content-type').map(([k, v]) => `${k}: ${v}`).join(', ')
    say(`    ${method} ${path}${shown ? `  (${shown})` : ''}${body ? `  ${body}` : ''}`)
    const before = await readMetrics()
    let r
    try {
      r = await request(`${url}${path}`, { method, headers: requestHeaders, body, dispatcher: agent })
    } catch (e) {
      const code = (e as { code?: string }).code ?? (e as Error).message
      throw new Error(`cannot reach the gateway at ${url} (${code}); is it running? Start it with npm start, or set FENCEGATE_URL.`, { cause: e })
    }
    const text = await r.body.text()
    const after = before && await readMetrics()
    step.metrics = before && after ? diff(before, after) : []
    step.http = { method, path, requestHeaders, status: r.statusCode, expectedStatus, headers: flatHeaders(r.headers), body: text }
    const replayed = step.http.headers['idempotent-replayed']
    say(`    → ${r.statusCode} ${STATUS_TEXT[r.statusCode] ?? ''}${replayed ? `, Idempotent-Replayed: ${replayed}` : ''}   (expected ${expectedStatus})`)
    say(`    ${text.length > 400 ? `${text.slice(0, 400)}…` : text}`)
    if (r.statusCode === expectedStatus) step.checks.push(`status ${expectedStatus}`)
    else step.failures.push(`status ${r.statusCode}, expected ${expectedStatus}`)
    return step
  }

  /** A step another process made (a worker's answer): printed by the caller, checked with expect. */
  const observe = (actor: string, action: string) => {
    const step: DemoStep = { n: steps.length + 1, actor, action, metrics: [], checks: [], failures: [], ok: true }
    steps.push(step)
    say(`[${step.n}] ${actor}: ${action}`)
    return step
  }

  const finish = (step: DemoStep, holds: string) => {
    if (step.metrics.length) {
      say('    metrics:')
      for (const d of step.metrics) say(`      ${d.series} ${d.delta > 0 ? '+' : ''}${d.delta}`)
    } else if (metricsAvailable && step.http) {
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

  return { say, steps, narrate, observe, exchange, finish, expect, expectMetric, readMetrics, metricsAvailable: () => metricsAvailable }
}

/** The JSON of a body, or undefined when it is none. */
export const parseJson = (text: string): any => { try { return JSON.parse(text) } catch { return undefined } }
