/**
 * Draws a timeline (`GET /audit/timeline`) as SVG: time left to right on a real scale, stretched
 * where marks would touch and broken where nothing happens for long (axis.ts); one lane
 * per actor (each fencing token, else each request), where each attempt is its request's span
 * and a mark of what the gateway decided; the token's tenure (from its first accepted write to
 * its successor's) as a band under its lane; the high-water mark over time; what reached the
 * upstream; and operators' resolutions. Outcomes differ in colour and in shape.
 */
import { breakLegend, drawAxis, timeScale } from './axis.js'
import { laneExtent, rowOffset, rows, textWidth } from './labels.js'
import { h, human, s } from './lib.js'

/** An attempt-log entry as the admin API gives it (src/store/attempt-log/types.ts, time as RFC 3339). */
export interface Entry {
  time: string
  /** `probe`: an `idempotency.settle` probe (`result` its answer); a settlement by probe is a `resolve` with `by` "probe" */
  kind: 'attempt' | 'resolve' | 'accept-loss' | 'probe' | 'lease'
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
  /** kind `lease`: when the lease ends (granted, renewed, held) or ended (released, expired), epoch ms */
  leaseUntil?: number
}

/** The kind of mark an entry gets: its CSS class `o-<kind>` and its shape. */
export type MarkKind = 'lease' | 'forwarded' | 'replayed' | 'stale' | 'in_flight' | 'unknown' | 'duplicate' | 'overtaken' | 'refused' | 'probe' | 'settled' | 'resolve'

export const MARKS: Record<MarkKind, { shape: string; label: string }> = {
  lease: { shape: 'bar', label: 'lease service: granted, renewed, released, expired, held (409), stale (412)' },
  forwarded: { shape: 'circle', label: 'forwarded, answered' },
  replayed: { shape: 'square', label: 'replayed (upstream not called)' },
  stale: { shape: 'cross', label: '412 stale token' },
  in_flight: { shape: 'triangle', label: '409 in flight' },
  unknown: { shape: 'diamond', label: 'outcome unknown' },
  duplicate: { shape: 'ring', label: 'duplicate forward' },
  overtaken: { shape: 'triangle-down', label: 'overtaken' },
  refused: { shape: 'bar', label: 'other refusal' },
  probe: { shape: 'triangle-right', label: 'settle probe asked the resource' },
  settled: { shape: 'pentagon', label: 'settled by probe' },
  resolve: { shape: 'star', label: 'operator resolved' },
}

export function markKind(e: Entry): MarkKind {
  if (e.kind === 'lease') return e.result === 'stale' ? 'stale' : e.result === 'held' ? 'in_flight' : 'lease'
  if (e.kind === 'probe') return 'probe'
  if (e.kind === 'resolve' && e.by === 'probe') return 'settled'
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
    case 'triangle-right': return s('polygon', { class: cls, points: pts([[1.2, 0], [-0.8, 1.1], [-0.8, -1.1]]) })
    case 'pentagon': return s('polygon', { class: cls, points: pts([0, 1, 2, 3, 4].map((i): [number, number] => { const a = (2 * Math.PI / 5) * i - Math.PI / 2; return [1.15 * Math.cos(a), 1.15 * Math.sin(a)] })) })
    case 'diamond': return s('polygon', { class: cls, points: pts([[0, -1.25], [1.25, 0], [0, 1.25], [-1.25, 0]]) })
    case 'ring': return s('g', { class: cls }, s('circle', { cx: x, cy: y, r }), s('circle', { cx: x, cy: y, r: r / 3 }))
    case 'star': return s('polygon', { class: cls, points: pts([0, 1, 2, 3, 4, 5, 6, 7, 8, 9].map((i): [number, number] => { const a = (Math.PI / 5) * i - Math.PI / 2; const k = i % 2 ? 0.45 : 1.2; return [k * Math.cos(a), k * Math.sin(a)] })) })
    default: return s('rect', { class: cls, x: x - r, y: y - r / 3, width: 2 * r, height: (2 * r) / 3 })
  }
}

/** The legend: each mark's shape and colour, in words. */
export function legend(): HTMLElement {
  const swatch = (...kids: SVGElement[]) => { const v = s('svg', { width: 18, height: 18, viewBox: '0 0 18 18', 'aria-hidden': 'true' }); v.append(...kids); return v }
  return h('ul', { class: 'legend', 'aria-label': 'Legend' },
    ...(Object.keys(MARKS) as MarkKind[]).map((k) => h('li', { 'data-legend': k }, swatch(shape(k, 9, 9, 6)), ` ${MARKS[k].label}`)),
    h('li', { 'data-legend': 'tenure' }, swatch(s('rect', { class: 'tenure', x: 1, y: 3, width: 16, height: 12 })), " dashed box: a fencing token's lease on the resource, from its first accepted write to its successor's"),
    h('li', { 'data-legend': 'lease-bar' }, swatch(s('rect', { class: 'lease-bar', x: 1, y: 7, width: 16, height: 4 })), ' solid bar: the lease the lease service granted the token, from its grant to its end (renewals extend it, a release or a takeover ends it)'),
    h('li', { 'data-legend': 'effect' }, swatch(s('rect', { class: 'effect', x: 1, y: 6, width: 16, height: 6 })), ' upstream lane: the time the upstream took; light: no answer (outcome unknown)'),
    breakLegend())
}

const ACCEPTED = (e: Entry) => (e.kind === 'lease' && e.result === 'granted') || e.kind === 'attempt' && e.token !== undefined && e.outcome !== 'stale' && e.outcome !== 'token_missing' && e.outcome !== 'token_malformed'

/** The words of an attempt's mark: status, decision, and what made it notable. */
export function describe(e: Entry): string {
  if (e.kind === 'probe') return `probe: ${e.upstreamStatus !== undefined ? `${e.upstreamStatus} ` : ''}${(e.result ?? '?').replace('_', ' ')}`
  if (e.kind === 'resolve' && e.by === 'probe') return `settled as ${e.resolution === 'completed' ? 'applied' : 'not applied'} (${e.upstreamStatus ?? '?'})`
  if (e.kind === 'resolve') return `resolved as ${e.resolution}${e.reason ? `: ${e.reason}` : ''}`
  if (e.kind === 'accept-loss') return 'store state loss accepted'
  if (e.kind === 'lease') return `lease ${e.result ?? '?'}${e.by && e.result !== 'stale' ? ` (${e.by})` : ''}${e.result === 'stale' && e.highestToken ? `: token ${e.highestToken} holds it` : ''}`
  const bits = [e.status !== undefined ? String(e.status) : '', e.outcome === 'outcome_unknown' ? 'refused, outcome unknown' : (e.outcome ?? '').replace('_', ' ')]
  if (e.unknown) bits.push(`unknown (${e.unknown})`)
  if (e.duplicate) bits.push('duplicate forward')
  if (e.overtaken) bits.push('overtaken')
  if (e.abandoned) bits.push('found abandoned')
  if (e.outcome === 'stale' && e.lateMs !== undefined) bits.push(`${human(e.lateMs)} after token ${e.highestToken ?? '?'} took over`)
  return bits.filter(Boolean).join(' ')
}

/**
 * What tells one request id from the others on the same timeline: the gateway's own ids share a
 * per-process base (src/ids.ts) and differ in their last 12 hex digits, a counter; an id a
 * client sent (x-request-id) is shown whole up to 20 characters, else its last 16.
 */
export function idTail(id: string): string {
  if (OWN_ID.test(id)) return `…${id.slice(-12)}`
  return id.length > 20 ? `…${id.slice(-16)}` : id
}
const OWN_ID = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/

const actorOf = (e: Entry): string =>
  e.kind === 'lease' ? `token ${e.token ?? '?'}` : e.kind === 'probe' || (e.kind === 'resolve' && e.by === 'probe') ? 'settle probes' : e.kind !== 'attempt' ? 'operator' : e.token !== undefined ? `token ${e.token}` : e.requestId ? `request ${idTail(e.requestId)}` : `replica ${e.replica}`

const UPSTREAM_ROW = 15

/** The timeline's SVG, or a paragraph when there is nothing to draw. */
export function drawTimeline(entries: readonly Entry[], title: string): Element {
  if (!entries.length) return h('p', {}, 'No attempts in the window.')
  const L = 130, R = 24, TOP = 40, ROOM = 1000 - L - R
  const at = (e: Entry) => Date.parse(e.time)
  const start = (e: Entry) => at(e) - (e.durationMs ?? 0)
  const upFrom = (e: Entry) => (e.upstreamMs !== undefined ? at(e) - e.upstreamMs : start(e))
  const sc = timeScale(entries.flatMap((e) => [{ t: at(e), mark: true }, { t: start(e), mark: false }, ...(e.leaseUntil !== undefined ? [{ t: e.leaseUntil, mark: false }] : [])]), L, ROOM)
  const x = sc.x
  const W = sc.end + R

  const actors: string[] = []
  for (const e of entries) { const a = actorOf(e); if (a !== 'operator' && a !== 'settle probes' && !actors.includes(a)) actors.push(a) }
  const fenced = entries.some(ACCEPTED)
  const lanes = [...actors, ...(fenced ? ['high-water mark'] : []), 'upstream', ...(entries.some((e) => actorOf(e) === 'settle probes') ? ['settle probes'] : []), ...(entries.some((e) => actorOf(e) === 'operator') ? ['operator'] : [])]
  const reachedUpstream = (e: Entry) => e.kind === 'attempt' && (e.upstreamMs !== undefined || e.unknown || e.duplicate)
  const upstreamLabel = (e: Entry) => (e.unknown ? `? ${e.unknown}` : e.duplicate ? `${e.upstreamStatus ?? '?'} again` : String(e.upstreamStatus ?? ''))

  // words first: each label's row in its lane, so every lane is as tall as its rows
  const placed = entries.map((e) => {
    const X = x(at(e)), words = describe(e), wide = textWidth(words)
    const anchor = X > W - wide / 2 - R ? 'end' : X < L + wide / 2 ? 'start' : 'middle'
    const left = anchor === 'end' ? X - wide : anchor === 'start' ? X : X - wide / 2
    return { e, X, words, anchor, span: { left, right: left + wide } }
  })
  const rowOf = new Map<Entry, number>(), upRowOf = new Map<Entry, number>()
  const rowsIn = new Map<string, number>()
  for (const lane of lanes) {
    const here = placed.filter((p) => (lane === 'upstream' ? reachedUpstream(p.e) : actorOf(p.e) === lane))
    const spans = lane === 'upstream' ? here.map((p) => ({ left: p.X + 5, right: p.X + 5 + textWidth(upstreamLabel(p.e)) })) : here.map((p) => p.span)
    const r = rows(spans)
    here.forEach((p, i) => (lane === 'upstream' ? upRowOf : rowOf).set(p.e, r[i]))
    rowsIn.set(lane, Math.max(0, ...r.map((v) => v + 1)))
  }
  const geometry = new Map<string, { top: number; height: number; y: number }>()
  let top = TOP
  for (const lane of lanes) {
    const n = rowsIn.get(lane) ?? 0
    const ext = lane === 'upstream' ? { above: 18, below: 18 + UPSTREAM_ROW * Math.max(0, n - 1) } : laneExtent(n)
    const height = Math.max(46, ext.above + ext.below)
    geometry.set(lane, { top, height, y: top + ext.above + (height - ext.above - ext.below) / 2 })
    top += height
  }
  const laneY = (name: string) => geometry.get(name)!.y
  const H = top + 8

  const svg = s('svg', { class: 'timeline', viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-labelledby': 'tl-title tl-desc' },
    s('title', { id: 'tl-title' }, title),
    s('desc', { id: 'tl-desc' }, `${entries.length} entries, oldest on the left; lanes: ${lanes.join(', ')}${sc.breaks.length ? `; the time axis leaves out ${sc.breaks.map((b) => human(b.to - b.from)).join(', ')} where nothing happened` : ''}`))
  if (W > 1000) svg.style.minWidth = `${Math.round(W * 0.72)}px` // the same scale as a drawing of normal width: wider ones scroll

  lanes.forEach((name, i) => {
    const g = geometry.get(name)!
    svg.append(s('g', { class: 'lane', 'data-lane': name },
      i % 2 ? s('rect', { class: 'lane-bg', x: 0, y: g.top, width: W, height: g.height }) : null,
      s('text', { class: 'lane-label', x: 8, y: g.y + 4 }, name)))
  })
  svg.append(drawAxis(sc, TOP, H - 6))

  // each token's tenure: from its first accepted write to its successor's first
  const firsts = new Map<string, number>()
  for (const e of entries) if (ACCEPTED(e) && !firsts.has(e.token!)) firsts.set(e.token!, start(e))
  const order = [...firsts.keys()].sort((a, b) => (BigInt(a) < BigInt(b) ? -1 : 1))
  order.forEach((tok, i) => {
    const from = firsts.get(tok)!, next = order[i + 1], to = next !== undefined ? firsts.get(next)! : NaN
    const g = geometry.get(`token ${tok}`)!
    svg.append(s('rect', { class: 'tenure', x: x(from), y: g.top + 3, width: Math.max(2, (next !== undefined ? x(to) : sc.end) - x(from)), height: g.height - 6, 'data-tenure': tok },
      s('title', {}, next !== undefined ? `token ${tok} held the resource until token ${next} was first accepted (${human(to - from)})` : `token ${tok}: the newest generation in this timeline`)))
  })

  // each lease the lease service granted: from its grant to its end as the entries last said it
  const leases = new Map<string, { from: number; to: number; holder?: string }>()
  for (const e of entries) {
    if (e.kind !== 'lease' || e.token === undefined) continue
    const l = leases.get(e.token)
    if (e.result === 'granted') leases.set(e.token, { from: at(e), to: e.leaseUntil ?? at(e), holder: e.by })
    else if (l && (e.result === 'renewed' || e.result === 'released' || e.result === 'expired') && e.leaseUntil !== undefined) l.to = e.leaseUntil
  }
  for (const [tok, l] of leases) {
    const g = geometry.get(`token ${tok}`)
    if (!g) continue
    svg.append(s('rect', { class: 'lease-bar', x: x(l.from), y: g.top + g.height - 9, width: Math.max(2, x(l.to) - x(l.from)), height: 4, 'data-lease': tok },
      s('title', {}, `token ${tok}: leased to ${l.holder ?? '?'} for ${human(l.to - l.from)}`)))
  }

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
    d += `H${sc.end}`
    svg.append(s('path', { class: 'mark-line', d }), steps)
  }

  const marks = s('g', { class: 'marks' })
  for (const { e, X, words, anchor } of placed) {
    const kind = markKind(e)
    const actor = actorOf(e)
    const y = laneY(actor)
    const g = s('g', { class: 'attempt', 'data-outcome': kind, 'data-lane': actor, 'data-time': e.time, tabindex: 0, role: 'img', 'aria-label': `${actor}: ${words}, ${e.time}` },
      s('title', {}, `${e.time} (UTC)\n${actor}: ${words}${e.requestId ? `\nrequest ${e.requestId}` : ''}${e.traceId ? `\ntrace ${e.traceId}` : ''}${e.by ? `\nby ${e.by}` : ''}`))
    if (e.kind === 'attempt') g.append(s('rect', { class: 'req', x: x(start(e)), y: y - 2, width: Math.max(1, X - x(start(e))), height: 4 }))
    if (e.outcome === 'stale' && e.lateMs !== undefined) {
      // how long after its successor took over the stale write came (supersededForMs)
      g.append(s('line', { class: 'late o-stale', x1: x(at(e) - e.lateMs), x2: X, y1: y, y2: y }))
    }
    g.append(shape(kind, X, y), s('text', { x: X, y: y + rowOffset(rowOf.get(e) ?? 0), 'text-anchor': anchor }, words))
    marks.append(g)
    // what reached the upstream: the effect's span (answered, unknown, or a duplicate)
    if (reachedUpstream(e)) {
      const uy = laneY('upstream')
      const cls = e.duplicate ? 'effect duplicate' : e.unknown ? 'effect unknown' : 'effect'
      marks.append(s('g', { class: 'upstream', 'data-upstream': e.unknown ? 'unknown' : e.duplicate ? 'duplicate' : 'answered', 'data-time': e.time },
        s('line', { class: 'link', x1: X, x2: X, y1: y + 8, y2: uy - 7 }),
        s('rect', { class: cls, x: x(upFrom(e)), y: uy - 6, width: Math.max(3, X - x(upFrom(e))), height: 12 }),
        s('text', { x: X + 5, y: uy + 4 + UPSTREAM_ROW * (upRowOf.get(e) ?? 0) }, upstreamLabel(e))))
    }
  }
  svg.append(marks)
  return h('div', { class: 'scroll', tabindex: 0, 'aria-label': 'Timeline, scrolls sideways' }, svg)
}
