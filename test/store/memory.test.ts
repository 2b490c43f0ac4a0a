import { describe, expect, test } from 'vitest'
import { MemoryStore } from '../../src/store/memory.js'
import { StoreError, type RecordKey, type Store } from '../../src/store/types.js'
import { describeStoreConformance } from './conformance.js'

/** past every `now` a test uses: the filler records never expire nor lapse, ms */
const FAR = 8.64e15

/**
 * The memory store's own fault: it refuses a new claim once it holds `maxRecords` in-flight or
 * unknown records (it never forgets one to make room), while fences still work. Fills the store
 * with in-flight claims of keys no test uses, until a claim is refused.
 * @returns releases the filler claims
 */
async function failClaims(store: Store): Promise<() => Promise<void>> {
  const fill = { fingerprint: 'filler', claimId: 'filler', leaseMs: FAR, ttlMs: FAR, retryUnknown: false }
  const held: RecordKey[] = []
  // one at a time: past the limit every refused claim looks through all it holds
  for (let n = 0; ; n++) {
    const k: RecordKey = { route: 'test: failClaims', scope: '', key: String(n) }
    const refused = await store.claim(k, fill, 0).then(() => undefined, (e: unknown) => e)
    if (refused === undefined) {
      held.push(k)
      continue
    }
    if (!(refused instanceof StoreError) || !/maxRecords/.test(refused.message)) throw refused
    break
  }
  return async () => { await Promise.all(held.map((k) => store.release(k, 'filler'))) }
}

describeStoreConformance('memory', async () => new MemoryStore(), { failClaims })

describe('MemoryStore', () => {
  test('maxResources reached: a new resource is refused with StoreError, existing ones still work', async () => {
    const s = new MemoryStore({ maxResources: 2 })
    expect(await s.fence('res/a', 10n)).toMatchObject({ accepted: true, highest: 10n })
    expect(await s.fence('res/b', 20n)).toMatchObject({ accepted: true, highest: 20n })

    const err = await s.fence('res/c', 1n).then(() => undefined, (e: unknown) => e)
    expect(err).toBeInstanceOf(StoreError)
    expect((err as StoreError).op).toBe('fence')
    // the refused resource got no mark, and nothing was forgotten to make room
    expect(await s.highest('res/c')).toBeUndefined()
    await expect(s.fence('res/c', 5n)).rejects.toBeInstanceOf(StoreError)

    expect(await s.fence('res/a', 11n)).toMatchObject({ accepted: true, highest: 11n })
    expect(await s.fence('res/a', 9n)).toMatchObject({ accepted: false, highest: 11n })
    expect(await s.fence('res/b', 20n)).toMatchObject({ accepted: true, highest: 20n })
    expect(await s.highest('res/a')).toBe(11n)
    expect(await s.highest('res/b')).toBe(20n)
    // idempotency records do not count against maxResources
    expect((await s.claim({ route: 'r', scope: 's', key: 'k' }, { fingerprint: 'f', claimId: 'c', leaseMs: 1000, ttlMs: 60_000, retryUnknown: false }, 1_700_000_000_000)).kind).toBe('claimed')
    await s.close()
  })
})

describe('MemoryStore: records in flight are never evicted', () => {
  test('past maxRecords an in-flight key stays held, and a new claim is refused instead', async () => {
    const store = new MemoryStore({ maxRecords: 2 })
    const req = (claimId: string) => ({ fingerprint: 'f', claimId, leaseMs: 60_000, ttlMs: 60_000, retryUnknown: false })
    const key = (k: string) => ({ route: 'r', scope: '', key: k })
    const now = Date.now()
    expect((await store.claim(key('a'), req('a1'), now)).kind).toBe('claimed')
    expect((await store.claim(key('b'), req('b1'), now)).kind).toBe('claimed')
    await expect(store.claim(key('c'), req('c1'), now)).rejects.toThrow(/maxRecords/)
    expect((await store.claim(key('a'), req('a2'), now)).kind).toBe('in_flight')
    // completed records may be evicted (a replay is lost, never an effect repeated)
    await store.finish(key('a'), 'a1', { kind: 'completed', response: { status: 201, headers: [], body: Buffer.from('x') } }, 60_000, now)
    expect((await store.claim(key('c'), req('c1'), now)).kind).toBe('claimed')
  })
})
