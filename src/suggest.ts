/**
 * "Did you mean": the closest of some known words to a misspelt one (config keys, commands,
 * flags), by edit distance with adjacent transpositions counted as one edit.
 */

/** Optimal string alignment distance, case-insensitive. */
export function editDistance(a: string, b: string): number {
  a = a.toLowerCase()
  b = b.toLowerCase()
  const d: number[][] = Array.from({ length: a.length + 1 }, (_, i) => [i, ...Array<number>(b.length).fill(0)])
  for (let j = 1; j <= b.length; j++) d[0][j] = j
  for (let i = 1; i <= a.length; i++) {
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1
      d[i][j] = Math.min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost)
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) d[i][j] = Math.min(d[i][j], d[i - 2][j - 2] + 1)
    }
  }
  return d[a.length][b.length]
}

/**
 * The known word closest to `word`, when it is close enough to be a slip (at most 2 edits, and
 * fewer than half of the word's letters), else undefined.
 */
export function suggest(word: string, known: Iterable<string>): string | undefined {
  let best: string | undefined
  let bestDistance = Infinity
  for (const k of known) {
    const d = editDistance(word, k)
    if (d < bestDistance) { best = k; bestDistance = d }
  }
  if (best === undefined || bestDistance === 0) return best
  return bestDistance <= Math.min(2, Math.floor((word.length - 1) / 2)) ? best : undefined
}

/** ` (did you mean "x"?)`, or "" when nothing known is close. */
export function didYouMean(word: string, known: Iterable<string>, quote = (s: string) => `"${s}"`): string {
  const s = suggest(word, known)
  return s === undefined ? '' : ` (did you mean ${quote(s)}?)`
}
