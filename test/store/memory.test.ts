import { describe, expect, test } from 'vitest'
import { MemoryStore, StoreError, StoreFull, type RecordKey, type Store } from '../../src/store/index.js'
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

describe('MemoryStore: no record forgotten before its time (store.maxRecords)', () => {
  const req = (claimId: string, ttlMs = 60_000) => ({ fingerprint: 'f', claimId, leaseMs: 60_000, ttlMs, retryUnknown: false })
  const key = (k: string) => ({ route: 'r', scope: '', key: k })
  const done = { kind: 'completed' as const, response: { status: 201, headers: [['content-type', 'application/json'], ['set-cookie', 'a=1'], ['set-cookie', 'b=2']] as [string, string][], body: Buffer.from('{"id":"ch_1"}') } }
  const now = 1_700_000_000_000

  test('past maxRecords an in-flight key stays held, and a new claim is refused instead', async () => {
    const store = new MemoryStore({ maxRecords: 2 })
    expect((await store.claim(key('a'), req('a1'), now)).kind).toBe('claimed')
    expect((await store.claim(key('b'), req('b1'), now)).kind).toBe('claimed')
    await expect(store.claim(key('c'), req('c1'), now)).rejects.toThrow(/maxRecords/)
    expect((await store.claim(key('a'), req('a2'), now)).kind).toBe('in_flight')
  })

  test('maxRecords 3: the fourth to seventh keys are refused (StoreFull), every completed record is still replayed byte for byte', async () => {
    const store = new MemoryStore({ maxRecords: 3 })
    for (const k of ['1', '2', '3']) {
      expect((await store.claim(key(k), req(k), now)).kind).toBe('claimed')
      await store.finish(key(k), k, done, 60_000, now)
    }
    for (const k of ['4', '5', '6', '7']) {
      const err = await store.claim(key(k), req(k), now + 1000).then(() => undefined, (e: unknown) => e)
      expect(err).toBeInstanceOf(StoreFull)
      expect(err).toMatchObject({ limit: 'max_records', max: 3, op: 'claim', until: now + 60_000 })
    }
    // the first key is answered from its record, headers in order, several Set-Cookie lines kept
    expect(await store.claim(key('1'), req('1b'), now + 2000)).toEqual({ kind: 'completed', response: done.response })
    // once the first records pass their ttl, room comes back
    expect((await store.claim(key('4'), req('4'), now + 60_000)).kind).toBe('claimed')
    expect(store.capacity(now + 60_000)).toMatchObject({ records: 1, maxRecords: 3, evicted: 0 })
  })

  test('evictRecords (store.acceptRisks maxRecords): the oldest completed record goes, reported with its route; in-flight ones never', async () => {
    const store = new MemoryStore({ maxRecords: 3, evictRecords: true })
    const evicted: string[] = []
    store.watchEvictions((route) => evicted.push(route))
    for (const k of ['1', '2', '3', '4', '5', '6', '7']) {
      expect((await store.claim(key(k), req(k), now)).kind).toBe('claimed')
      await store.finish(key(k), k, done, 60_000, now)
    }
    expect(evicted).toEqual(['r', 'r', 'r', 'r'])
    // the first key's record is gone: its retry is claimed afresh, and only with the evictions counted
    expect((await store.claim(key('1'), req('1b'), now)).kind).toBe('claimed')
    expect(evicted).toHaveLength(5)
    expect((await store.claim(key('7'), req('7b'), now)).kind).toBe('completed')
    // three held in flight: nothing completed is left to evict, so a new key is refused
    expect((await store.claim(key('8'), req('8'), now)).kind).toBe('claimed')
    expect((await store.claim(key('9'), req('9'), now)).kind).toBe('claimed')
    await expect(store.claim(key('10'), req('10'), now)).rejects.toBeInstanceOf(StoreFull)
  })

  test('records of different ttls expire each at its own time', async () => {
    const store = new MemoryStore({ maxRecords: 2 })
    expect((await store.claim(key('long'), req('long', 600_000), now)).kind).toBe('claimed')
    await store.finish(key('long'), 'long', done, 600_000, now)
    expect((await store.claim(key('short'), req('short', 1000), now)).kind).toBe('claimed')
    await store.finish(key('short'), 'short', done, 1000, now)
    await expect(store.claim(key('x'), req('x'), now + 500)).rejects.toBeInstanceOf(StoreFull)
    expect((await store.claim(key('x'), req('x'), now + 1000)).kind).toBe('claimed')
    expect((await store.claim(key('long'), req('long2'), now + 1000)).kind).toBe('completed')
  })
})

describe('MemoryStore: the attempt log is not forgotten within its retention (store.maxAttempts)', () => {
  const entry = (n: number) => ({ time: Date.now(), kind: 'attempt' as const, replica: 'test', route: 'r', method: 'POST', outcome: 'forwarded' as const, status: 201, durationMs: 1, resource: 'res', token: '1', requestId: String(n) })
  test('a full log refuses the entries past its capacity, keeping the older ones; with evict the oldest go, each reported', async () => {
    const store = new MemoryStore({ auditCapacity: 3 })
    const err = await store.audit.append([1, 2, 3, 4, 5].map(entry)).then(() => undefined, (e: unknown) => e)
    expect(err).toMatchObject({ limit: 'max_attempts', max: 3, refused: 2 })
    expect((await store.audit.timeline({ resource: 'res' }, 0, 10)).map((e) => e.requestId)).toEqual(['1', '2', '3'])

    const evicting = new MemoryStore({ auditCapacity: 3, evictAttempts: true })
    let dropped = 0
    evicting.watchEvictions(() => {}, () => { dropped++ })
    await evicting.audit.append([1, 2, 3, 4, 5].map(entry))
    expect(dropped).toBe(2)
    expect((await evicting.audit.timeline({ resource: 'res' }, 0, 10)).map((e) => e.requestId)).toEqual(['3', '4', '5'])
  })
})
