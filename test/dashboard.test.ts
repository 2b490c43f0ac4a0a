// The Grafana dashboard and its provisioning files, the alert rules' runbook links and the
// store ops the metrics start at 0, linted (the queries themselves run against a real
// Prometheus in prometheus.test.ts).
import { readFileSync } from 'node:fs'
import { resolve } from 'node:path'
import { describe, expect, test } from 'vitest'
import { parse } from 'yaml'
import { STORE_OPS } from '../src/telemetry/metrics.js'

const ROOT = resolve(import.meta.dirname, '..')
const dash = JSON.parse(readFileSync(resolve(ROOT, 'dashboards/fencegate.json'), 'utf8'))
const rows: any[] = dash.panels.filter((p: any) => p.type === 'row')
const panels: any[] = dash.panels.flatMap((p: any) => (p.type === 'row' ? p.panels ?? [] : [p]))
const DS = { type: 'prometheus', uid: '${datasource}' }

// PromQL functions that take a range vector: each of their selectors must use $__rate_interval
// (or, in an instant query — a stat panel's count over the time range — $__range)
const RANGE_FUNCTIONS = /\b(rate|irate|increase|delta|idelta|deriv|changes|resets|[a-z]+_over_time)\s*\(/g
// metrics without a route label: not filtered by $route
const ROUTELESS = /fencegate_store_|fencegate_audit_dropped_total|fencegate_leases_total|fencegate_config_reloads_total|process_|nodejs_/
// the scope every series selector starts with: the job, namespace and pod variables
const SCOPE = 'job=~"$job",namespace=~"$namespace",pod=~"$pod"'
const SCOPE_RE = SCOPE.replace(/[$.*]/g, '\\$&')
// a series selector: a metric name, its matchers if any
const SELECTORS = /\b((?:fencegate|process|nodejs)_\w+)(\{[^}]*\})?/g
const inRow = (title: string): any[] => {
  const i = dash.panels.indexOf(rows.find((r) => r.title === title))
  const next = dash.panels.findIndex((p: any, j: number) => j > i && p.type === 'row')
  return dash.panels.slice(i + 1, next < 0 ? undefined : next)
}

describe('dashboards/fencegate.json', () => {
  test('importable anywhere: fixed uid, datasource variable, no __inputs, current schemaVersion', () => {
    expect(dash.uid).toBe('fencegate-overview')
    expect(dash.__inputs).toBeUndefined()
    expect(dash.schemaVersion).toBe(42)
    expect(dash.id ?? null).toBeNull()
    const vars = Object.fromEntries(dash.templating.list.map((v: any) => [v.name, v]))
    expect(vars.datasource).toMatchObject({ type: 'datasource', query: 'prometheus' })
    expect(vars.route).toMatchObject({ type: 'query', datasource: DS, includeAll: true, allValue: '.*' })
    expect(JSON.stringify(dash)).not.toMatch(/"uid":\s*"(?!\$\{datasource\}|-- Grafana --|fencegate-overview)[^"]*"/)
  })

  test('variables job, namespace, pod (each narrowing the next), then route: label_values queries, multi-select, All matching every value and none', () => {
    const list: any[] = dash.templating.list
    expect(list.map((v) => v.name)).toEqual(['datasource', 'job', 'namespace', 'pod', 'route', 'audit_view'])
    const definitions: Record<string, string> = {
      job: 'label_values(fencegate_build_info, job)',
      namespace: 'label_values(fencegate_build_info{job=~"$job"}, namespace)',
      pod: 'label_values(fencegate_build_info{job=~"$job",namespace=~"$namespace"}, pod)',
      route: `label_values(fencegate_requests_total{${SCOPE}}, route)`,
    }
    for (const [name, definition] of Object.entries(definitions)) {
      const v = list.find((x) => x.name === name)
      // allValue .* also matches a missing label: outside Kubernetes there is no namespace or pod
      expect(v, name).toMatchObject({ type: 'query', datasource: DS, definition, query: { query: definition }, multi: true, includeAll: true, allValue: '.*', refresh: 2 })
      expect(v.current.value, name).toEqual(['$__all'])
      if (name !== 'route') expect(v.description, name).toBeTruthy()
    }
  })

  test('rows: traffic, fencing, idempotency, exactly-once risk, store and attempt log, latency, leases, lease service, pods', () => {
    expect(rows.map((r) => r.title)).toEqual(['Traffic', 'Fencing', 'Idempotency', 'Exactly-once risk', 'Store and attempt log', 'Latency', 'Leases', 'Lease service', 'Pods'])
  })

  test('lease service: calls by result, and leases lost to expiry per hour (fencegate_leases_total, contract §3a)', () => {
    const row = inRow('Lease service')
    expect(row.map((p: any) => p.title)).toEqual(['Lease calls by result', 'Leases lost per hour'])
    expect(row[0].targets[0].expr).toBe(`sum by (result) (rate(fencegate_leases_total{${SCOPE}}[$__rate_interval]))`)
    expect(row[1].targets[0].expr).toBe(`sum(rate(fencegate_leases_total{${SCOPE},result="expired"}[$__rate_interval])) * 3600`)
  })

  test('panels do not overlap and fill whole rows of the 24-column grid', () => {
    const cells = new Set<string>()
    const problems: string[] = []
    for (const p of dash.panels) {
      const { x, y, w, h } = p.gridPos
      if (x + w > 24) problems.push(`${p.title}: wider than the grid`)
      for (let i = x; i < x + w; i++) for (let j = y; j < y + h; j++) {
        if (cells.has(`${i},${j}`)) problems.push(`${p.title}: overlaps at ${i},${j}`)
        cells.add(`${i},${j}`)
      }
    }
    expect(problems).toEqual([])
    expect(new Set(dash.panels.map((p: any) => p.id)).size).toBe(dash.panels.length)
  })

  test('every panel: title, description, unit, the datasource variable, $__rate_interval in every range function', () => {
    expect(panels.length).toBeGreaterThanOrEqual(12)
    const problems: string[] = []
    for (const p of panels) {
      const name = p.title || `panel ${p.id}`
      if (!p.title) problems.push(`${name}: no title`)
      if (!p.description) problems.push(`${name}: no description`)
      if (!p.fieldConfig?.defaults?.unit) problems.push(`${name}: no unit`)
      if (JSON.stringify(p.datasource) !== JSON.stringify(DS)) problems.push(`${name}: datasource is not the variable`)
      if (!p.targets?.length) problems.push(`${name}: no query`)
      for (const t of p.targets ?? []) {
        if (JSON.stringify(t.datasource ?? DS) !== JSON.stringify(DS)) problems.push(`${name} ${t.refId}: datasource is not the variable`)
        const expr: string = t.expr
        const ranges = [...expr.matchAll(/\[([^\]]*)\]/g)].map((m) => m[1])
        const fns = expr.match(RANGE_FUNCTIONS) ?? []
        if (ranges.length !== fns.length) problems.push(`${name} ${t.refId}: ${fns.length} range functions, ${ranges.length} range selectors`)
        const allowed = t.instant ? '$__range' : '$__rate_interval'
        for (const r of ranges) if (r !== allowed) problems.push(`${name} ${t.refId}: range [${r}] instead of [${allowed}]`)
        if (!/route=~"\$route"/.test(expr) && !ROUTELESS.test(expr)) problems.push(`${name} ${t.refId}: not filtered by $route`)
        const selectors = [...expr.matchAll(SELECTORS)]
        if (!selectors.length) problems.push(`${name} ${t.refId}: no series selector`)
        for (const [sel, , matchers] of selectors) if (!matchers?.startsWith(`{${SCOPE}`)) problems.push(`${name} ${t.refId}: ${sel} not filtered by $job, $namespace, $pod`)
      }
    }
    expect(problems).toEqual([])
  })

  test('exactly-once risk: unknown outcomes, duplicate forwards, overtaken writes and unresolved unknown outcomes as stat panels, red from 1', () => {
    const row = inRow('Exactly-once risk')
    for (const [title, metric] of [['Unknown outcomes', 'fencegate_unknown_outcomes_total'], ['Duplicate forwards', 'fencegate_duplicate_forwards_total'],
      ['Overtaken writes', 'fencegate_fencing_overtaken_total'], ['Unresolved unknown outcomes', 'fencegate_unknown_outcomes_unresolved']]) {
      const p = row.find((x: any) => x.title === title)
      expect(p, title).toBeDefined()
      expect(p.type).toBe('stat')
      expect(p.targets[0].expr).toContain(metric)
      const steps = p.fieldConfig.defaults.thresholds.steps
      expect(steps[0]).toMatchObject({ color: 'green', value: null })
      expect(steps[1]).toMatchObject({ color: 'red', value: 1 })
    }
  })

  test('the Unknown outcomes and Duplicate forwards panels link to the audit view\'s addresses (contract §5a), at the address the audit_view variable holds', () => {
    const vars = Object.fromEntries(dash.templating.list.map((v: any) => [v.name, v]))
    expect(vars.audit_view).toMatchObject({ type: 'textbox', query: 'http://127.0.0.1:9464' })
    const links = (title: string) => panels.find((p) => p.title === title).fieldConfig.defaults.links.map((l: any) => l.url)
    expect(links('Unknown outcomes')).toEqual(['${audit_view}/ui/unknown'])
    expect(links('Duplicate forwards')).toEqual(['${audit_view}/ui/routes'])
  })

  test('stat panels of counters show whole counts over the time range, and 0 when there is no series', () => {
    const counting = panels.filter((p) => p.type === 'stat' && /_total\b/.test(p.targets[0].expr))
    expect(counting.map((p) => p.title).sort()).toEqual(['Dropped attempt-log entries', 'Duplicate forwards', 'Overtaken writes', 'Unknown outcomes'])
    for (const p of counting) {
      const t = p.targets[0]
      // one instant value: each series' increase over the dashboard's range, rounded (Prometheus
      // extrapolates increase(), so 2 events can read 2.85 unrounded), then summed
      expect(t, p.title).toMatchObject({ instant: true, range: false })
      expect(t.expr, p.title).toMatch(/^sum\(round\(increase\(fencegate_\w+_total(\{[^}]*\})?\[\$__range\]\)\)\)$/)
      expect(p.fieldConfig.defaults, p.title).toMatchObject({ decimals: 0, noValue: '0' })
      expect(p.options.reduceOptions.calcs, p.title).toEqual(['lastNotNull'])
    }
  })

  test('store and attempt log: store up, store state lost, dropped entries, store errors', () => {
    const row = inRow('Store and attempt log')
    const find = (title: string) => { const p = row.find((x: any) => x.title === title); expect(p, title).toBeDefined(); return p }
    const up = find('Store up')
    expect(up.targets[0].expr).toBe(`min by (store) (fencegate_store_up{${SCOPE}})`)
    expect(up.fieldConfig.defaults.mappings[0].options).toMatchObject({ 0: { text: 'down', color: 'red' }, 1: { text: 'up', color: 'green' } })
    const lost = find('Store state lost')
    expect(lost.targets[0].expr).toBe(`max by (store) (fencegate_store_state_lost{${SCOPE}})`)
    expect(lost.fieldConfig.defaults.mappings).toContainEqual(expect.objectContaining({ type: 'range', options: expect.objectContaining({ from: 1, result: expect.objectContaining({ text: 'LOST', color: 'red' }) }) }))
    expect(find('Dropped attempt-log entries').targets[0].expr).toContain('fencegate_audit_dropped_total')
    expect(find('Store errors').targets[0].expr).toContain('fencegate_store_errors_total')
  })

  test('pods: CPU, resident memory, event-loop lag, store clock offset and config reloads per pod, from the process and gateway metrics', () => {
    const row = inRow('Pods')
    const exprs = Object.fromEntries(row.map((p: any) => [p.title, p.targets.map((t: any) => t.expr)]))
    const BY = 'namespace, pod, instance'
    expect(exprs).toEqual({
      'CPU per pod': [`sum by (${BY}) (rate(process_cpu_seconds_total{${SCOPE}}[$__rate_interval]))`],
      'Resident memory per pod': [`sum by (${BY}) (process_resident_memory_bytes{${SCOPE}})`],
      'Event-loop lag p99 per pod': [`max by (${BY}) (nodejs_eventloop_lag_p99_seconds{${SCOPE}})`, `max by (${BY}) (nodejs_eventloop_lag_max_seconds{${SCOPE}})`],
      'Store clock offset per pod': [`max by (${BY}, store) (fencegate_store_clock_offset_seconds{${SCOPE}})`],
      'Config reloads per pod': [`sum by (${BY}, result) (increase(fencegate_config_reloads_total{${SCOPE}}[$__rate_interval]))`],
    })
    expect(row.map((p: any) => p.fieldConfig.defaults.unit)).toEqual(['percentunit', 'bytes', 's', 's', 'short'])
    for (const p of row) expect(p.targets.every((t: any) => t.legendFormat.startsWith('{{pod}} {{instance}}') || t.legendFormat.includes(' {{pod}} {{instance}}')), p.title).toBe(true)
  })

  test('leases: effect duration p50 / p99 / p99.9 of fenced routes beside the configured idempotency.lease, stale lateness, generations per hour', () => {
    const row = inRow('Leases')
    expect(row.map((p: any) => p.title)).toEqual(['Effect duration p50 / p99 / p99.9 vs idempotency.lease', 'Stale writers\' lateness p50 / p99', 'Generations per hour'])
    const [effect, late, gens] = row
    const exprs = effect.targets.map((t: any) => t.expr)
    for (const q of ['0.5', '0.99', '0.999']) {
      // the upstream's answer time, of the fenced routes only (those with a generations counter)
      expect(exprs).toContainEqual(expect.stringMatching(new RegExp(`^histogram_quantile\\(${q.replace('.', '\\.')}, sum by \\(le, route\\) \\(rate\\(fencegate_upstream_duration_seconds_bucket\\{${SCOPE_RE},route=~"\\$route"\\}\\[\\$__rate_interval\\]\\)\\)\\) and on \\(route\\) group by \\(route\\) \\(fencegate_fencing_generations_total`)))
    }
    expect(exprs).toContain(`max by (route) (fencegate_idempotency_lease_seconds{${SCOPE},route=~"$route"})`)
    expect(effect.fieldConfig.defaults.unit).toBe('s')
    expect(effect.fieldConfig.overrides[0].matcher.options).toBe('.*idempotency\\.lease')
    expect(late.targets.map((t: any) => t.expr)).toEqual([0.5, 0.99].map((q) => `histogram_quantile(${q}, sum by (le, route) (rate(fencegate_fencing_stale_lateness_seconds_bucket{${SCOPE},route=~"$route"}[$__rate_interval])))`))
    expect(late.fieldConfig.defaults.unit).toBe('s')
    expect(gens.targets[0].expr).toBe(`sum by (route) (rate(fencegate_fencing_generations_total{${SCOPE},route=~"$route"}[$__rate_interval])) * 3600`)
    for (const p of row) expect(p.description).toMatch(/fencegate leases|how often leases change hands/)
  })

  test('latency: request, upstream and store p50 and p99', () => {
    for (const metric of ['fencegate_request_duration_seconds', 'fencegate_upstream_duration_seconds', 'fencegate_store_duration_seconds']) {
      const exprs = panels.flatMap((p) => p.targets.map((t: any) => t.expr)).filter((e: string) => e.includes(`${metric}_bucket`))
      expect(exprs.some((e: string) => e.startsWith('histogram_quantile(0.5,')), metric).toBe(true)
      expect(exprs.some((e: string) => e.startsWith('histogram_quantile(0.99,')), metric).toBe(true)
    }
  })
})

describe('dashboards/provisioning', () => {
  test('a Prometheus datasource and a file provider, so a stock Grafana shows the dashboard', () => {
    const ds = parse(readFileSync(resolve(ROOT, 'dashboards/provisioning/datasources.yaml'), 'utf8'))
    expect(ds.apiVersion).toBe(1)
    expect(ds.datasources[0]).toMatchObject({ type: 'prometheus', access: 'proxy' })
    const provider = parse(readFileSync(resolve(ROOT, 'dashboards/provisioning/dashboards.yaml'), 'utf8'))
    expect(provider.apiVersion).toBe(1)
    expect(provider.providers[0]).toMatchObject({ type: 'file', options: { path: expect.any(String) } })
  })
})

describe('config/alerts/fencegate.rules.yml and docs/runbook.md', () => {
  const rules: any[] = parse(readFileSync(resolve(ROOT, 'config/alerts/fencegate.rules.yml'), 'utf8')).groups.flatMap((g: any) => g.rules)
  const runbook = readFileSync(resolve(ROOT, 'docs/runbook.md'), 'utf8')
  // GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens
  const slug = (heading: string) => heading.trim().toLowerCase().replace(/[^\p{L}\p{N}\s_-]/gu, '').replace(/\s/g, '-')
  const anchors = new Set([...runbook.matchAll(/^#{1,6} (.+)$/gm)].map((m) => slug(m[1])))

  test('every alert has a runbook_url pointing at an existing section of docs/runbook.md', () => {
    const problems: string[] = []
    for (const r of rules) {
      const url: string | undefined = r.annotations?.runbook_url
      const m = url && /^docs\/runbook\.md#([a-z0-9_-]+)$/.exec(url)
      if (!m) problems.push(`${r.alert}: runbook_url ${JSON.stringify(url)} is not docs/runbook.md#<anchor>`)
      else if (!anchors.has(m[1])) problems.push(`${r.alert}: no section #${m[1]} in docs/runbook.md`)
    }
    expect(problems).toEqual([])
  })

  test('every alert has its own section, named after it; every link inside the runbook resolves', () => {
    const sections = [...runbook.matchAll(/^## (.+)$/gm)].map((m) => m[1])
    expect(sections.sort()).toEqual(rules.map((r) => r.alert).sort())
    for (const r of rules) expect(r.annotations.runbook_url).toBe(`docs/runbook.md#${slug(r.alert)}`)
    const links = [...runbook.matchAll(/\]\(#([^)]+)\)/g)].map((m) => m[1])
    expect(links.filter((l) => !anchors.has(l))).toEqual([])
  })
})

describe('store ops', () => {
  test('every op guardStore times and counts is one the metrics start at 0 (STORE_OPS)', () => {
    const guard = readFileSync(resolve(ROOT, 'src/store/runtime/guard.ts'), 'utf8')
    const ops = [...guard.matchAll(/\b(?:call|givingBack)\(\s*'([a-z_]+)'/g)].map((m) => m[1])
    expect(ops.length).toBeGreaterThanOrEqual(10)
    expect(ops.filter((op) => !(STORE_OPS as readonly string[]).includes(op))).toEqual([])
  })
})
