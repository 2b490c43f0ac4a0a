// The Grafana dashboard and its provisioning files, linted (the queries themselves
// run against a real Prometheus in prometheus.test.ts).
import { readFileSync } from 'node:fs'
import { resolve } from 'node:path'
import { describe, expect, test } from 'vitest'
import { parse } from 'yaml'

const ROOT = resolve(import.meta.dirname, '..')
const dash = JSON.parse(readFileSync(resolve(ROOT, 'dashboards/fencegate.json'), 'utf8'))
const rows: any[] = dash.panels.filter((p: any) => p.type === 'row')
const panels: any[] = dash.panels.flatMap((p: any) => (p.type === 'row' ? p.panels ?? [] : [p]))
const DS = { type: 'prometheus', uid: '${datasource}' }

// PromQL functions that take a range vector: each of their selectors must use $__rate_interval
const RANGE_FUNCTIONS = /\b(rate|irate|increase|delta|idelta|deriv|changes|resets|[a-z]+_over_time)\s*\(/g

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

  test('rows: traffic, fencing, idempotency, exactly-once risk, latency', () => {
    expect(rows.map((r) => r.title)).toEqual(['Traffic', 'Fencing', 'Idempotency', 'Exactly-once risk', 'Latency'])
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
        for (const r of ranges) if (r !== '$__rate_interval') problems.push(`${name} ${t.refId}: range [${r}] instead of [$__rate_interval]`)
        if (!/route=~"\$route"/.test(expr) && !/fencegate_store_/.test(expr)) problems.push(`${name} ${t.refId}: not filtered by $route`)
      }
    }
    expect(problems).toEqual([])
  })

  test('exactly-once risk: unknown outcomes, duplicate forwards and overtaken writes as stat panels, red above 0', () => {
    const row = dash.panels.indexOf(rows.find((r) => r.title === 'Exactly-once risk'))
    const next = dash.panels.indexOf(rows.find((r) => r.title === 'Latency'))
    const inRow = dash.panels.slice(row + 1, next)
    for (const [title, metric] of [['Unknown outcomes', 'fencegate_unknown_outcomes_total'], ['Duplicate forwards', 'fencegate_duplicate_forwards_total'], ['Overtaken writes', 'fencegate_fencing_overtaken_total']]) {
      const p = inRow.find((x: any) => x.title === title)
      expect(p, title).toBeDefined()
      expect(p.type).toBe('stat')
      expect(p.targets[0].expr).toContain(metric)
      const steps = p.fieldConfig.defaults.thresholds.steps
      expect(steps[0]).toMatchObject({ color: 'green', value: null })
      expect(steps[1].color).toBe('red')
      expect(steps[1].value).toBeGreaterThan(0)
      expect(steps[1].value).toBeLessThan(0.01)
    }
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
