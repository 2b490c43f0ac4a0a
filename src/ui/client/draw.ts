/**
 * Draws a timeline (`GET /audit/timeline`) as SVG: time left to right on a real scale; one lane
 * per actor (each fencing token, else each request), where each attempt is its request's span
 * and a mark of what the gateway decided; the token's tenure (from its first accepted write to
 * its successor's) as a band under its lane; the high-water mark over time; what reached the
 * upstream; and operators' resolutions. Outcomes differ in colour and in shape.
 */
import { h, human, s } from './lib.js'

/** An attempt-log entry as the admin API gives it (src/store/attempt-log/types.ts, time as RFC 3339). */
export interface Entry {
  time: string
  kind: 'attempt' | 'resolve' | 'accept-loss'
  replica: string
  route: string
  method?: string
  resource?: string
  token?: string
  keyHash?: string
  outcome?: string
  result?: string
  unknown?: string
  abandoned?: boolean
  duplicate?: boolean
  overtaken?: boolean
  status?: number
  upstreamStatus?: number
  durationMs?: number
  upstreamMs?: number
  lateMs?: number
  highestToken?: string
  traceId?: string
  requestId?: string
  resolution?: string
  reason?: string
  by?: string
}

/** The kind of mark an entry gets: its CSS class `o-<kind>` and its shape. */
export type MarkKind = 'forwarded' | 'replayed' | 'stale' | 'in_flight' | 'unknown' | 'duplicate' | 'overtaken' | 'refused' | 'resolve'

export const MARKS: Record<MarkKind, { shape: string; label: string }> = {
  forwarded: { shape: 'circle', label: 'forwarded, answered' },
  replayed: { shape: 'square', label: 'replayed (upstream not called)' },
  stale: { shape: 'cross', label: '412 stale token' },
  in_flight: { shape: 'triangle', label: '409 in flight' },
  unknown: { shape: 'diamond', label: 'outcome unknown' },
  duplicate: { shape: 'ring', label: 'duplicate forward' },
  overtaken: { shape: 'triangle-down', label: 'overtaken' },
  refused: { shape: 'bar', label: 'other refusal' },
  resolve: { shape: 'star', label: 'operator resolved' },
}

export function markKind(e: Entry): MarkKind {
  if (e.kind !== 'attempt') return 'resolve'
  if (e.duplicate) return 'duplicate'
  if (e.unknown || e.outcome === 'outcome_unknown') return 'unknown'
  if (e.overtaken) return 'overtaken'
  if (e.outcome === 'forwarded' || e.outcome === 'replayed' || e.outcome === 'stale' || e.outcome === 'in_flight') return e.outcome
  return 'refused'
}

/** One mark's shape centred on (x, y), radius r. */
export function shape(kind: MarkKind, x: number, y: number, r = 7): SVGElement {
  const cls = `o-${kind}`
  const pts = (p: [number, number][]) => p.map(([a, b]) => `${x + a * r},${y + b * r}`).join(' ')
  switch (MARKS[kind].shape) {
    case 'circle': return s('circle', { class: cls, cx: x, cy: y, r })
    case 'square': return s('rect', { class: cls, x: x - r, y: y - r, width: 2 * r, height: 2 * r })
    case 'cross': return s('path', { class: cls, d: `M${x - r} ${y - r}L${x + r} ${y + r}M${x - r} ${y + r}L${x + r} ${y - r}` })
    case 'triangle': return s('polygon', { class: cls, points: pts([[0, -1.15], [1.1, 0.8], [-1.1, 0.8]]) })
    case 'triangle-down': return s('polygon', { class: cls, points: pts([[0, 1.15], [1.1, -0.8], [-1.1, -0.8]]) })
    case 'diamond': return s('polygon', { class: cls, points: pts([[0, -1.25], [1.25, 0], [0, 1.25], [-1.25, 0]]) })
    case 'ring': return s('g', { class: cls }, s('circle', { cx: x, cy: y, r }), s('circle', { cx: x, cy: y, r: r / 3 }))
    case 'star': return s('polygon', { class: cls, points: pts([0, 1, 2, 3, 4, 5, 6, 7, 8, 9].map((i): [number, number] => { const a = (Math.PI / 5) * i - Math.PI / 2; const k = i % 2 ? 0.45 : 1.2; return [k * Math.cos(a), k * Math.sin(a)] })) })
    default: return s('rect', { class: cls, x: x - r, y: y - r / 3, width: 2 * r, height: (2 * r) / 3 })
  }
}

/** The legend: each mark's shape and colour, in words. */
export function legend(): HTMLElement {
  return h('ul', { class: 'legend', 'aria-label': 'Legend' }, ...(Object.keys(MARKS) as MarkKind[]).map((k) =>
    h('li', {}, (() => { const v = s('svg', { width: 18, height: 18, viewBox: '0 0 18 18', 'aria-hidden': 'true' }); v.append(shape(k, 9, 9, 6)); return v })(), ` ${MARKS[k].label}`)))
}

const ACCEPTED = (e: Entry) => e.kind === 'attempt' && e.token !== undefined && e.outcome !== 'stale' && e.outcome !== 'token_missing' && e.outcome !== 'token_malformed'

/** The words of an attempt's mark: status, decision, and what made it notable. */
export function describe(e: Entry): string {
  if (e.kind === 'resolve') return `resolved as ${e.resolution}${e.reason ? `: ${e.reason}` : ''}`
  if (e.kind === 'accept-loss') return 'store state loss accepted'
  const bits = [e.status !== undefined ? String(e.status) : '', e.outcome === 'outcome_unknown' ? 'refused, outcome unknown' : (e.outcome ?? '').replace('_', ' ')]
  if (e.unknown) bits.push(`unknown (${e.unknown})`)
  if (e.duplicate) bits.push('duplicate forward')
  if (e.overtaken) bits.push('overtaken')
  if (e.abandoned) bits.push('found abandoned')
  if (e.outcome === 'stale' && e.lateMs !== undefined) bits.push(`${human(e.lateMs)} after token ${e.highestToken ?? '?'} took over`)
  return bits.filter(Boolean).join(' ')
}

const actorOf = (e: Entry): string =>
  e.kind !== 'attempt' ? 'operator' : e.token !== undefined ? `token ${e.token}` : e.requestId ? `request ${e.requestId.slice(0, 8)}` : `replica ${e.replica}`

/** A tick step of about `span / 6` on a 1-2-5 scale, ms. */
function step(span: number): number {
  const raw = span / 6
  const p = 10 ** Math.floor(Math.log10(Math.max(raw, 1e-3)))
  return [1, 2, 5, 10].map((m) => m * p).find((v) => v >= raw) ?? 10 * p
}

const CLOCK = new Intl.DateTimeFormat(undefined, { hour: '2-digit', minute: '2-digit', second: '2-digit' })
const CLOCK_MS = new Intl.DateTimeFormat(undefined, { hour: '2-digit', minute: '2-digit', second: '2-digit', fractionalSecondDigits: 3 } as Intl.DateTimeFormatOptions)
const clock = (t: number, withMs: boolean) => (withMs ? CLOCK_MS : CLOCK).format(t)

/** The timeline's SVG, or a paragraph when there is nothing to draw. */
export function drawTimeline(entries: readonly Entry[], title: string): Element {
  if (!entries.length) return h('p', {}, 'No attempts in the window.')
  const W = 1000, L = 130, R = 24, TOP = 34, LANE = 46
  const at = (e: Entry) => Date.parse(e.time)
  const start = (e: Entry) => at(e) - (e.durationMs ?? 0)
  const t0 = Math.min(...entries.map(start)), t1 = Math.max(...entries.map(at))
  const pad = Math.max((t1 - t0) * 0.05, 2)
  const d0 = t0 - pad, d1 = t1 + pad
  const x = (t: number) => L + ((t - d0) / (d1 - d0)) * (W - L - R)

  const actors: string[] = []
  for (const e of entries) { const a = actorOf(e); if (a !== 'operator' && !actors.includes(a)) actors.push(a) }
  const fenced = entries.some(ACCEPTED)
  const lanes = [...actors, ...(fenced ? ['high-water mark'] : []), 'upstream', ...(entries.some((e) => e.kind !== 'attempt') ? ['operator'] : [])]
  const laneY = (name: string) => TOP + lanes.indexOf(name) * LANE + LANE / 2
  const H = TOP + lanes.length * LANE + 8

  const svg = s('svg', { class: 'timeline', viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-labelledby': 'tl-title tl-desc' },
    s('title', { id: 'tl-title' }, title),
    s('desc', { id: 'tl-desc' }, `${entries.length} entries, oldest on the left; lanes: ${lanes.join(', ')}`))

  // time axis: ticks in the viewer's zone, the UTC time on hover
  const tick = step(d1 - d0)
  const axis = s('g', { class: 'axis' })
  for (let t = Math.ceil(d0 / tick) * tick; t <= d1; t += tick) {
    axis.append(s('line', { x1: x(t), x2: x(t), y1: TOP - 6, y2: H - 6, class: 'grid' }))
    if (x(t) < W - 60) axis.append(s('text', { x: x(t), y: TOP - 12, 'text-anchor': 'middle' }, s('title', {}, `${new Date(t).toISOString()} (UTC)`), clock(t, tick < 1000)))
  }
  svg.append(axis)

  lanes.forEach((name, i) => {
    const y = TOP + i * LANE
    svg.append(s('g', { class: 'lane', 'data-lane': name },
      i % 2 ? s('rect', { class: 'lane-bg', x: 0, y, width: W, height: LANE }) : null,
      s('text', { class: 'lane-label', x: 8, y: y + LANE / 2 + 4 }, name)))
  })

  // each token's tenure: from its first accepted write to its successor's first
  const firsts = new Map<string, number>()
  for (const e of entries) if (ACCEPTED(e) && !firsts.has(e.token!)) firsts.set(e.token!, start(e))
  const order = [...firsts.keys()].sort((a, b) => (BigInt(a) < BigInt(b) ? -1 : 1))
  order.forEach((tok, i) => {
    const from = firsts.get(tok)!, next = order[i + 1], to = next !== undefined ? firsts.get(next)! : d1
    const y = laneY(`token ${tok}`) - LANE / 2 + 3
    svg.append(s('rect', { class: 'tenure', x: x(from), y, width: Math.max(2, x(to) - x(from)), height: LANE - 6, 'data-tenure': tok },
      s('title', {}, next !== undefined ? `token ${tok} held the resource until token ${next} was first accepted (${human(to - from)})` : `token ${tok}: the newest generation in this timeline`)))
  })

  // the high-water mark: a step up at each newer token's first acceptance
  if (fenced) {
    const y0 = laneY('high-water mark')
    const level = (tok: string) => y0 + 12 - (order.indexOf(tok) / Math.max(order.length - 1, 1)) * 24
    let d = ''
    const steps = s('g', { class: 'mark-steps' })
    order.forEach((tok, i) => {
      const X = x(firsts.get(tok)!), Y = level(tok)
      d += i === 0 ? `M${X} ${Y}` : `H${X}V${Y}`
      steps.append(s('text', { x: X + 3, y: Y - 4, 'data-mark': tok }, tok))
    })
    d += `H${x(d1)}`
    svg.append(s('path', { class: 'mark-line', d }), steps)
  }

  const marks = s('g', { class: 'marks' })
  /** per lane, where the last label above its marks ends: a label that would overlap goes below */
  const taken = new Map<string, number>()
  for (const e of entries) {
    const kind = markKind(e)
    const actor = actorOf(e)
    const y = laneY(actor)
    const X = x(at(e))
    const words = describe(e)
    const g = s('g', { class: 'attempt', 'data-outcome': kind, 'data-lane': actor, 'data-time': e.time, tabindex: 0, role: 'img', 'aria-label': `${actor}: ${words}, ${e.time}` },
      s('title', {}, `${e.time} (UTC)\n${actor}: ${words}${e.requestId ? `\nrequest ${e.requestId}` : ''}${e.traceId ? `\ntrace ${e.traceId}` : ''}${e.by ? `\nby ${e.by}` : ''}`))
    if (e.kind === 'attempt') g.append(s('rect', { class: 'req', x: x(start(e)), y: y - 2, width: Math.max(1, X - x(start(e))), height: 4 }))
    const wide = words.length * 6.6
    const anchor = X > W - wide / 2 - R ? 'end' : X < L + wide / 2 ? 'start' : 'middle'
    const left = anchor === 'end' ? X - wide : anchor === 'start' ? X : X - wide / 2
    const below = left < (taken.get(actor) ?? -Infinity)
    if (!below) taken.set(actor, left + wide + 6)
    if (e.outcome === 'stale' && e.lateMs !== undefined) {
      // how long after its successor took over the stale write came (supersededForMs)
      g.append(s('line', { class: 'late o-stale', x1: x(at(e) - e.lateMs), x2: X, y1: y, y2: y }))
    }
    g.append(shape(kind, X, y), s('text', { x: X, y: below ? y + 21 : y - 11, 'text-anchor': anchor }, words))
    marks.append(g)
    // what reached the upstream: the effect's span (answered, unknown, or a duplicate)
    if (e.kind === 'attempt' && (e.upstreamMs !== undefined || e.unknown || e.duplicate)) {
      const uy = laneY('upstream')
      const from = e.upstreamMs !== undefined ? at(e) - e.upstreamMs : start(e)
      const cls = e.duplicate ? 'effect duplicate' : e.unknown ? 'effect unknown' : 'effect'
      const label = e.unknown ? `? ${e.unknown}` : e.duplicate ? `${e.upstreamStatus ?? '?'} again` : String(e.upstreamStatus ?? '')
      marks.append(s('g', { class: 'upstream', 'data-upstream': e.unknown ? 'unknown' : e.duplicate ? 'duplicate' : 'answered', 'data-time': e.time },
        s('line', { class: 'link', x1: X, x2: X, y1: y + 8, y2: uy - 7 }),
        s('rect', { class: cls, x: x(from), y: uy - 6, width: Math.max(3, X - x(from)), height: 12 }),
        s('text', { x: X + 5, y: uy + 4 }, label)))
    }
  }
  svg.append(marks)
  return h('div', { class: 'scroll', tabindex: 0, 'aria-label': 'Timeline, scrolls sideways' }, svg)
}
