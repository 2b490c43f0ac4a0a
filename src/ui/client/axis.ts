/**
 * The timeline's time axis: real time left to right, with two exceptions so that every mark can be
 * seen. Two marks closer than `MIN_GAP` px are pushed `MIN_GAP` apart (attempts milliseconds apart
 * beside others seconds apart would otherwise share a pixel); and a gap far longer than the
 * typical one between the entries (20 times the lower median, and at least 1 s) is cut out of the
 * axis and drawn as a break of `BREAK` px labelled with the time it stands for. Between breaks
 * the scale is one and the same, ms to px.
 */
import { textWidth } from './labels.js'
import { h, human, s } from './lib.js'

/** Smallest distance between two marks, px: two marks' width plus air. */
export const MIN_GAP = 22
/** Width of a break in the axis, px (room for its label and the times on either side). */
export const BREAK = 96
const EDGE = 24

/** A time the drawing places: `mark` if an attempt's mark sits there (kept `MIN_GAP` from the next mark). */
export interface Anchor { t: number; mark: boolean }

/** A cut in the axis: times `from`..`to` (ms) drawn between `x0` and `x1` (px). */
export interface AxisBreak { from: number; to: number; x0: number; x1: number }

export interface Scale {
  /** px of a time (ms since the epoch); times before the first anchor or after the last are clamped to the drawing */
  x(t: number): number
  /** the px just after the drawing's right edge */
  end: number
  /** ms per px inside one stretch of the axis, and the stretches' first and last anchor */
  msPerPx: number
  stretches: { from: number; to: number }[]
  breaks: AxisBreak[]
}

const lowerMedian = (v: number[]) => v.slice().sort((a, b) => a - b)[Math.floor((v.length - 1) / 2)]

/**
 * Lays `anchors` out from `left`, filling `room` px when nothing needs stretching; wider (the
 * drawing scrolls) when minimum spacing or breaks need more.
 */
export function timeScale(anchors: readonly Anchor[], left: number, room: number): Scale {
  const byTime = new Map<number, boolean>()
  for (const a of anchors) byTime.set(a.t, (byTime.get(a.t) ?? false) || a.mark)
  const T = [...byTime.keys()].sort((a, b) => a - b)
  const gaps = T.slice(1).map((t, i) => t - T[i])
  const positive = gaps.filter((g) => g > 0)
  const cut = positive.length ? Math.max(20 * lowerMedian(positive), 1000) : Infinity
  const broken = gaps.map((g) => g > cut)
  const linear = gaps.reduce((sum, g, i) => sum + (broken[i] ? 0 : g), 0)
  const nBreaks = broken.filter(Boolean).length
  const pxPerMs = linear > 0 ? Math.max(room - 2 * EDGE - nBreaks * BREAK, room / 3) / linear : 0

  const pos = [left + EDGE + (T.length === 1 ? (room - 2 * EDGE) / 2 : 0)]
  const breaks: AxisBreak[] = []
  const stretches = [{ from: T[0], to: T[0] }]
  gaps.forEach((g, i) => {
    const both = byTime.get(T[i]) && byTime.get(T[i + 1])
    const w = broken[i] ? BREAK : Math.max(g * pxPerMs, both ? MIN_GAP : 0)
    pos.push(pos[i] + w)
    if (broken[i]) {
      breaks.push({ from: T[i], to: T[i + 1], x0: pos[i], x1: pos[i + 1] })
      stretches.push({ from: T[i + 1], to: T[i + 1] })
    } else stretches[stretches.length - 1].to = T[i + 1]
  })
  const last = pos[pos.length - 1]
  const end = Math.max(last + EDGE, left + room)

  const x = (t: number): number => {
    if (t <= T[0]) return Math.max(left, pos[0] - (T[0] - t) * pxPerMs)
    if (t >= T[T.length - 1]) return Math.min(end, last + (t - T[T.length - 1]) * pxPerMs)
    let lo = 0, hi = T.length - 1
    while (hi - lo > 1) { const mid = (lo + hi) >> 1; if (T[mid] <= t) lo = mid; else hi = mid }
    return pos[lo] + ((t - T[lo]) / (T[hi] - T[lo])) * (pos[hi] - pos[lo])
  }
  return { x, end, msPerPx: pxPerMs > 0 ? 1 / pxPerMs : Infinity, stretches, breaks }
}

/** A tick step on a 1-2-5 scale, ms, of at least `min` ms. */
function step(min: number): number {
  const p = 10 ** Math.floor(Math.log10(Math.max(min, 1e-3)))
  return [1, 2, 5, 10].map((m) => m * p).find((v) => v >= min) ?? 10 * p
}

const CLOCK = new Intl.DateTimeFormat(undefined, { hour: '2-digit', minute: '2-digit', second: '2-digit' })
const CLOCK_MS = new Intl.DateTimeFormat(undefined, { hour: '2-digit', minute: '2-digit', second: '2-digit', fractionalSecondDigits: 3 } as Intl.DateTimeFormatOptions)
const clock = (t: number, withMs: boolean) => (withMs ? CLOCK_MS : CLOCK).format(t)

/** Tick times (clock times in the viewer's zone, UTC on hover) and the breaks, between `top` and `bottom` px. */
export function drawAxis(sc: Scale, top: number, bottom: number): SVGElement {
  const axis = s('g', { class: 'axis' })
  const AIR = 12
  const LABEL = textWidth(clock(Date.UTC(2026, 11, 31, 23, 59, 59, 999), true)) + AIR // the widest clock time, px
  let free = -Infinity
  const label = (t: number, X: number, withMs: boolean) => {
    const text = clock(t, withMs), half = (textWidth(text) + AIR) / 2
    if (X - half < free || X + half > sc.end) return
    free = X + half
    axis.append(s('text', { x: X, y: top - 12, 'text-anchor': 'middle' }, s('title', {}, `${new Date(t).toISOString()} (UTC)`), text))
  }
  const tick = step(LABEL * sc.msPerPx)
  for (const st of sc.stretches) {
    const before = free
    if (Number.isFinite(tick)) {
      for (let t = Math.ceil(st.from / tick) * tick; t <= st.to; t += tick) {
        axis.append(s('line', { x1: sc.x(t), x2: sc.x(t), y1: top - 6, y2: bottom, class: 'grid' }))
        label(t, sc.x(t), tick < 1000)
      }
    }
    if (free === before) label(st.from, sc.x(st.from), true) // a stretch with no tick of its own: its first time
  }
  for (const b of sc.breaks) {
    axis.append(s('g', { class: 'axis-break', 'data-break': b.to - b.from },
      s('rect', { x: b.x0 + 8, y: top - 6, width: b.x1 - b.x0 - 16, height: bottom - top + 6 }),
      s('text', { x: (b.x0 + b.x1) / 2, y: top - 24, 'text-anchor': 'middle' }, s('title', {}, `${human(b.to - b.from)} left out of the axis`), `+${human(b.to - b.from)}`)))
  }
  return axis
}

/** The axis's own legend entry: what a break looks like. */
export const breakLegend = (): HTMLElement => {
  const v = s('svg', { width: 18, height: 18, viewBox: '0 0 18 18', 'aria-hidden': 'true' })
  v.append(s('g', { class: 'axis-break' }, s('rect', { x: 4, y: 1, width: 10, height: 16 })))
  return h('li', { 'data-legend': 'break' }, v, ' a break in the time axis: the time it leaves out, above it')
}
