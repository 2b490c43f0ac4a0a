/**
 * Bearer tokens (RFC 6750 §2.1) as the admin listener (./admin.ts) and the lease service
 * (./leases/service.ts) check them: the token of an Authorization header, compared in constant time.
 */
import { timingSafeEqual } from 'node:crypto'

/** The Bearer token of an Authorization header (`Bearer <token>`, the scheme in any case), or undefined. */
export const bearerToken = (header: string | undefined): string | undefined => /^Bearer +(\S+) *$/i.exec(header ?? '')?.[1]

/** Whether `given` is `expected`, compared in constant time (for equal lengths). */
export function sameToken(given: string, expected: string): boolean {
  const a = Buffer.from(given)
  const b = Buffer.from(expected)
  return a.length === b.length && timingSafeEqual(a, b)
}
