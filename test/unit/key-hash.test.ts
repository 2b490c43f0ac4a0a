// The store logs a record by the key hash the gateway and the operator tools derive: one value
// from src/store/contract/key-hash.ts and from src/idempotency/record-key.ts.
import { describe, expect, test } from 'vitest'
import { keyHashOf as storeKeyHash } from '../../src/store/contract/key-hash.js'
import { keyHashOf, recordKeyOf } from '../../src/idempotency/record-key.js'

describe('the key hash (contract §4)', () => {
  test('the store derives the key hash the gateway does', () => {
    for (const [scope, key] of [['', 'k1'], ['tenant-a', 'order-7'], ['', ''], ['é', 'a\nb']] as const) {
      const { recordKey, keyHash } = recordKeyOf('payments', scope === '' ? undefined : scope, key)
      expect(storeKeyHash(recordKey)).toBe(keyHash)
      expect(storeKeyHash(recordKey)).toBe(keyHashOf(recordKey.scope, recordKey.key))
      expect(storeKeyHash(recordKey)).toMatch(/^[0-9a-f]{64}$/)
    }
  })
})
