/**
 * Bucketed durations for the audit view's small histograms (`GET /leases`): 1-2-5 bounds in ms
 * (1, 2, 5, 10, 20, 50, … ms), from the bucket holding the smallest value to the one holding the
 * largest, so a few numbers draw the shape of a distribution.
 */

export interface Histogram {
  /** each bucket's upper bound, ms (inclusive), ascending */
  le: number[]
  /** values in each bucket (above the previous bound, up to its own) */
  counts: number[]
}

/** The 1-2-5 bound at or above `ms` (at least 1 ms). */
function boundAbove(ms: number): number {
  let b = 1
  for (let i = 0; b < ms; i++) b = [1, 2, 5][(i + 1) % 3] * 10 ** Math.floor((i + 1) / 3)
  return b
}

/** The histogram of `sorted` (ascending, ms); undefined when there are none. */
export function histogram(sorted: readonly number[]): Histogram | undefined {
  if (!sorted.length) return undefined
  const le: number[] = []
  const last = boundAbove(sorted[sorted.length - 1])
  for (let b = boundAbove(sorted[0]); ; b = boundAbove(b + 1e-9)) { le.push(b); if (b >= last) break }
  const counts = le.map(() => 0)
  let i = 0
  for (const v of sorted) {
    while (v > le[i]) i++
    counts[i]++
  }
  return { le, counts }
}
