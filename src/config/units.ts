/**
 * Durations and sizes as written in the config: `250ms`, `10s`, `5m`, `24h`, `7d`; `512`, `64KiB`,
 * `1MiB`, `1GiB` (binary) or `1kB`, `1MB` (decimal). Plain integers are bytes for sizes; a duration
 * always needs its unit, since a bare number is ambiguous between ms and s. formatDuration and
 * formatSize write a value back in the config's units, for sentences (the claim, lease advice,
 * resolve's answer).
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

const DURATION_UNITS: [number, string][] = [[86_400_000, 'd'], [3_600_000, 'h'], [60_000, 'm'], [1000, 's']]

/**
 * A duration in ms as the config writes it, in the largest unit that divides it: `24h`, `30s`,
 * `90m`, `1500ms`. Days only from two on: `24h` reads better than `1d`, as the config's own
 * defaults write it. The inverse of parseDuration for whole ms.
 */
export function formatDuration(ms: number): string {
  for (const [size, unit] of DURATION_UNITS) if (ms >= (unit === 'd' ? 2 * size : size) && ms % size === 0) return `${ms / size}${unit}`
  return `${ms}ms`
}

/**
 * A size in bytes in the largest binary unit that divides it: `1GiB`, `1MiB`, `64KiB`; else
 * `1000 bytes` (words for people, not a value parseSize reads).
 */
export function formatSize(bytes: number): string {
  if (bytes >= 1024 ** 3 && bytes % 1024 ** 3 === 0) return `${bytes / 1024 ** 3}GiB`
  if (bytes >= 1024 ** 2 && bytes % 1024 ** 2 === 0) return `${bytes / 1024 ** 2}MiB`
  if (bytes >= 1024 && bytes % 1024 === 0) return `${bytes / 1024}KiB`
  return `${bytes} bytes`
}
