/** Fencing tokens (contract §3): a canonical decimal integer 0 ≤ n ≤ 2^63−1. */

export const MAX_TOKEN = 9223372036854775807n

// No sign, no leading zeros, no spaces, no fraction; at most 19 digits before the range check.
const CANONICAL = /^(?:0|[1-9][0-9]{0,18})$/

/**
 * Parses a Fencing-Token header value. A header sent twice arrives joined with ", " and is
 * rejected by the same rule.
 * @returns the token, or undefined when the value is malformed or out of range
 */
export function parseFencingToken(value: string): bigint | undefined {
  if (!CANONICAL.test(value)) return undefined
  const n = BigInt(value)
  return n <= MAX_TOKEN ? n : undefined
}
