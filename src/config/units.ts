/**
 * Durations and sizes as written in the config: `250ms`, `10s`, `5m`, `24h`, `7d`; `512`, `64KiB`,
 * `1MiB`, `1GiB` (binary) or `1kB`, `1MB` (decimal). Plain integers are bytes for sizes; a duration
 * always needs its unit, since a bare number is ambiguous between ms and s.
 */
const DURATION = /^(\d+(?:\.\d+)?)(ms|s|m|h|d)$/
const DURATION_MS = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 } as const
const SIZE = /^(\d+(?:\.\d+)?)\s*(B|kB|KB|KiB|MB|MiB|GB|GiB)?$/
const SIZE_BYTES = { B: 1, kB: 1e3, KB: 1e3, KiB: 1024, MB: 1e6, MiB: 1024 ** 2, GB: 1e9, GiB: 1024 ** 3 } as const

/** Parses a duration to whole ms. @returns undefined when the text is not a duration */
export function parseDuration(text: string): number | undefined {
  const m = DURATION.exec(text.trim())
  if (!m) return undefined
  return Math.round(Number(m[1]) * DURATION_MS[m[2] as keyof typeof DURATION_MS])
}

/** Parses a size to whole bytes. @returns undefined when the text is not a size */
export function parseSize(text: string | number): number | undefined {
  if (typeof text === 'number') return Number.isSafeInteger(text) && text >= 0 ? text : undefined
  const m = SIZE.exec(text.trim())
  if (!m) return undefined
  return Math.floor(Number(m[1]) * SIZE_BYTES[(m[2] ?? 'B') as keyof typeof SIZE_BYTES])
}
