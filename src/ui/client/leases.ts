/**
 * The Leases view (`/ui/leases`): per fenced route (`GET /leases`), the effect durations as a
 * small histogram against the configured idempotency lease, the stale writers' lateness, and the
 * advice `fencegate leases` gives, in its words.
 */
import { fill, getJson, h, human, s, status, time } from './lib.js'

interface Histogram { le: number[]; counts: number[] }
interface RouteLeases {
  route: string
  configured: { idempotencyLeaseMs?: number; upstreamTimeoutMs: number }
  effects: { count: number; p50Ms?: number; p99Ms?: number; p999Ms?: number; maxMs?: number; unanswered: number; histogram?: Histogram }
  stale: { count: number; measured: number; latenessP50Ms?: number; latenessP99Ms?: number; latenessMaxMs?: number; histogram?: Histogram }
  advice: { minimumLeaseMs?: number; lines: string[]; warnings: string[] }
}

const bound = (ms: number) => (ms < 1000 ? `${ms} ms` : `${ms / 1000} s`)

/** Bars per bucket; `lineMs` draws a dashed line where that value falls (the lease), when in range or past it. */
function chart(hist: Histogram, label: string, late: boolean, lineMs?: number): SVGElement {
  const n = hist.counts.length + (lineMs !== undefined && lineMs > hist.le[hist.le.length - 1] ? 1 : 0)
  const W = Math.max(220, n * 56 + 20), H = 120, B = 96, top = Math.max(...hist.counts)
  const svg = s('svg', { class: 'chart', viewBox: `0 0 ${W} ${H}`, width: W, role: 'img', 'aria-label': label })
  hist.counts.forEach((c, i) => {
    const bh = (c / top) * 76
    svg.append(s('rect', { class: late ? 'bar late' : 'bar', x: 10 + i * 56, y: B - bh, width: 48, height: bh }, s('title', {}, `${c} at most ${bound(hist.le[i])}`)),
      s('text', { x: 34 + i * 56, y: B - bh - 3, 'text-anchor': 'middle' }, c),
      s('text', { x: 34 + i * 56, y: B + 14, 'text-anchor': 'middle' }, `≤${bound(hist.le[i])}`))
  })
  if (lineMs !== undefined) {
    const i = hist.le.findIndex((b) => lineMs <= b)
    const X = 10 + (i < 0 ? hist.counts.length : i) * 56 + 52
    svg.append(s('line', { class: 'lease', x1: X, x2: X, y1: 8, y2: B }), s('text', { x: X - 3, y: 16, 'text-anchor': 'end' }, `lease ${human(lineMs)}`))
  }
  return svg
}

export async function leasesView(): Promise<void> {
  status('Reading effect durations and stale writes…')
  const r = await getJson<{ since: string; until: string; routes: RouteLeases[]; method: string[] }>('leases?since=24h')
  fill(document.getElementById('leases'),
    h('p', { class: 'help' }, 'From ', time(r.since), ' to ', time(r.until), '.'),
    ...(r.routes.length ? [] : [h('p', {}, 'No route has fencing.')]),
    ...r.routes.map((x) => {
      const e = x.effects, st = x.stale, lease = x.configured.idempotencyLeaseMs
      return h('section', { class: 'route', 'data-route': x.route, 'aria-labelledby': `leases-${x.route}` },
        h('h2', { id: `leases-${x.route}` }, `Route ${x.route}`),
        h('dl', { class: 'facts' },
          h('dt', {}, 'configured'), h('dd', {}, `idempotency.lease ${lease !== undefined ? human(lease) : '(no idempotency)'}, upstream.timeout ${human(x.configured.upstreamTimeoutMs)}`),
          h('dt', {}, 'effects'), h('dd', {}, e.count ? `${e.count} answered: p50 ${human(e.p50Ms!)}, p99 ${human(e.p99Ms!)}, max ${human(e.maxMs!)}${e.unanswered ? `; ${e.unanswered} unanswered` : ''}` : 'none answered'),
          h('dt', {}, 'stale writers'), h('dd', {}, st.measured ? `${st.count} refused, late by p50 ${human(st.latenessP50Ms!)}, p99 ${human(st.latenessP99Ms!)}, max ${human(st.latenessMaxMs!)}` : `${st.count} refused`)),
        h('div', { class: 'cols' },
          e.histogram ? h('figure', {}, chart(e.histogram, `Effect durations of route ${x.route}`, false, lease), h('figcaption', { class: 'help' }, 'Effect durations (send to response headers), against idempotency.lease')) : null,
          st.histogram ? h('figure', {}, chart(st.histogram, `Lateness of stale writes on route ${x.route}`, true), h('figcaption', { class: 'help' }, 'How long after their successor took over stale writes came')) : null),
        h('h3', {}, 'Advice'), h('ul', { class: 'claim' }, ...x.advice.lines.map((l) => h('li', {}, l))),
        ...x.advice.warnings.map((w) => h('p', { class: 'warn' }, w)))
    }),
    h('details', {}, h('summary', {}, 'How the advice is made'), ...r.method.map((m) => h('p', {}, m))))
  status('')
}
