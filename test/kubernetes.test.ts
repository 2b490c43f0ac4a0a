// The Kubernetes kit (deploy/kubernetes/) as `kubectl kustomize` renders it, base and overlays:
// the config in its ConfigMap is one `fencegate check-config` accepts, the probes and ports are
// the config's, the grace period covers preStop and shutdown.grace, the admin port is reachable
// only from the monitoring namespace, and the PrometheusRule holds config/alerts/*.yml's rules
// (generated, up to date, with the runbook base and job filled in) and passes promtool.
import { spawnSync } from 'node:child_process'
import { readFileSync, rmSync, writeFileSync } from 'node:fs'
import { join, resolve } from 'node:path'
import { afterAll, beforeAll, describe, expect, test } from 'vitest'
import { parse, parseAllDocuments, stringify } from 'yaml'
import { parseConfig } from '../src/config/load.js'
import { prometheusRule, alertGroups, RULE_FILE } from '../scripts/prometheus-rule.js'
import { tempDir } from './helpers/gateway.js'
import { output, runCli } from './helpers/run.js'
import { promtool, requireBinary } from './helpers/prometheus.js'

const KIT = resolve(import.meta.dirname, '../deploy/kubernetes')
const dir = tempDir('fg-kube-')
afterAll(() => rmSync(dir, { recursive: true, force: true }))

beforeAll(() => {
  const r = spawnSync('kubectl', ['version', '--client'], { encoding: 'utf8' })
  if (r.error || r.status !== 0) throw new Error(`kubectl is not installed (${r.error?.message ?? r.stderr}): install it (apt-get install -y kubectl), as .ci/run does; these tests render the kit with its kustomize`)
  requireBinary('promtool')
})

type Obj = { kind: string; metadata: { name: string; labels?: Record<string, string> }; [k: string]: any }
const render = async (path: string): Promise<Obj[]> =>
  parseAllDocuments(await output('kubectl', ['kustomize', join(KIT, path)])).map((d) => d.toJS() as Obj)
const one = (objs: Obj[], kind: string) => { const found = objs.filter((o) => o.kind === kind); expect(found, kind).toHaveLength(1); return found[0] }
const port = (listen: string) => Number(listen.slice(listen.lastIndexOf(':') + 1))
/** The environment the pod gets: the Secret's values and the container's env. */
const podEnv = (objs: Obj[]): Record<string, string> =>
  ({ ...one(objs, 'Secret').stringData, ...Object.fromEntries(one(objs, 'Deployment').spec.template.spec.containers[0].env.map((e: any) => [e.name, e.value])) })

test('the generated PrometheusRule is up to date with config/alerts/*.yml (node dist/scripts/prometheus-rule.js)', () => {
  expect(readFileSync(RULE_FILE, 'utf8')).toBe(prometheusRule())
})

describe.each(['base', 'overlays/redis-sentinel', 'overlays/postgres'])('%s', (path) => {
  let objs: Obj[]
  beforeAll(async () => { objs = await render(path) })

  test('holds each object once, all labelled app.kubernetes.io/name: fencegate', () => {
    expect(objs.map((o) => o.kind).sort()).toEqual(['ConfigMap', 'Deployment', 'NetworkPolicy', 'PodDisruptionBudget', 'PrometheusRule', 'Secret', 'Service', 'ServiceMonitor'])
    for (const o of objs) expect(o.metadata.labels?.['app.kubernetes.io/name'], `${o.kind} ${o.metadata.name}`).toBe('fencegate')
  })

  test('the config is one check-config accepts without a warning, with admin.readiness: serving', async () => {
    const deployment = one(objs, 'Deployment')
    const configMap = one(objs, 'ConfigMap')
    expect(deployment.spec.template.spec.volumes.find((v: any) => v.name === 'config').configMap.name).toBe(configMap.metadata.name)
    const file = join(dir, `${path.replace('/', '-')}.yaml`)
    writeFileSync(file, configMap.data['fencegate.yaml'])
    const env = podEnv(objs)
    const r = await runCli(['check-config', '--config', file], { env: { ...process.env, ...env } })
    expect(r.stderr).toBe('')
    expect(r.status).toBe(0)
    expect(parseConfig(configMap.data['fencegate.yaml'], file, env).admin.readiness).toBe('serving')
  })

  test('probes, ports, grace period, resources and security context', () => {
    const deployment = one(objs, 'Deployment')
    const pod = deployment.spec.template.spec
    const container = pod.containers[0]
    const config = parseConfig(one(objs, 'ConfigMap').data['fencegate.yaml'], join(dir, 'x.yaml'), podEnv(objs))
    expect(deployment.spec.replicas).toBe(3)
    const ports = Object.fromEntries(container.ports.map((p: any) => [p.name, p.containerPort]))
    expect(ports).toEqual({ http: port(config.listen), admin: port(config.admin.listen) })
    expect(container.livenessProbe.httpGet).toEqual({ path: '/healthz', port: 'admin' })
    expect(container.readinessProbe.httpGet).toEqual({ path: '/readyz', port: 'admin' })
    expect(container.args).toEqual(['start', '--config', `${container.volumeMounts.find((m: any) => m.name === 'config').mountPath}/fencegate.yaml`])
    // the kubelet's SIGKILL comes terminationGracePeriodSeconds after preStop starts
    const [sleep, wait] = container.lifecycle.preStop.exec.command
    expect(sleep).toBe('sleep')
    expect(pod.terminationGracePeriodSeconds).toBeGreaterThanOrEqual(Number(wait) + config.shutdown.grace / 1000)
    expect(container.resources.requests).toMatchObject({ cpu: expect.any(String), memory: expect.any(String) })
    expect(container.resources.limits).toMatchObject({ cpu: expect.any(String), memory: expect.any(String) })
    expect(pod.securityContext.runAsNonRoot).toBe(true)
    expect(container.securityContext).toMatchObject({ readOnlyRootFilesystem: true, allowPrivilegeEscalation: false })
  })

  test('the Service, budget and NetworkPolicy select the pods; the admin port only from the monitoring namespace', () => {
    const labels = one(objs, 'Deployment').spec.template.metadata.labels
    const selects = (sel: Record<string, string>) => Object.entries(sel).every(([k, v]) => labels[k] === v)
    const service = one(objs, 'Service')
    expect(selects(service.spec.selector)).toBe(true)
    expect(service.spec.ports.map((p: any) => p.targetPort).sort()).toEqual(['admin', 'http'])
    expect(selects(one(objs, 'PodDisruptionBudget').spec.selector.matchLabels)).toBe(true)
    const policy = one(objs, 'NetworkPolicy')
    expect(selects(policy.spec.podSelector.matchLabels)).toBe(true)
    const admin = policy.spec.ingress.filter((r: any) => r.ports.some((p: any) => p.port === 'admin'))
    expect(admin).toEqual([{ from: [{ namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': 'monitoring' } } }], ports: [{ port: 'admin', protocol: 'TCP' }] }])
    // the proxy port's rule does not open the admin port
    for (const r of policy.spec.ingress) if (!r.from) expect(r.ports.map((p: any) => p.port)).toEqual(['http'])
  })

  test('the ServiceMonitor scrapes the admin port with the read token; the Secret holds every credential', () => {
    const secret = one(objs, 'Secret')
    expect(Object.keys(secret.stringData).sort()).toEqual(['FENCEGATE_ADMIN_TOKEN', 'FENCEGATE_ADMIN_WRITE_TOKEN', 'FENCEGATE_LEASE_TOKEN', 'FENCEGATE_STORE_URL'])
    const monitor = one(objs, 'ServiceMonitor')
    expect(monitor.spec.selector.matchLabels).toMatchObject(one(objs, 'Service').metadata.labels ?? {})
    expect(monitor.spec.endpoints).toEqual([expect.objectContaining({ port: 'admin', path: '/metrics', authorization: { type: 'Bearer', credentials: { name: secret.metadata.name, key: 'FENCEGATE_ADMIN_TOKEN' } } })])
  })

  test('the PrometheusRule is config/alerts with the runbook base and job of alerting.yaml, and promtool passes it', async () => {
    const params = parse(readFileSync(join(KIT, 'base/alerting.yaml'), 'utf8')).data
    const rendered = one(objs, 'PrometheusRule').spec.groups
    // what the kit fills in, put back: the rest must be config/alerts exactly
    const back = JSON.parse(JSON.stringify(rendered, (k, v) => {
      if (k === 'runbook_url') { expect(v.startsWith(`${params.runbook}#`)).toBe(true); return v.replace(params.runbook, 'docs/runbook.md') }
      if (k === 'expr' && typeof v === 'string') return v.replaceAll(`job="${params.job}"`, 'job="fencegate"')
      return v
    }))
    expect(back).toEqual(alertGroups())
    const file = join(dir, `${path.replace('/', '-')}-rules.yml`)
    writeFileSync(file, stringify({ groups: rendered }))
    const r = await promtool(['check', 'rules', file])
    expect(r.output).toMatch(/SUCCESS/)
    expect(r.status).toBe(0)
  })
})
