// The dashboards and alert rules checked against a real Prometheus scraping a real
// gateway (tracing on, so the duration histograms carry exemplars), with traffic producing every
// outcome of contract §6; promtool on the rules and on the live exposition.
//
// One round of traffic after a fresh start, scraped once before it: each event of the round is
// the first of its series, so the alerts firing and the stat panels counting prove that
// increase() sees a first event (the series exist at 0 from start-up, contract §6).
import { readFileSync } from 'node:fs'
import { resolve } from 'node:path'
import { afterAll, beforeAll, describe, expect, test } from 'vitest'
import Database from 'better-sqlite3'
import { parse } from 'yaml'
import { InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace'
import { startTracing, type Tracing } from '../src/telemetry/sdk.js'
import { startUpstream, type Upstream } from './helpers/upstream.js'
import { startTestGateway, refusedUrl, type TestGateway } from './helpers/gateway.js'
import { expectProblem, post, send } from './helpers/http.js'
import { requireBinary, promtool, startPrometheus, type Prometheus } from './helpers/prometheus.js'
import { sleep, until } from './helpers/wait.js'
import { STORE_OPS } from '../src/telemetry/metrics.js'
import { makePki } from './helpers/certs.js'

const ROOT = resolve(import.meta.dirname, '..')
const RULES = resolve(ROOT, 'config/alerts/fencegate.rules.yml')
const DASHBOARD = JSON.parse(readFileSync(resolve(ROOT, 'dashboards/fencegate.json'), 'utf8'))
const OUTCOMES = ['forwarded', 'replayed', 'stale', 'token_missing', 'token_malformed', 'key_missing', 'key_malformed',
  'key_reused', 'in_flight', 'outcome_unknown', 'upstream_error', 'store_error', 'no_route']

/** the pod label of each scraped target: the gateway, one that is down, the TLS gateway */
const POD = ['fencegate-0', 'fencegate-down', 'fencegate-1']

const exporter = new InMemorySpanExporter()
let tracing: Tracing
let up: Upstream
let gw: TestGateway
/** a second gateway, its proxy listener serving HTTPS with a certificate 7 days from its end (FencegateTlsCertificateExpiry has data) */
let tlsGw: TestGateway
let prom: Prometheus
/** /metrics of the fresh gateway, before any request */
let fresh: string

beforeAll(async () => {
  requireBinary('promtool')
  requireBinary('prometheus')
  tracing = startTracing({ spanProcessors: [new SimpleSpanProcessor({ exporter })] })
  up = await startUpstream()
  const closed = await refusedUrl()
  const upstream = (url: string, timeout = '300ms') => ({ url, timeout })
  gw = await startTestGateway({
    store: { kind: 'sqlite', path: '@DIR@/fg.db', timeout: '300ms' },
    routes: [
      { name: 'pay', path: '/pay/:acct/*', upstream: upstream(up.url, '600ms'), fencing: { resource: 'acct:{param.acct}' }, idempotency: { required: true, maxResponseBytes: '1KiB' } },
      { name: 'retry', path: '/retry/*', upstream: upstream(up.url), idempotency: { unknownOutcome: 'retry' } },
      { name: 'down', path: '/down/*', upstream: upstream(closed) },
      { name: 'flaky', path: '/flaky/*', upstream: upstream(up.url) },
    ],
  })
  fresh = (await send(`${gw.adminUrl}/metrics`)).text
  const soon = makePki().issue('expiring', { days: 7 })
  tlsGw = await startTestGateway({ tls: { cert: soon.cert, key: soon.key }, store: { kind: 'sqlite', path: '@DIR@/fg.db' }, routes: [{ name: 'tls', path: '/tls/*', upstream: up.url }] })
  expect((await send(`${gw.adminUrl}/readyz`)).status).toBe(200) // fencegate_store_up
  // the gateway's admin listener, and one that is down (the FencegateDown alert has data)
  // as the Prometheus Operator labels the kit's pods: the dashboard's namespace and pod variables
  const targets = [new URL(gw.adminUrl).host, new URL(await refusedUrl()).host, new URL(tlsGw.adminUrl).host]
  prom = await startPrometheus({ targets, labels: Object.fromEntries(targets.map((t, i) => [t, { namespace: 'payments', pod: POD[i] }])), ruleFiles: [RULES] })
  // Prometheus holds the fresh gateway's zeros before the first request
  await untilPrometheus(async () => (await instant('fencegate_duplicate_forwards_total{route="retry"} == 0')).length === 1, 'Prometheus scraping the gateway\'s zeros')
  await traffic()
  // the upstream's status codes cannot be known in advance, so its code="500" series is born at
  // its first count (3): more 500s after a scrape give FencegateUpstream5xxRatio a rate
  await sleep(1500)
  for (let i = 0; i < 3; i++) expect((await send(`${gw.url}/flaky/status/500`)).status).toBe(500)
  await sleep(2500)
  // the gateway counts the store's unknown records every 15 s (src/audit/unknown.ts)
  await untilPrometheus(async () => (await instant('fencegate_unknown_outcomes_unresolved{route="pay"} > 0')).length === 1, 'the unresolved unknown outcomes counted', 20_000)
}, 60_000)
afterAll(async () => {
  await prom?.close()
  await gw?.close()
  await tlsGw?.close()
  await up?.close()
  await tracing?.shutdown()
})

/** At Prometheus's pace (it scrapes and evaluates every second): `until`, polling every 200 ms for up to `ms`; a failure shows its log. */
const untilPrometheus = (check: () => Promise<boolean>, what: string, ms = 15_000) =>
  until(check, { timeoutMs: ms, intervalMs: 200, message: () => `${what}\n${prom?.log()}` })

/** Instant query; the result vector (throws on a query error). */
async function instant(query: string): Promise<{ metric: Record<string, string>; value: [number, string] }[]> {
  const r = await prom.api('/api/v1/query', { query })
  if (r.status !== 'success') throw new Error(`${query}: ${r.error}`)
  return r.data.result
}

/**
 * One round of traffic producing every outcome of contract §6, each at least once: one stale
 * write, one overtaken write, one duplicate forward, one unknown outcome on "pay", one store
 * error, dropped attempt-log entries, and a lost store state at the end.
 */
async function traffic(): Promise<void> {
  const n = 1
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
  // a key forwarded again after an unknown outcome (unknownOutcome: retry, the upstream slower
  // than upstream.timeout): one duplicate forward, two unknown outcomes on "retry"
  await expectStatus(post(`${gw.url}/retry/apply-then-hang`, {}, { 'idempotency-key': `r${n}` }), 504)
  await expectStatus(post(`${gw.url}/retry/apply-then-hang`, {}, { 'idempotency-key': `r${n}` }), 504)
  // upstream 5xx
  for (let i = 0; i < 3; i++) await expectStatus(send(`${gw.url}/flaky/status/500`), 500)
  await expectStatus(send(`${gw.url}/flaky/ok`), 201)
  // store_error: the SQLite file locked by another writer, long enough that the attempt log's
  // batch (of these two 503s; a plain route writes no attempt entry) fails too: dropped entries
  const other = new Database(`${gw.dir}/fg.db`)
  other.exec('BEGIN IMMEDIATE')
  try {
    await expectStatus(pay('/charges', `locked${n}`), 503)
    await expectStatus(pay('/charges', `locked-again${n}`), 503)
    await sleep(800)
  } finally {
    other.exec('COMMIT')
    other.close()
  }
  // the store's state lost (its epoch marker replaced): fenced routes answer 503 until accept-loss
  const meta = new Database(`${gw.dir}/fg.db`)
  try {
    meta.prepare("UPDATE fg_meta_v1 SET value = 'replaced' WHERE name = 'epoch'").run()
  } finally {
    meta.close()
  }
  await untilPrometheus(async () => (await send(`${gw.adminUrl}/readyz`)).status === 503, 'the gateway to see the lost state')
  expectProblem(await pay('/charges', `lost${n}`), { status: 503, type: 'store-state-lost' })
}

/**
 * The dashboard's queries with Grafana's macros as Grafana would fill them for a 1 s scrape
 * interval and a time range of 5 minutes (longer than this Prometheus has run), each variable
 * All (`.*`) unless `values` picks one (Grafana fills a single value as is).
 */
const grafana = (expr: string, values: Record<string, string> = {}) => {
  let out = expr.replaceAll('$__rate_interval', '4s').replaceAll('$__range', '5m')
  for (const v of ['job', 'namespace', 'pod', 'route']) out = out.replaceAll(`\${${v}}`, values[v] ?? '.*').replaceAll(`$${v}`, values[v] ?? '.*')
  return out
}
const variable = (name: string) => DASHBOARD.templating.list.find((t: any) => t.name === name)
/** A label_values(selector, label) variable's values, as Grafana asks Prometheus for them. */
async function variableValues(name: string, values: Record<string, string> = {}): Promise<string[]> {
  const m = /^label_values\((.+), (\w+)\)$/.exec(variable(name).definition)
  expect(m, `${name}: label_values(selector, label)`).not.toBeNull()
  const r = await prom.api(`/api/v1/label/${m![2]}/values`, { 'match[]': grafana(m![1], values) })
  expect(r.status, r.error).toBe('success')
  return r.data
}

const panels = (): any[] => DASHBOARD.panels.flatMap((p: any) => (p.type === 'row' ? p.panels ?? [] : [p]))

async function rangeQuery(expr: string) {
  const end = Date.now() / 1000
  return prom.api('/api/v1/query_range', { query: expr, start: String(end - 30), end: String(end), step: '1' })
}

/** A sample's value in an exposition; undefined when the labelset is absent. */
function sample(text: string, name: string, labels: Record<string, string>): number | undefined {
  for (const line of text.split('\n')) {
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)/.exec(line)
    if (!m || m[1] !== name) continue
    const got = Object.fromEntries([...(m[2] ?? '').matchAll(/(\w+)="([^"]*)"/g)].map((x) => [x[1], x[2]]))
    if (Object.keys(got).length === Object.keys(labels).length && Object.entries(labels).every(([k, v]) => got[k] === v)) return Number(m[3])
  }
  return undefined
}

describe('series from the start (contract §6)', () => {
  test('a fresh gateway exposes every counter and histogram an alert or panel reads at 0, for each route and listed label value', () => {
    const missing: string[] = []
    const zero = (name: string, labels: Record<string, string>) => {
      const v = sample(fresh, name, labels)
      if (v !== 0) missing.push(`${name}${JSON.stringify(labels)} = ${v}`)
    }
    const routes = ['pay', 'retry', 'down', 'flaky']
    for (const route of routes) {
      for (const reason of ['timeout', 'reset', 'client_abort', 'crash']) zero('fencegate_unknown_outcomes_total', { route, reason })
      zero('fencegate_requests_total', { route, method: 'POST', code: '502', outcome: 'upstream_error' })
      zero('fencegate_request_duration_seconds_count', { route, outcome: 'forwarded' })
      zero('fencegate_request_duration_seconds_bucket', { route, outcome: 'forwarded', le: '+Inf' })
    }
    // fenced: pay
    for (const reason of ['stale', 'missing', 'malformed']) zero('fencegate_fencing_rejections_total', { route: 'pay', reason })
    zero('fencegate_fencing_overtaken_total', { route: 'pay' })
    zero('fencegate_fencing_stale_lateness_seconds_count', { route: 'pay' })
    zero('fencegate_fencing_generations_total', { route: 'pay' })
    zero('fencegate_requests_total', { route: 'pay', method: 'POST', code: '503', outcome: 'store_error' })
    zero('fencegate_requests_total', { route: 'pay', method: 'GET', code: '412', outcome: 'stale' })
    zero('fencegate_request_duration_seconds_count', { route: 'pay', outcome: 'store_error' })
    // idempotent: pay, retry
    for (const route of ['pay', 'retry']) {
      for (const result of ['stored', 'replayed', 'in_flight', 'key_reused', 'released', 'not_stored']) zero('fencegate_idempotency_total', { route, result })
      zero('fencegate_duplicate_forwards_total', { route })
      zero('fencegate_idempotency_evicted_total', { route })
      zero('fencegate_requests_total', { route, method: 'POST', code: '503', outcome: 'store_error' })
      zero('fencegate_requests_total', { route, method: 'PATCH', code: '409', outcome: 'outcome_unknown' })
    }
    // the store's ops; those that ran at start-up (ping, markers) keep their counts
    for (const op of STORE_OPS) {
      zero('fencegate_store_errors_total', { store: 'sqlite', op })
      if (sample(fresh, 'fencegate_store_duration_seconds_bucket', { store: 'sqlite', op, le: '+Inf' }) === undefined) missing.push(`fencegate_store_duration_seconds {op="${op}"}`)
    }
    expect(sample(fresh, 'fencegate_store_duration_seconds_count', { store: 'sqlite', op: 'ping' })).toBeGreaterThan(0)
    zero('fencegate_store_duration_seconds_count', { store: 'sqlite', op: 'admit' })
    zero('fencegate_store_state_losses_total', { store: 'sqlite' })
    for (const reason of ['queue_full', 'store_error', 'log_full', 'evicted']) zero('fencegate_audit_dropped_total', { reason })
    for (const result of ['granted', 'held', 'renewed', 'released', 'stale', 'expired']) zero('fencegate_leases_total', { result })
    expect(missing).toEqual([])
    // none on routes that cannot have them
    expect(sample(fresh, 'fencegate_fencing_rejections_total', { route: 'flaky', reason: 'stale' })).toBeUndefined()
    expect(sample(fresh, 'fencegate_duplicate_forwards_total', { route: 'down' })).toBeUndefined()
    // declared with their help, fed elsewhere
    expect(fresh).toContain('# HELP fencegate_unknown_outcomes_unresolved ')
    expect(fresh).toContain('# TYPE fencegate_unknown_outcomes_unresolved gauge')
    expect(fresh).toContain('# TYPE fencegate_fencing_stale_lateness_seconds histogram')
    // the configured lease, beside the effect durations on the dashboard
    expect(sample(fresh, 'fencegate_idempotency_lease_seconds', { route: 'pay' })).toBe(30)
    expect(sample(fresh, 'fencegate_idempotency_lease_seconds', { route: 'flaky' })).toBeUndefined()
  })

  test('after one duplicate forward and one unknown outcome on "pay", increase() counts each from the fresh start', async () => {
    const one = async (expr: string) => {
      const r = await instant(`sum(increase(${expr}[5m]))`)
      expect(r.length, expr).toBe(1)
      expect(Math.round(Number(r[0].value[1])), expr).toBe(1)
    }
    await one('fencegate_duplicate_forwards_total{route="retry"}')
    await one('fencegate_unknown_outcomes_total{route="pay",reason="timeout"}')
    await one('fencegate_fencing_rejections_total{route="pay",reason="stale"}')
    await one('fencegate_fencing_overtaken_total{route="pay"}')
    await one('fencegate_store_state_losses_total')
  })
})

describe('against a real Prometheus', () => {
  test('Prometheus sees every outcome of contract §6 in fencegate_requests_total', async () => {
    const r = await prom.api('/api/v1/query', { query: 'sum by (outcome) (fencegate_requests_total)' })
    expect(r.status).toBe('success')
    const seen = r.data.result.map((s: any) => s.metric.outcome)
    for (const o of OUTCOMES) expect(seen).toContain(o)
  })

  test('every dashboard panel query runs without error and returns data', async () => {
    const targets = panels().flatMap((p) => p.targets.map((t: any) => ({ panel: p.title, expr: t.expr as string, instant: !!t.instant })))
    expect(targets.length).toBeGreaterThanOrEqual(20)
    const failures: string[] = []
    for (const { panel, expr, instant: once } of targets) {
      const r = once ? await prom.api('/api/v1/query', { query: grafana(expr) }) : await rangeQuery(grafana(expr))
      if (r.status !== 'success') failures.push(`${panel}: ${r.errorType}: ${r.error} (${expr})`)
      else if (r.data.result.length === 0) failures.push(`${panel}: no data (${expr})`)
    }
    expect(failures).toEqual([])
  })

  test('the dashboard\'s route variable lists the configured routes', async () => {
    expect(await variableValues('route')).toEqual(expect.arrayContaining(['pay', 'retry', 'down', 'flaky']))
  })

  test('the job, namespace and pod variables list what Prometheus scraped; each narrows the next and the route list', async () => {
    expect(await variableValues('job')).toEqual(['fencegate'])
    expect(await variableValues('namespace', { job: 'fencegate' })).toEqual(['payments'])
    expect(await variableValues('namespace', { job: 'other' })).toEqual([])
    // the target that is down exposes nothing
    expect(await variableValues('pod', { job: 'fencegate', namespace: 'payments' })).toEqual(['fencegate-0', 'fencegate-1'])
    expect((await variableValues('route', { pod: 'fencegate-1' })).sort()).toEqual(['tls'])
    // "none": the request no route matched
    expect((await variableValues('route', { pod: 'fencegate-0' })).sort()).toEqual(['down', 'flaky', 'none', 'pay', 'retry'])
  })

  test('every dashboard panel query with one pod picked returns that pod\'s series only', async () => {
    const failures: string[] = []
    for (const p of panels()) for (const t of p.targets) {
      const q = grafana(t.expr, { job: 'fencegate', namespace: 'payments', pod: 'fencegate-0' })
      const r = t.instant ? await prom.api('/api/v1/query', { query: q }) : await rangeQuery(q)
      if (r.status !== 'success') failures.push(`${p.title}: ${r.error} (${q})`)
      else if (r.data.result.length === 0) failures.push(`${p.title}: no data (${q})`)
      // a series that keeps the pod label names this one
      else for (const s of r.data.result) if (s.metric.pod !== undefined && s.metric.pod !== 'fencegate-0') failures.push(`${p.title}: a series of ${s.metric.pod}`)
    }
    expect(failures).toEqual([])
  })

  test('the Pods row: CPU, resident memory, event-loop lag, store clock offset and config reloads, one series per scraped gateway', async () => {
    const row = DASHBOARD.panels.slice(DASHBOARD.panels.findIndex((p: any) => p.type === 'row' && p.title === 'Pods') + 1)
    expect(row.map((p: any) => p.title)).toEqual(['CPU per pod', 'Resident memory per pod', 'Event-loop lag p99 per pod', 'Store clock offset per pod', 'Config reloads per pod'])
    /** the last value of each series of a panel's query, by pod (and `by`, a second label) */
    const last = async (title: string, refId = 'A', by?: string) => {
      const t = row.find((p: any) => p.title === title).targets.find((x: any) => x.refId === refId)
      const r = await rangeQuery(grafana(t.expr))
      expect(r.status, r.error).toBe('success')
      return Object.fromEntries(r.data.result.map((s: any) => [by ? `${s.metric.pod} ${s.metric[by]}` : s.metric.pod, Number(s.values.at(-1)[1])]))
    }
    const pods = ['fencegate-0', 'fencegate-1']
    // both gateways run in this one process: the same process metrics, once per pod
    const rss = await last('Resident memory per pod')
    expect(Object.keys(rss).sort()).toEqual(pods)
    for (const pod of pods) expect(rss[pod], pod).toBeGreaterThan(20 * 2 ** 20)
    const cpu = await last('CPU per pod')
    expect(Object.keys(cpu).sort()).toEqual(pods)
    // the process behind both pods serves the test's requests: it uses some CPU
    for (const pod of pods) expect(cpu[pod], pod).toBeGreaterThan(0)
    for (const refId of ['A', 'B']) {
      const lag = await last('Event-loop lag p99 per pod', refId)
      expect(Object.keys(lag).sort(), refId).toEqual(pods)
      for (const pod of pods) expect(lag[pod], `${refId} ${pod}`).toBeGreaterThan(0)
    }
    // SQLite reads this host's clock
    expect(await last('Store clock offset per pod', 'A', 'store')).toEqual({ 'fencegate-0 sqlite': 0, 'fencegate-1 sqlite': 0 })
    // a reload of fencegate-1 (refused: it was started from no file) counts there only
    expect(await last('Config reloads per pod', 'A', 'result')).toEqual({ 'fencegate-0 applied': 0, 'fencegate-0 refused': 0, 'fencegate-1 applied': 0, 'fencegate-1 refused': 0 })
    expect(await tlsGw.reload()).toMatchObject({ applied: false })
    await untilPrometheus(async () => (await last('Config reloads per pod', 'A', 'result'))['fencegate-1 refused'] > 0, 'the refused reload on the Config reloads panel')
    const reloads = await last('Config reloads per pod', 'A', 'result')
    expect(reloads).toMatchObject({ 'fencegate-0 applied': 0, 'fencegate-0 refused': 0, 'fencegate-1 applied': 0 })
  })

  test('the stat panels count whole events since the fresh start: 3 unknown outcomes, 1 duplicate forward, 1 overtaken write, the dropped entries', async () => {
    const stat = async (title: string) => {
      const p = panels().find((x) => x.title === title)
      const r = await instant(grafana(p.targets[0].expr))
      expect(r.length, title).toBe(1)
      return Number(r[0].value[1])
    }
    // pay's timeout, retry's two
    expect(await stat('Unknown outcomes')).toBe(3)
    expect(await stat('Duplicate forwards')).toBe(1)
    expect(await stat('Overtaken writes')).toBe(1)
    // the locked batch's entries: one or both, as the lock met the batch (a retried batch that
    // commits after the lock goes drops nothing)
    const dropped = await stat('Dropped attempt-log entries')
    expect(dropped).toBeGreaterThanOrEqual(1)
    expect(Number.isInteger(dropped)).toBe(true)
    // and the store's state lost: the state-loss stat
    expect(await stat('Store state lost')).toBe(1)
    expect(await stat('Store up')).toBe(1)
    expect(await stat('Unresolved unknown outcomes')).toBe(2)
  })

  const RULE_NAMES = ['FencegateAuditDropped', 'FencegateDown', 'FencegateDuplicateForwards', 'FencegateGatewayErrors', 'FencegateStaleWriters',
    'FencegateStoreErrors', 'FencegateStoreStateLost', 'FencegateStoreUnavailable', 'FencegateTlsCertificateExpiry', 'FencegateUnknownOutcomes', 'FencegateUnknownOutcomesUnresolved',
    'FencegateUpstream5xxRatio', 'FencegateWritesOvertaken']

  test('every alert expression runs without error and, with this traffic, returns data', async () => {
    const rules = parse(readFileSync(RULES, 'utf8')).groups.flatMap((g: any) => g.rules)
    expect(rules.map((r: any) => r.alert).sort()).toEqual(RULE_NAMES)
    const failures: string[] = []
    for (const rule of rules) {
      const r = await prom.api('/api/v1/query', { query: rule.expr })
      if (r.status !== 'success') failures.push(`${rule.alert}: ${r.error}`)
      else if (r.data.result.length === 0) failures.push(`${rule.alert}: no data`)
    }
    expect(failures).toEqual([])
  })

  test('from a fresh start, the first event of each kind fires its alert at once: duplicate forward, unknown outcome, gateway 503, store error, dropped entries, lost state, stale and overtaken writes', async () => {
    // alert name -> the labels of an alert that must be firing
    const expected: [string, Record<string, string>][] = [
      ['FencegateDuplicateForwards', { route: 'retry' }],
      ['FencegateUnknownOutcomes', { route: 'pay', reason: 'timeout' }],
      ['FencegateUnknownOutcomes', { route: 'retry', reason: 'timeout' }],
      ['FencegateGatewayErrors', { route: 'pay', outcome: 'store_error' }],
      ['FencegateGatewayErrors', { route: 'down', outcome: 'upstream_error' }],
      ['FencegateStoreErrors', { store: 'sqlite', op: 'admit' }],
      ['FencegateAuditDropped', { reason: 'store_error' }],
      ['FencegateStoreStateLost', { store: 'sqlite' }],
      ['FencegateStaleWriters', { route: 'pay' }],
      ['FencegateWritesOvertaken', { route: 'pay' }],
      // pay's timeout (unknownOutcome: reject) and retry's second timeout left their keys unknown
      ['FencegateUnknownOutcomesUnresolved', { route: 'pay' }],
      ['FencegateUnknownOutcomesUnresolved', { route: 'retry' }],
    ]
    const missing = async () => {
      const alerts: any[] = (await prom.api('/api/v1/alerts')).data.alerts
      return expected.filter(([name, labels]) => !alerts.some((a) => a.labels.alertname === name && a.state === 'firing'
        && Object.entries(labels).every(([k, v]) => a.labels[k] === v))).map(([name, labels]) => `${name} ${JSON.stringify(labels)}`)
    }
    await untilPrometheus(async () => {
      const notFiring = await missing()
      if (notFiring.length) throw new Error(`not firing: ${notFiring.join(', ')}`)
      return true
    }, 'the alerts to fire')
    const rules = (await prom.api('/api/v1/rules')).data.groups.flatMap((g: any) => g.rules)
    expect(rules.map((r: any) => r.name).sort()).toEqual(RULE_NAMES)
    for (const r of rules) expect(r.health, `${r.name}: ${r.lastError}`).toBe('ok')
    const state = Object.fromEntries(rules.map((x: any) => [x.name, x.state]))
    // waits out its `for:` first
    expect(state.FencegateDown).toMatch(/pending|firing/)
    // one store error is not an outage
    expect(state.FencegateStoreUnavailable).not.toBe('firing')
  })

  test('FencegateTlsCertificateExpiry fires for the proxy listener whose certificate ends in 7 days, and for nothing else', async () => {
    const instance = new URL(tlsGw.adminUrl).host
    await untilPrometheus(async () => {
      const alerts: any[] = (await prom.api('/api/v1/alerts')).data.alerts
      return alerts.some((a) => a.labels.alertname === 'FencegateTlsCertificateExpiry' && a.state === 'firing' && a.labels.listener === 'proxy' && a.labels.instance === instance)
    }, 'FencegateTlsCertificateExpiry to fire')
    const left = await instant('fencegate_tls_certificate_expiry_seconds')
    expect(left.map((r) => ({ instance: r.metric.instance, listener: r.metric.listener }))).toEqual([{ instance, listener: 'proxy' }])
    expect(Number(left[0].value[1])).toBeGreaterThan(6 * 86400)
    expect(Number(left[0].value[1])).toBeLessThanOrEqual(7 * 86400)
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
  test('check rules passes on config/alerts/fencegate.rules.yml', async () => {
    const r = await promtool(['check', 'rules', RULES])
    expect(r.status, r.output).toBe(0)
  })

  test('the alert rules\' unit tests pass (test/alerts/fencegate.test.yml)', async () => {
    const r = await promtool(['test', 'rules', resolve(ROOT, 'test/alerts/fencegate.test.yml')])
    expect(r.status, r.output).toBe(0)
  })

  test('check metrics passes on the live exposition', async () => {
    const text = (await send(`${gw.adminUrl}/metrics`)).text
    expect(text).toContain('fencegate_requests_total')
    const r = await promtool(['check', 'metrics'], text)
    expect(r.status, r.output).toBe(0)
  })
})
