/**
 * One label set of a prom-client counter or histogram, resolved once and then counted without
 * labels: prom-client's own children (`metric.labels(...)`) build, validate and hash their label
 * string on every call, and a request makes four to six observations (figures in
 * bench/NOTES.md). A series here keeps the value prom-client stores for that label set and adds to
 * it as prom-client's `observe`/`inc` would; exposition, `zero`, `reset` and exemplars stay
 * prom-client's. With tracing on, durations go through prom-client's `observe` instead (the
 * exemplar is attached there), see ./metrics.ts.
 *
 * Relies on prom-client 15's stored values (`hashMap` entries: a counter's `value`, a
 * histogram's `sum`, `count` and `bucketValues` by upper bound). Where they are not found
 * (another version, or a metric that is not prom-client's), a series falls back to its
 * `labels()` child; test/unit/series.test.ts holds both to the same exposition. `remove(labels)`
 * of a series' label set, or a `zero(labels)` of one that exists, would detach it: nothing here
 * calls either (metrics.ts zeroes a label set only when it is missing).
 */
import type { Counter, Histogram } from 'prom-client'

interface Stored { labels: Record<string, string | number> }
interface CounterStored extends Stored { value: number }
interface HistogramStored extends Stored { sum: number; count: number; bucketValues: Record<string, number> }
interface Internals<S> { hashMap: Record<string, S>; labelNames: string[]; upperBounds?: readonly number[] }

/** The stored value of `labels` in `m`, made at 0 when missing; undefined when `m` keeps none where expected. */
function stored<S extends Stored>(m: Internals<S>, labels: Record<string, string>, valid: (s: S) => boolean, make: () => void): S | undefined {
  if (typeof m.hashMap !== 'object' || m.hashMap === null) return undefined
  const names = Object.keys(labels)
  const find = () => Object.values(m.hashMap).find((s) => s && typeof s.labels === 'object'
    && Object.keys(s.labels).length === names.length && names.every((n) => String(s.labels[n]) === labels[n]))
  let s = find()
  if (s === undefined) { make(); s = find() }
  return s !== undefined && valid(s) ? s : undefined
}

const labelsOf = (names: readonly string[], values: readonly string[]): Record<string, string> => {
  if (names.length !== values.length) throw new TypeError(`expected ${names.length} label values (${names.join(', ')}), got ${values.length}`)
  return Object.fromEntries(names.map((n, i) => [n, values[i]]))
}

/**
 * A histogram's series for `values` (in the order of its labelNames).
 * @throws TypeError when the number of values is not the number of label names; `observe`
 *   throws TypeError for a value that is not a finite number (as prom-client does)
 */
export function histogramSeries<T extends string>(h: Histogram<T>, ...values: string[]): { observe(seconds: number): void } {
  const m = h as unknown as Internals<HistogramStored>
  if (!Array.isArray(m.labelNames)) return h.labels(...(values as never[]))
  const labels = labelsOf(m.labelNames, values)
  const bounds = m.upperBounds
  const resolve = () => bounds ? stored(m, labels, (s) => typeof s.sum === 'number' && typeof s.bucketValues === 'object', () => h.zero(labels as never)) : undefined
  let map = m.hashMap
  const found = resolve()
  if (found === undefined || !bounds) return h.labels(...(values as never[]))
  let s = found
  // the buckets' property names, made once: a number as a key is turned into its string on every access
  const names = bounds.map(String)
  return {
    observe(v: number): void {
      if (!Number.isFinite(v)) throw new TypeError(`Value is not a valid number: ${v}`)
      // reset() replaces the stored values: find (or make) ours again
      if (m.hashMap !== map) { map = m.hashMap; s = resolve()! }
      for (let i = 0; i < bounds.length; i++) if (v <= bounds[i]) { s.bucketValues[names[i]] += 1; break }
      s.sum += v
      s.count += 1
    },
  }
}

/**
 * A counter's series for `values` (in the order of its labelNames).
 * @throws TypeError when the number of values is not the number of label names
 */
export function counterSeries<T extends string>(c: Counter<T>, ...values: string[]): { inc(): void } {
  const m = c as unknown as Internals<CounterStored>
  if (!Array.isArray(m.labelNames)) return c.labels(...(values as never[]))
  const labels = labelsOf(m.labelNames, values)
  const resolve = () => stored(m, labels, (s) => typeof s.value === 'number', () => c.inc(labels as never, 0))
  let map = m.hashMap
  const found = resolve()
  if (found === undefined) return c.labels(...(values as never[]))
  let s = found
  return {
    inc(): void {
      if (m.hashMap !== map) { map = m.hashMap; s = resolve()! }
      s.value += 1
    },
  }
}
