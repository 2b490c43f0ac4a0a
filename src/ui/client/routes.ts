/**
 * The Routes view (`/ui/routes`): each route with its fencing and idempotency settings
 * (`GET /routes`), its claim as the sentences the audit report generates and the window's counts
 * (`GET /audit`), beside the live store's doctor findings (`GET /doctor`). Counts link to the
 * matching Grafana panel when admin.grafanaUrl is set.
 */
import { fill, getJson, h, status, time } from './lib.js'

interface RouteInfo {
  name: string
  path: string
  methods?: string[]
  fencing?: { resource: string; tokenHeader: string; required: boolean; serialize: string }
  idempotency?: { keyHeader: string; required: boolean; methods: string[]; scoped: boolean; ttlMs: number; leaseMs: number; inFlight: string; unknownOutcome: string }
}
interface Claim { guarantees: string[]; assumptions: string[]; notGuaranteed: string[] }
interface RouteReport {
  route: string; attempts: number; keys: number; forwarded: number; replayed: number; stale: number; tokenMissing: number
  inFlightConflicts: number; keyReused: number; released: number; unknownOutcomes: { resolved: number; unresolved: number }
  duplicateForwards: number; overtaken: number; claim: Claim
}
interface Finding { id: string; status: 'ok' | 'risk' | 'unknown'; setting: string; consequence: string }

/** Count → the dashboard panel (dashboards/fencegate.json ids) that shows it over time. */
const COUNTS: [string, (r: RouteReport) => number, number][] = [
  ['attempts', (r) => r.attempts, 2], ['forwarded', (r) => r.forwarded, 2], ['replayed', (r) => r.replayed, 9],
  ['stale (412)', (r) => r.stale, 6], ['in flight (409)', (r) => r.inFlightConflicts, 9],
  ['unknown, unresolved', (r) => r.unknownOutcomes.unresolved, 23], ['unknown, resolved', (r) => r.unknownOutcomes.resolved, 12],
  ['duplicate forwards', (r) => r.duplicateForwards, 13], ['overtaken', (r) => r.overtaken, 22],
]

function panelLink(grafana: string | undefined, route: string, panel: number, text: string): Node | string {
  if (!grafana) return text
  const u = new URL(grafana)
  u.searchParams.set('var-route', route)
  u.searchParams.set('viewPanel', String(panel))
  return h('a', { href: u.toString(), rel: 'noreferrer' }, text)
}

const list = (title: string, lines: string[]) => lines.length ? [h('h3', {}, title), h('ul', { class: 'claim' }, ...lines.map((l) => h('li', {}, l)))] : []

function settings(r: RouteInfo): HTMLElement {
  const facts: [string, string][] = [['match', `${r.methods?.join(', ') ?? 'any method'} ${r.path}`]]
  if (r.fencing) facts.push(['fencing', `resource ${r.fencing.resource}, token in ${r.fencing.tokenHeader}${r.fencing.required ? ' (required)' : ' (optional)'}, serialize ${r.fencing.serialize}`])
  else facts.push(['fencing', 'off'])
  const i = r.idempotency
  if (i) facts.push(['idempotency', `key in ${i.keyHeader}${i.required ? ' (required)' : ''} on ${i.methods.join(', ')}; lease ${i.leaseMs / 1000} s, ttl ${i.ttlMs / 3_600_000} h; in flight: ${i.inFlight}; unknown outcome: ${i.unknownOutcome}${i.scoped ? '; keys scoped' : ''}`])
  else facts.push(['idempotency', 'off'])
  return h('dl', { class: 'facts' }, ...facts.flatMap(([k, v]) => [h('dt', {}, k), h('dd', {}, v)]))
}

export async function routesView(): Promise<void> {
  status('Reading the routes, their claims and the store\'s settings…')
  const [info, report] = await Promise.all([
    getJson<{ routes: RouteInfo[]; grafanaUrl?: string }>('routes'),
    getJson<{ since: string; until: string; routes: RouteReport[] }>('audit?since=24h'),
  ])
  const doctor = await getJson<{ store: string; target: string; findings: Finding[] }>('doctor').catch((e: Error) => e)
  fill(document.getElementById('store'), doctor instanceof Error
    ? h('p', { class: 'error' }, `The store's settings could not be read: ${doctor.message}`)
    : h('div', {}, h('p', {}, `${doctor.store} store at `, h('code', {}, doctor.target), ':'),
      h('ul', { class: 'claim', id: 'findings' }, ...doctor.findings.map((f) => h('li', { 'data-status': f.status },
        h('span', { class: `badge ${f.status}` }, f.status === 'ok' ? 'OK' : f.status.toUpperCase()), ' ', h('code', {}, f.setting), ` — ${f.consequence}`)))))
  const byName = new Map(info.routes.map((r) => [r.name, r]))
  fill(document.getElementById('routes'), h('p', { class: 'help' }, 'Counts from ', time(report.since), ' to ', time(report.until), info.grafanaUrl ? '; each links to its Grafana panel.' : ' (set admin.grafanaUrl to link them to the dashboard).'),
    ...report.routes.map((r) => {
      const ri = byName.get(r.route)
      return h('section', { class: 'route', 'data-route': r.route, 'aria-labelledby': `route-${r.route}` },
        h('h2', { id: `route-${r.route}` }, `Route ${r.route}`),
        ri ? settings(ri) : h('p', {}, 'Not in the current config.'),
        h('div', { class: 'cols' },
          h('div', {}, h('h3', {}, 'Last 24 hours'), h('table', {}, h('tbody', {}, ...COUNTS.map(([label, get, panel]) =>
            h('tr', {}, h('th', { scope: 'row' }, panelLink(info.grafanaUrl, r.route, panel, label)), h('td', { class: 'num' }, get(r))))))),
          h('div', {}, ...list('Guarantees', r.claim.guarantees), ...list('Assumptions', r.claim.assumptions), ...list('Not guaranteed', r.claim.notGuaranteed))))
    }))
  status('')
}
