// The client's keyHash (src/client/send.ts) names a record as the attempt log does (contract §8:
// `fencegate resolve --key-hash`, admin /unknown): the gateway's derivation from the route's
// filled scope and the key (src/idempotency/record-key.ts), with and without a scope. The client
// keeps its own copy: it imports nothing of the gateway.
import { describe, expect, test } from 'vitest'
import { keyHash } from '../../src/client/index.js'
import { recordKeyOf } from '../../src/idempotency/record-key.js'

describe('the client key hash (contract §8)', () => {
  test('equals the record key hash the gateway derives, scoped and unscoped', () => {
    const cases: [string, string | undefined][] = [
      ['order-7', undefined],
      ['order-7', 'Bearer tenant-a'],
      ['order-7', 'Bearer tenant-b'],
      ['k', ''],
      ['é\nb', 'scope with ü'],
    ]
    for (const [key, scope] of cases) expect(keyHash(key, scope), `${key} / ${scope}`).toBe(recordKeyOf('payments', scope, key).keyHash)
    // a scope changes the hash: two tenants' keys are two records
    expect(keyHash('order-7', 'Bearer tenant-a')).not.toBe(keyHash('order-7', 'Bearer tenant-b'))
    expect(keyHash('order-7', '')).not.toBe(keyHash('order-7'))
  })
})
