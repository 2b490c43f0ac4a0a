/** Durations as people read them (the lease advice, the timeline). */

/** A duration for people: 12 ms, 1.4 s, 2 min 5 s, 3 h 10 min. */
export function human(ms: number): string {
  if (ms < 1000) return `${Math.round(ms)} ms`
  if (ms < 60_000) return `${(ms / 1000).toFixed(ms < 10_000 ? 2 : 1).replace(/\.?0+$/, '')} s`
  if (ms < 3_600_000) { const m = Math.floor(ms / 60_000); const s = Math.round((ms % 60_000) / 1000); return s ? `${m} min ${s} s` : `${m} min` }
  const h = Math.floor(ms / 3_600_000); const m = Math.round((ms % 3_600_000) / 60_000)
  return m ? `${h} h ${m} min` : `${h} h`
}
