// The dashboards and alert rules checked against a real Prometheus scraping a real
// gateway (tracing on, so the duration histograms carry exemplars), with traffic producing every
// outcome of contract §6; promtool on the rules and on the live exposition.
import { readFileSync } from 'node:fs'
import { resolve } from 'node:path'
import { afterAll, beforeAll, describe, expect, test } from 'vitest'
import Database from 'better-sqlite3'
import { parse } from 'yaml'
import { InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace'
import { startTracing, type Tracing } from '../src/telemetry/sdk.js'
import { startUpstream, type Upstream } from './helpers/upstream.js'
import { startTestGateway, freePort, type TestGateway } from './helpers/gateway.js'
import { post, send } from './helpers/http.js'
import { requireBinary, promtool, startPrometheus, type Prometheus } from './helpers/prometheus.js'

const ROOT = resolve(import.meta.dirname, '..')
const RULES = resolve(ROOT, 'config/alerts/fencegate.rules.yml')
const DASHBOARD = JSON.parse(readFileSync(resolve(ROOT, 'dashboards/fencegate.json'), 'utf8'))
const OUTCOMES = ['forwarded', 'replayed', 'stale', 'token_missing', 'token_malformed', 'key_missing', 'key_malformed',
  'key_reused', 'in_flight', 'outcome_unknown', 'upstream_error', 'store_error', 'no_route']

const exporter = new InMemorySpanExporter()
let tracing: Tracing
let up: Upstream
let gw: TestGateway
let prom: Prometheus

beforeAll(async () => {
  requireBinary('promtool')
  requireBinary('prometheus')
  tracing = startTracing({ spanProcessors: [new SimpleSpanProcessor({ exporter })] })
  up = await startUpstream()
  const closed = await freePort()
  const upstream = (url: string, timeout = '300ms') => `    upstream:
      url: ${url}
      timeout: ${timeout}`
  gw = await startTestGateway(`store:
  kind: sqlite
  path: "@DIR@/fg.db"
  timeout: 300ms
routes:
  - name: pay
    match:
      path: "/pay/:acct/*"
${upstream(up.url, '600ms')}
    fencing:
      resource: "acct:{param.acct}"
    idempotency:
      required: true
      maxResponseBytes: 1KiB
  - name: retry
    match:
      path: "/retry/*"
${upstream(up.url)}
    idempotency:
      unknownOutcome: retry
  - name: down
    match:
      path: "/down/*"
${upstream(`http://127.0.0.1:${closed}`)}
  - name: flaky
    match:
      path: "/flaky/*"
${upstream(up.url)}
`)
  // the gateway's admin listener, and one that is down (the FencegateDown alert has data)
  prom = await startPrometheus({ targets: [new URL(gw.adminUrl).host, `127.0.0.1:${await freePort()}`], ruleFiles: [RULES] })
  await until(async () => (await prom.api('/api/v1/targets')).data.activeTargets.some((t: any) => t.health === 'up'), 'Prometheus scraping the gateway')
  // two rounds, a few scrapes apart, so every counter is seen before and after it grows
  await traffic(1)
  await sleep(2500)
  await traffic(2)
  await sleep(3000)
}, 60_000)
afterAll(async () => {
  await prom?.close()
  await gw?.close()
  await up?.close()
  await tracing?.shutdown()
})

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))
async function until(check: () => Promise<boolean>, what: string, ms = 15_000): Promise<void> {
  const deadline = Date.now() + ms
  while (!(await check().catch(() => false))) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}\n${prom?.log()}`)
    await sleep(200)
  }
}

/** One round of traffic producing every outcome of contract §6 (round n uses its own keys). */
async function traffic(n: number): Promise<void> {
  const token = String(n * 10)
  const pay = (path: string, key: string | undefined, body: unknown = { amount: n }, t = token) =>
    post(`${gw.url}/pay/acct-${n}${path}`, body, { ...(t ? { 'fencing-token': t } : {}), ...(key ? { 'idempotency-key': key } : {}) })
  const expectStatus = async (p: Promise<{ status: number }>, status: number) => expect((await p).status).toBe(status)
  await expectStatus(pay('/charges', `k${n}`), 201) // forwarded (stored)
  await expectStatus(pay('/charges', `k${n}`), 201) // replayed
  await expectStatus(pay('/charges', `stale${n}`, {}, String(n * 10 - 5)), 412) // stale
  await expectStatus(pay('/charges', `nt${n}`, {}, ''), 428) // token_missing
  await expectStatus(pay('/charges', `mt${n}`, {}, '01'), 400) // token_malformed
  await expectStatus(pay('/charges', undefined), 400) // key_missing
  await expectStatus(pay('/charges', 'x'.repeat(256)), 400) // key_malformed
  await expectStatus(pay('/charges', `k${n}`, { amount: 999 }), 422) // key_reused
  const first = pay('/slow?ms=400', `slow${n}`)
  await sleep(100)
  await expectStatus(pay('/slow?ms=400', `slow${n}`), 409) // in_flight
  await expectStatus(first, 200)
  await expectStatus(pay('/hang', `hang${n}`), 504) // outcome_unknown (timeout)
  // the check-to-apply window: token 1 slow, token 2 sent meanwhile; 1 ends last (overtaken)
  const older = post(`${gw.url}/pay/race-${n}/slow?ms=300`, {}, { 'fencing-token': '1', 'idempotency-key': `race1-${n}` })
  await sleep(100)
  await expectStatus(post(`${gw.url}/pay/race-${n}/charges`, {}, { 'fencing-token': '2', 'idempotency-key': `race2-${n}` }), 201)
  await expectStatus(older, 200)
  await expectStatus(pay('/status/503', `busy${n}`), 503) // released
  await expectStatus(pay('/large?bytes=5000', `large${n}`), 200) // not_stored
  await expectStatus(send(`${gw.url}/down/x`), 502) // upstream_error
  await expectStatus(send(`${gw.url}/nowhere`), 404) // no_route
  // a key forwarded again after an unknown outcome: a duplicate forward
  await expectStatus(post(`${gw.url}/retry/apply-then-hang`, {}, { 'idempotency-key': `r${n}` }), 504)
  await expectStatus(post(`${gw.url}/retry/apply-then-hang`, {}, { 'idempotency-key': `r${n}` }), 504)
  // upstream 5xx
  for (let i = 0; i < 3; i++) await expectStatus(send(`${gw.url}/flaky/status/500`), 500)
  await expectStatus(send(`${gw.url}/flaky/ok`), 201)
  // store_error: the SQLite file locked by another writer
  const other = new Database(`${gw.dir}/fg.db`)
  other.exec('BEGIN IMMEDIATE')
  try {
    await expectStatus(pay('/charges', `locked${n}`), 503)
  } finally {
    other.exec('COMMIT')
    other.close()
  }
}

/** The dashboard's queries with Grafana's macros as Grafana would fill them for a 1 s scrape interval. */
const grafana = (expr: string) => expr.replaceAll('$__rate_interval', '4s').replaceAll('${route}', '.*').replaceAll('$route', '.*')

const panels = (): any[] => DASHBOARD.panels.flatMap((p: any) => (p.type === 'row' ? p.panels ?? [] : [p]))

async function rangeQuery(expr: string) {
  const end = Date.now() / 1000
  return prom.api('/api/v1/query_range', { query: expr, start: String(end - 30), end: String(end), step: '1' })
}

describe('against a real Prometheus', () => {
  test('Prometheus sees every outcome of contract §6 in fencegate_requests_total', async () => {
    const r = await prom.api('/api/v1/query', { query: 'sum by (outcome) (fencegate_requests_total)' })
    expect(r.status).toBe('success')
    const seen = r.data.result.map((s: any) => s.metric.outcome)
    for (const o of OUTCOMES) expect(seen).toContain(o)
  })

  test('every dashboard panel query runs without error and returns data', async () => {
    const targets = panels().flatMap((p) => p.targets.map((t: any) => ({ panel: p.title, expr: t.expr as string })))
    expect(targets.length).toBeGreaterThanOrEqual(16)
    const failures: string[] = []
    for (const { panel, expr } of targets) {
      const r = await rangeQuery(grafana(expr))
      if (r.status !== 'success') failures.push(`${panel}: ${r.errorType}: ${r.error} (${expr})`)
      else if (r.data.result.length === 0) failures.push(`${panel}: no data (${expr})`)
    }
    expect(failures).toEqual([])
  })

  test('the dashboard\'s route variable lists the configured routes', async () => {
    const v = DASHBOARD.templating.list.find((t: any) => t.name === 'route')
    const metric = /label_values\((\w+), route\)/.exec(v.definition)![1]
    const r = await prom.api('/api/v1/label/route/values', { 'match[]': metric })
    expect(r.data).toEqual(expect.arrayContaining(['pay', 'retry', 'down', 'flaky']))
  })

  test('the stat panels of the exactly-once risk row show unknown outcomes, duplicate forwards and overtaken writes above 0', async () => {
    for (const title of ['Unknown outcomes', 'Duplicate forwards', 'Overtaken writes']) {
      const p = panels().find((x) => x.title === title)
      const r = await rangeQuery(grafana(p.targets[0].expr))
      const max = Math.max(...r.data.result.flatMap((s: any) => s.values.map((v: [number, string]) => Number(v[1]))))
      expect(max, title).toBeGreaterThan(0)
    }
  })

  test('every alert expression runs without error and, with this traffic, returns data', async () => {
    const rules = parse(readFileSync(RULES, 'utf8')).groups.flatMap((g: any) => g.rules)
    expect(rules.map((r: any) => r.alert).sort()).toEqual(['FencegateDown', 'FencegateDuplicateForwards', 'FencegateStaleWriters',
      'FencegateStoreErrors', 'FencegateUnknownOutcomesRising', 'FencegateUpstream5xxRatio', 'FencegateWritesOvertaken'])
    const failures: string[] = []
    for (const rule of rules) {
      const r = await prom.api('/api/v1/query', { query: rule.expr })
      if (r.status !== 'success') failures.push(`${rule.alert}: ${r.error}`)
      else if (r.data.result.length === 0) failures.push(`${rule.alert}: no data`)
    }
    expect(failures).toEqual([])
  })

  test('Prometheus evaluates the rules without error; stale writers, duplicate forwards and overtaken writes fire at once', async () => {
    await until(async () => {
      const r = await prom.api('/api/v1/rules')
      const rules = r.data.groups.flatMap((g: any) => g.rules)
      const state = Object.fromEntries(rules.map((x: any) => [x.name, x.state]))
      return rules.length === 7 && state.FencegateStaleWriters === 'firing' && state.FencegateDuplicateForwards === 'firing' && state.FencegateWritesOvertaken === 'firing'
    }, 'the alerts to fire')
    const rules = (await prom.api('/api/v1/rules')).data.groups.flatMap((g: any) => g.rules)
    for (const r of rules) expect(r.health, `${r.name}: ${r.lastError}`).toBe('ok')
    const state = Object.fromEntries(rules.map((x: any) => [x.name, x.state]))
    // these wait out their `for:` first
    expect(state.FencegateDown).toMatch(/pending|firing/)
    expect(state.FencegateStoreErrors).toMatch(/pending|firing/)
  })

  test('Prometheus scrapes OpenMetrics and stores the trace_id exemplars of the duration histograms', async () => {
    const traceIds = new Set(exporter.getFinishedSpans().map((s) => s.spanContext().traceId))
    const end = Date.now() / 1000
    const r = await prom.api('/api/v1/query_exemplars', { query: 'fencegate_request_duration_seconds_bucket', start: String(end - 120), end: String(end) })
    expect(r.status).toBe('success')
    const exemplars = r.data.flatMap((s: any) => s.exemplars)
    expect(exemplars.length).toBeGreaterThan(0)
    for (const e of exemplars) expect(traceIds.has(e.labels.trace_id), e.labels.trace_id).toBe(true)
  })
})

describe('promtool', () => {
  test('check rules passes on config/alerts/fencegate.rules.yml', () => {
    const r = promtool(['check', 'rules', RULES])
    expect(r.status, r.output).toBe(0)
  })

  test('the alert rules\' unit tests pass (test/alerts/fencegate.test.yml)', () => {
    const r = promtool(['test', 'rules', resolve(ROOT, 'test/alerts/fencegate.test.yml')])
    expect(r.status, r.output).toBe(0)
  })

  test('check metrics passes on the live exposition', async () => {
    const text = (await send(`${gw.adminUrl}/metrics`)).text
    expect(text).toContain('fencegate_requests_total')
    const r = promtool(['check', 'metrics'], text)
    expect(r.status, r.output).toBe(0)
  })
})
