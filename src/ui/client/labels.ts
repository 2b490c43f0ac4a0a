/**
 * Where the timeline's words go so that none covers another: each label takes the first row of
 * its lane where nothing is written over the same stretch, and a lane is as tall as its rows.
 */

let ctx: CanvasRenderingContext2D | null | undefined

/** The width of `text` at the drawing's 12 px, px; measured with the page's font, estimated when the page cannot measure. */
export function textWidth(text: string): number {
  if (ctx === undefined) {
    ctx = document.createElement('canvas').getContext('2d')
    if (ctx) ctx.font = `12px ${getComputedStyle(document.body).fontFamily}`
  }
  return ctx ? ctx.measureText(text).width : text.length * 7.2
}

/** One label to place: the px it covers left to right. */
export interface Span { left: number; right: number }

const AIR = 8

/** The row of each span (0 first), in the order given: the lowest row whose spans end before it starts. */
export function rows(spans: readonly Span[]): number[] {
  const ends: number[] = []
  return spans.map((sp) => {
    let r = ends.findIndex((e) => e <= sp.left)
    if (r < 0) { r = ends.length; ends.push(0) }
    ends[r] = sp.right + AIR
    return r
  })
}

/** A row's baseline offset from its lane's centre line, px: row 0 above the marks, 1 below, 2 above 0, 3 below 1… */
export const rowOffset = (row: number): number => (row % 2 === 0 ? -13 - 15 * (row / 2) : 23 + 15 * ((row - 1) / 2))

/** The space a lane whose labels use `n` rows needs above and below its centre line, px. */
export function laneExtent(n: number): { above: number; below: number } {
  const above = Math.ceil(n / 2), below = Math.floor(n / 2)
  return { above: above ? 27 + 15 * (above - 1) : 18, below: below ? 29 + 15 * (below - 1) : 18 }
}
