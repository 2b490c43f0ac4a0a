/**
 * deploy/kubernetes/base/prometheusrule.yaml from config/alerts/*.yml, the one source of the
 * alert rules: a Prometheus Operator PrometheusRule holding the same groups, unchanged. The
 * kustomize base then fills in the runbook base and the job selector (its kustomization.yaml,
 * `replacements`). Run after changing an alert: `npm run build && node dist/scripts/prometheus-rule.js`;
 * test/kubernetes.test.ts fails while the file is not up to date.
 */
import { readdirSync, readFileSync, writeFileSync } from 'node:fs'
import { join, resolve } from 'node:path'
import { parse, stringify } from 'yaml'
import { isMain } from '../examples/is-main.js'

const ROOT = resolve(import.meta.dirname, '..', import.meta.dirname.includes('/dist/') ? '..' : '')
export const ALERTS_DIR = join(ROOT, 'config/alerts')
export const RULE_FILE = join(ROOT, 'deploy/kubernetes/base/prometheusrule.yaml')

/** The groups of every `config/alerts/*.yml`, in file name order. */
export function alertGroups(dir = ALERTS_DIR): unknown[] {
  return readdirSync(dir).filter((f) => /\.ya?ml$/.test(f)).sort()
    .flatMap((f) => (parse(readFileSync(join(dir, f), 'utf8')) as { groups: unknown[] }).groups)
}

/** The text of prometheusrule.yaml: a header saying where it comes from, then the object. */
export function prometheusRule(dir = ALERTS_DIR): string {
  const rule = {
    apiVersion: 'monitoring.coreos.com/v1',
    kind: 'PrometheusRule',
    metadata: { name: 'fencegate', labels: { 'app.kubernetes.io/name': 'fencegate' } },
    spec: { groups: alertGroups(dir) },
  }
  return `# Generated from config/alerts/*.yml by scripts/prometheus-rule.ts: do not edit, edit those.\n${stringify(rule, { lineWidth: 0 })}`
}

if (isMain(import.meta.url)) {
  writeFileSync(RULE_FILE, prometheusRule())
  process.stdout.write(`${RULE_FILE} written\n`)
}
