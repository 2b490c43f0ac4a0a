/**
 * How a route, its filled scope template and an idempotency key become the record's key and the
 * key hash the attempt log, spans and logs carry (contract §4). One derivation for the gateway
 * (./read.ts) and the operator tools (../audit/resolve.ts, ../audit/timeline.ts), so a key an
 * operator names finds the record the gateway wrote:
 *
 *   scope    ""                             a route without scope (idempotency.scope: "")
 *            sha256hex(filled template)     any other route
 *   record   { route, scope, key }
 *   key hash sha256hex(scope + "\n" + key)
 */
import { hash } from 'node:crypto'
import { recordKeyHash, type RecordKey } from '../store/index.js'

/**
 * Hex SHA-256: 64 lower-case digits. `crypto.hash` (Node ≥ 20.12) is one call, without a Hash
 * object per digest. Also the request fingerprint's hash (./fingerprint.ts).
 */
export const sha256hex = (s: string | Buffer): string => hash('sha256', s, 'hex')

/** The attempt log's key hash: hex SHA-256 of the record's scope (itself a hash, or "") and key, as the store derives it. */
export const keyHashOf = (scope: string, key: string): string => recordKeyHash({ route: '', scope, key })

/** A record's key and its key hash (hex SHA-256, never the key itself). */
export interface KeyedRecord {
  recordKey: RecordKey
  keyHash: string
}

/**
 * @param route the route's name
 * @param filledScope the route's scope template as the request filled it (or as an operator
 *   gives it); undefined for a route without scope. Hashed as given: "" is a scope too.
 * @param key the key as ./key.ts parses it (no quotes or escapes)
 */
export function recordKeyOf(route: string, filledScope: string | undefined, key: string): KeyedRecord {
  const scope = filledScope === undefined ? '' : sha256hex(filledScope)
  return { recordKey: { route, scope, key }, keyHash: keyHashOf(scope, key) }
}
