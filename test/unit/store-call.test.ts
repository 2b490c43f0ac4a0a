// The closed check and StoreError wrapping every store uses (src/store/shared/call.ts).
import { describe, expect, test } from 'vitest'
import { closedError, storeCall, storeError } from '../../src/store/shared/call.js'
import { StoreError } from '../../src/store/index.js'

describe('store calls (src/store/shared/call.ts)', () => {
  test('after close: StoreError naming the operation, and the operation never runs', async () => {
    let ran = false
    const e = await storeCall('redis', 'claim', true, async () => { ran = true }).catch((x) => x)
    expect(e).toBeInstanceOf(StoreError)
    expect(e).toMatchObject({ op: 'claim', message: 'store is closed' })
    expect(ran).toBe(false)
    expect(closedError('fence').op).toBe('fence')
  })

  test("an engine's error becomes a StoreError '<engine> <op>: <why>' with the cause kept", async () => {
    const cause = new Error('ECONNRESET')
    const e = await storeCall('postgres', 'admit', false, async () => { throw cause }).catch((x) => x)
    expect(e).toBeInstanceOf(StoreError)
    expect(e).toMatchObject({ op: 'admit', message: 'postgres admit: ECONNRESET' })
    expect(e.cause).toBe(cause)
    const told = await storeCall('redis', 'fence', false, async () => { throw cause }, () => 'not connected (reconnecting)').catch((x) => x)
    expect(told.message).toBe('redis fence: not connected (reconnecting)')
  })

  test('a StoreError passes as it is; an answer passes untouched', async () => {
    const own = new StoreError('fewer replicas acknowledged', 'finish')
    expect(storeError('redis', 'claim', own)).toBe(own)
    await expect(storeCall('memory', 'claim', false, async () => { throw own })).rejects.toBe(own)
    await expect(storeCall('memory', 'mark', false, async () => 42)).resolves.toBe(42)
  })
})
