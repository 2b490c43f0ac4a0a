/**
 * The store conformance suite: written once, run against every Store implementation by
 * memory.test.ts, sqlite.test.ts, redis.test.ts, redis-cluster.test.ts, redis-replicas.test.ts
 * and postgres.test.ts. It asserts the promises in src/store/contract/store.ts: the fencing check-and-set
 * and its `since`, `admit` (a half-failed one too), the idempotency record state machine, claim
 * ids, ttl and lease expiry, release (./conformance-give-back.ts), renewal, key scoping, unknown outcomes and their resolution, the
 * registrations of `fencing.serialize: store`, the attempt log, the state markers and close().
 * What types.ts says is not checked here, it says so, with where it is checked.
 *
 * Time is driven through the `now` parameter; no test sleeps.
 *
 * Usage:
 *   describeStoreConformance('memory', async () => new MemoryStore(), { failClaims })
 *   describeStoreConformance('sqlite', make, { cleanup, makeSecond, failClaims })
 */
import { afterEach, describe, expect, test } from 'vitest'
import { LEASE_ROUTE, StoreError, StoreWentBack, type AuditEntry, type ClaimRequest, type ClaimResult, type LossNote, type RecordKey, type Registration, type Store, type StoredResponse, type UnknownReason } from '../../src/store/index.js'
import { randomUUID } from 'node:crypto'
import { describeRelease } from './conformance-give-back.js'
import { describeSettle } from './conformance-settle.js'
import { describeLeases } from './conformance-leases.js'

export type Cleanup = () => Promise<void> | void

export interface ConformanceOptions {
  /** runs after each test, once every store the test opened is closed */
  cleanup?: Cleanup
  /**
   * Opens a second, independent client on the same backing state as the store that `make`
   * returned last in this test (sqlite: another SqliteStore on the same file; redis: another
   * connection). Leave it out when the store cannot be shared (memory).
   */
  makeSecond?: () => Promise<Store>
  /**
   * Makes the claim step of `admit` (and `claim`) fail inside the engine on `store` — a trigger
   * refusing writes to the records table, a record key holding the wrong type, a patched map —
   * while fences still work, and returns the function that removes the fault. Every store gives
   * one: the suite checks what a half-failed `admit` leaves behind (src/store/contract/store.ts `admit`),
   * and a store's test file without it fails that test. The test claims only `key()` (the
   * default record key), so a fault on that one record is enough.
   */
  failClaims?: (store: Store) => Promise<() => Promise<void>>
  /**
   * the store's write sequence is not the one `store.sequence.seen` counts (a Redis Cluster keeps
   * one per slot, since a script reaches one slot only: redis-cluster-loss.test.ts checks it)
   */
  unsequenced?: true
  /**
   * Opens a store on the same backing state that takes its instants from its own clock (redis,
   * postgres by default; the suite's other stores are opened with `clock: 'caller'` so that `now`
   * drives time). Leave it out for memory and sqlite, whose `now` is the instant itself.
   */
  onStoreClock?: () => Promise<Store>
}

/** A fixed epoch-ms start for every test's clock. */
export const T0 = 1_700_000_000_000

const MAX_I64 = 9223372036854775807n

export const key = (k = 'key-1', route = 'POST /orders', scope = 'a'.repeat(64)): RecordKey => ({ route, scope, key: k })

export const req = (claimId: string, over: Partial<ClaimRequest> = {}): ClaimRequest => ({
  fingerprint: 'fp-1',
  claimId,
  leaseMs: 10_000,
  ttlMs: 86_400_000,
  retryUnknown: false,
  ...over,
})

/** A response that a lossy store would mangle: header order, two Set-Cookie lines, every byte value. */
export const sampleResponse = (): StoredResponse => ({
  status: 201,
  headers: [
    ['content-type', 'application/octet-stream'],
    ['set-cookie', 'a=1; Path=/; HttpOnly'],
    ['x-order', 'between the cookies'],
    ['set-cookie', 'b=2; Path=/; Secure'],
    ['etag', '"v1"'],
  ],
  body: Buffer.from(Array.from({ length: 256 }, (_, i) => i)),
})

/** Deterministic Fisher–Yates shuffle (mulberry32), so a failure reproduces. */
export function shuffled<T>(items: readonly T[], seed = 0x5eed): T[] {
  const out = items.slice()
  let a = seed >>> 0
  const rnd = () => {
    a = (a + 0x6d2b79f5) >>> 0
    let t = a
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
  for (let i = out.length - 1; i > 0; i--) {
    const j = Math.floor(rnd() * (i + 1))
    ;[out[i], out[j]] = [out[j], out[i]]
  }
  return out
}

function expectResponse(r: ClaimResult, want: StoredResponse): void {
  expect(r.kind).toBe('completed')
  if (r.kind !== 'completed') return
  expect(r.response.status).toBe(want.status)
  expect(r.response.headers).toEqual(want.headers)
  expect(Buffer.isBuffer(r.response.body)).toBe(true)
  expect(r.response.body.length).toBe(want.body.length)
  expect(Buffer.compare(r.response.body, want.body)).toBe(0)
}

export function describeStoreConformance(
  name: string,
  make: () => Promise<Store>,
  cleanupOrOptions?: Cleanup | ConformanceOptions,
): void {
  const options: ConformanceOptions = typeof cleanupOrOptions === 'function' ? { cleanup: cleanupOrOptions } : cleanupOrOptions ?? {}

  describe(`store conformance: ${name}`, () => {
    let opened: Store[] = []
    const open = async (): Promise<Store> => {
      const s = await make()
      opened.push(s)
      return s
    }
    const openSecond = async (): Promise<Store> => {
      const s = await options.makeSecond!()
      opened.push(s)
      return s
    }

    afterEach(async () => {
      const stores = opened
      opened = []
      for (const s of stores.reverse()) await s.close().catch(() => {})
      await options.cleanup?.()
    })

    describe('fence', () => {
      test('the first token on a fresh resource is accepted', async () => {
        const s = await open()
        expect(await s.fence('res/a', 42n)).toMatchObject({ accepted: true, highest: 42n })
        expect(await s.fence('res/zero', 0n)).toMatchObject({ accepted: true, highest: 0n })
      })

      test('a token equal to the mark is accepted', async () => {
        const s = await open()
        await s.fence('res/a', 7n)
        expect(await s.fence('res/a', 7n)).toMatchObject({ accepted: true, highest: 7n })
        expect(await s.highest('res/a')).toBe(7n)
      })

      test('a lower token is rejected with highest = the mark, and the mark stays', async () => {
        const s = await open()
        await s.fence('res/a', 10n)
        expect(await s.fence('res/a', 9n)).toMatchObject({ accepted: false, highest: 10n })
        expect(await s.fence('res/a', 0n)).toMatchObject({ accepted: false, highest: 10n })
        expect(await s.highest('res/a')).toBe(10n)
      })

      test('a higher token is accepted and raises the mark', async () => {
        const s = await open()
        await s.fence('res/a', 10n)
        expect(await s.fence('res/a', 11n)).toMatchObject({ accepted: true, highest: 11n })
        expect(await s.highest('res/a')).toBe(11n)
        expect(await s.fence('res/a', 10n)).toMatchObject({ accepted: false, highest: 11n })
      })

      test('resources are independent', async () => {
        const s = await open()
        await s.fence('res/a', 100n)
        expect(await s.fence('res/b', 1n)).toMatchObject({ accepted: true, highest: 1n })
        expect(await s.fence('res/a', 50n)).toMatchObject({ accepted: false, highest: 100n })
        expect(await s.fence('res/b', 2n)).toMatchObject({ accepted: true, highest: 2n })
        expect(await s.highest('res/a')).toBe(100n)
        expect(await s.highest('res/b')).toBe(2n)
        // a resource that is a prefix of another is still its own resource
        expect(await s.fence('res', 1n)).toMatchObject({ accepted: true, highest: 1n })
      })

      test('2^63-1 is stored and compared exactly; 2^63-2 after it is rejected', async () => {
        const s = await open()
        const r = await s.fence('res/max', MAX_I64)
        expect(r).toMatchObject({ accepted: true, highest: MAX_I64 })
        expect(typeof r.highest).toBe('bigint')
        expect(await s.highest('res/max')).toBe(MAX_I64)
        expect(await s.fence('res/max', MAX_I64 - 1n)).toMatchObject({ accepted: false, highest: MAX_I64 })
        expect(await s.fence('res/max', MAX_I64)).toMatchObject({ accepted: true, highest: MAX_I64 })
        expect(await s.highest('res/max')).toBe(MAX_I64)
      })

      test('2^53+1 and 2^53 are told apart (no float rounding)', async () => {
        const s = await open()
        const p53 = 2n ** 53n
        expect(await s.fence('res/down', p53 + 1n)).toMatchObject({ accepted: true, highest: p53 + 1n })
        expect(await s.fence('res/down', p53)).toMatchObject({ accepted: false, highest: p53 + 1n })
        expect(await s.highest('res/down')).toBe(p53 + 1n)

        expect(await s.fence('res/up', p53)).toMatchObject({ accepted: true, highest: p53 })
        expect(await s.fence('res/up', p53 + 1n)).toMatchObject({ accepted: true, highest: p53 + 1n })
        expect(await s.highest('res/up')).toBe(p53 + 1n)
      })

      test('highest() is undefined for an unknown resource and the mark otherwise', async () => {
        const s = await open()
        expect(await s.highest('res/never')).toBeUndefined()
        await s.fence('res/a', 5n)
        expect(await s.highest('res/a')).toBe(5n)
        await s.fence('res/a', 3n) // rejected: the mark stays
        expect(await s.highest('res/a')).toBe(5n)
        expect(await s.highest('res/never')).toBeUndefined()
      })
    })

    describe('concurrent fences', () => {
      const tokens = shuffled(Array.from({ length: 100 }, (_, i) => BigInt(i + 1)))

      const checkRace = (sent: bigint[], results: { accepted: boolean; highest: bigint }[]) => {
        results.forEach((r, i) => {
          if (r.accepted) expect(r.highest).toBe(sent[i])
          else expect(r.highest > sent[i], `token ${sent[i]} rejected with highest ${r.highest}`).toBe(true)
        })
        // the largest token can never be rejected
        expect(results[sent.indexOf(100n)]).toMatchObject({ accepted: true, highest: 100n })
      }

      test('100 shuffled tokens at once: the mark ends at the max, every rejection names a higher mark', async () => {
        const s = await open()
        const results = await Promise.all(tokens.map((t) => s.fence('res/race', t)))
        checkRace(tokens, results)
        expect(await s.highest('res/race')).toBe(100n)
      })

      test('calls made together keep their order per resource, across resources (batched stores group them)', async () => {
        const s = await open()
        const results = await Promise.all([
          s.fence('res/b', 5n), s.fence('res/a', 9n), s.fence('res/b', 3n), s.fence('res/a', 9n), s.fence('res/b', 7n), s.fence('res/a', 1n),
        ])
        expect(results).toMatchObject([
          { accepted: true, highest: 5n }, { accepted: true, highest: 9n }, { accepted: false, highest: 5n },
          { accepted: true, highest: 9n }, { accepted: true, highest: 7n }, { accepted: false, highest: 9n },
        ])
      })

      if (options.makeSecond) {
        test('two clients on the same state: sequential fences see each other', async () => {
          const a = await open()
          const b = await openSecond()
          expect(await a.fence('res/shared', 10n)).toMatchObject({ accepted: true, highest: 10n })
          expect(await b.highest('res/shared')).toBe(10n)
          expect(await b.fence('res/shared', 9n)).toMatchObject({ accepted: false, highest: 10n })
          expect(await b.fence('res/shared', 12n)).toMatchObject({ accepted: true, highest: 12n })
          expect(await a.fence('res/shared', 11n)).toMatchObject({ accepted: false, highest: 12n })
          expect(await a.highest('res/shared')).toBe(12n)
        })

        test('two clients on the same state: 100 shuffled tokens split between them', async () => {
          const a = await open()
          const b = await openSecond()
          const results = await Promise.all(tokens.map((t, i) => (i % 2 ? b : a).fence('res/race2', t)))
          checkRace(tokens, results)
          expect(await a.highest('res/race2')).toBe(100n)
          expect(await b.highest('res/race2')).toBe(100n)
        })

        test('two clients on the same state: 100 concurrent claims of one key, exactly one claimed', async () => {
          const a = await open()
          const b = await openSecond()
          const k = key('shared-key')
          const results = await Promise.all(
            Array.from({ length: 100 }, (_, i) => (i % 2 ? b : a).claim(k, req(`c${i}`), T0)),
          )
          expect(results.filter((r) => r.kind === 'claimed')).toHaveLength(1)
          expect(results.filter((r) => r.kind === 'in_flight')).toHaveLength(99)
        })
      }
    })

    describe('claim', () => {
      test('a fresh key is claimed, with no `after`', async () => {
        const s = await open()
        const r = await s.claim(key(), req('c1'), T0)
        expect(r.kind).toBe('claimed')
        expect(r.kind === 'claimed' && r.after).toBeUndefined()
      })

      test('the same key and fingerprint while in flight is in_flight with the lease end', async () => {
        const s = await open()
        await s.claim(key(), req('c1', { leaseMs: 30_000 }), T0)
        expect(await s.claim(key(), req('c2', { leaseMs: 30_000 }), T0 + 5)).toEqual({ kind: 'in_flight', leaseUntil: T0 + 30_000 })
        // the first claim still holds it: it can finish
        await s.finish(key(), 'c1', { kind: 'not_stored', status: 200 }, 60_000, T0 + 10)
        expect(await s.claim(key(), req('c3'), T0 + 20)).toEqual({ kind: 'not_stored', status: 200 })
      })

      test('a different fingerprint is a mismatch, in flight and once completed', async () => {
        const s = await open()
        await s.claim(key(), req('c1'), T0)
        expect(await s.claim(key(), req('c2', { fingerprint: 'fp-other' }), T0 + 1)).toEqual({ kind: 'mismatch' })
        await s.finish(key(), 'c1', { kind: 'completed', response: sampleResponse() }, 60_000, T0 + 2)
        expect(await s.claim(key(), req('c3', { fingerprint: 'fp-other' }), T0 + 3)).toEqual({ kind: 'mismatch' })
        // the mismatch wrote nothing: the original fingerprint still replays
        expectResponse(await s.claim(key(), req('c4'), T0 + 4), sampleResponse())
      })

      test('after finish(completed) the response replays byte for byte', async () => {
        const s = await open()
        await s.claim(key(), req('c1'), T0)
        await s.finish(key(), 'c1', { kind: 'completed', response: sampleResponse() }, 60_000, T0 + 10)
        const r1 = await s.claim(key(), req('c2'), T0 + 20)
        expectResponse(r1, sampleResponse())
        // a second replay is the same, and (retryUnknown notwithstanding) still not a claim
        expectResponse(await s.claim(key(), req('c3', { retryUnknown: true }), T0 + 30), sampleResponse())
      })

      test('a completed response with an empty body replays with an empty body', async () => {
        const s = await open()
        const empty: StoredResponse = { status: 204, headers: [['x-a', '1']], body: Buffer.alloc(0) }
        await s.claim(key(), req('c1'), T0)
        await s.finish(key(), 'c1', { kind: 'completed', response: empty }, 60_000, T0 + 1)
        expectResponse(await s.claim(key(), req('c2'), T0 + 2), empty)
      })

      test('after finish(not_stored) a claim reports not_stored with the status', async () => {
        const s = await open()
        await s.claim(key(), req('c1'), T0)
        await s.finish(key(), 'c1', { kind: 'not_stored', status: 207 }, 60_000, T0 + 10)
        expect(await s.claim(key(), req('c2'), T0 + 20)).toEqual({ kind: 'not_stored', status: 207 })
        expect(await s.claim(key(), req('c3', { retryUnknown: true }), T0 + 30)).toEqual({ kind: 'not_stored', status: 207 })
      })

      test('release makes the key claimable again', async () => {
        const s = await open()
        await s.claim(key(), req('c1'), T0)
        await s.release(key(), 'c1')
        const r = await s.claim(key(), req('c2', { fingerprint: 'fp-new' }), T0 + 1)
        expect(r.kind).toBe('claimed')
        expect(r.kind === 'claimed' && r.after).toBeUndefined()
        // and c2 now holds it
        expect(await s.claim(key(), req('c3', { fingerprint: 'fp-new' }), T0 + 2)).toEqual({ kind: 'in_flight', leaseUntil: T0 + 1 + 10_000 })
      })

      test('release by a wrong claimId is a no-op', async () => {
        const s = await open()
        await s.claim(key(), req('c1'), T0)
        await s.release(key(), 'not-c1')
        expect(await s.claim(key(), req('c2'), T0 + 1)).toEqual({ kind: 'in_flight', leaseUntil: T0 + 10_000 })
      })

      test('finish by a wrong claimId is a no-op; the holder can still finish', async () => {
        const s = await open()
        await s.claim(key(), req('c1'), T0)
        await s.finish(key(), 'not-c1', { kind: 'not_stored', status: 500 }, 60_000, T0 + 1)
        expect(await s.claim(key(), req('c2'), T0 + 2)).toEqual({ kind: 'in_flight', leaseUntil: T0 + 10_000 })
        await s.finish(key(), 'c1', { kind: 'completed', response: sampleResponse() }, 60_000, T0 + 3)
        expectResponse(await s.claim(key(), req('c3'), T0 + 4), sampleResponse())
      })

      test('release and a second finish after completion are no-ops', async () => {
        const s = await open()
        await s.claim(key(), req('c1'), T0)
        await s.finish(key(), 'c1', { kind: 'completed', response: sampleResponse() }, 60_000, T0 + 1)
        await s.release(key(), 'c1')
        await s.finish(key(), 'c1', { kind: 'unknown', reason: 'reset' }, 60_000, T0 + 2)
        expectResponse(await s.claim(key(), req('c2'), T0 + 3), sampleResponse())
      })

      test('100 concurrent claims of one key: exactly one claimed, and it is the holder', async () => {
        const s = await open()
        const results = await Promise.all(Array.from({ length: 100 }, (_, i) => s.claim(key(), req(`c${i}`), T0)))
        const winners = results.flatMap((r, i) => (r.kind === 'claimed' ? [i] : []))
        expect(winners).toHaveLength(1)
        expect(results.filter((r) => r.kind === 'in_flight')).toHaveLength(99)
        // only the winner's claimId can finish it
        const losers = Array.from({ length: 100 }, (_, i) => i).filter((i) => i !== winners[0])
        await Promise.all(losers.map((i) => s.finish(key(), `c${i}`, { kind: 'not_stored', status: 500 }, 60_000, T0 + 1)))
        expect((await s.claim(key(), req('x'), T0 + 2)).kind).toBe('in_flight')
        await s.finish(key(), `c${winners[0]}`, { kind: 'completed', response: sampleResponse() }, 60_000, T0 + 3)
        expectResponse(await s.claim(key(), req('y'), T0 + 4), sampleResponse())
      })
    })

    test('a claim, its finish and a release made together with other keys answer each their own call', async () => {
      const s = await open()
      const k = (n: string): RecordKey => ({ ...key(), key: n })
      await Promise.all([s.claim(k('m1'), req('a'), T0), s.claim(k('m2'), req('b'), T0), s.claim(k('m3'), req('c'), T0)])
      await Promise.all([
        s.finish(k('m1'), 'a', { kind: 'completed', response: sampleResponse() }, 60_000, T0 + 1),
        s.release(k('m2'), 'b'),
        s.finish(k('m3'), 'c', { kind: 'unknown', reason: 'timeout' }, 60_000, T0 + 1),
      ])
      const [r1, r2, r3] = await Promise.all([s.claim(k('m1'), req('x'), T0 + 2), s.claim(k('m2'), req('y'), T0 + 2), s.claim(k('m3'), req('z'), T0 + 2)])
      expectResponse(r1, sampleResponse())
      expect(r2).toEqual({ kind: 'claimed' })
      expect(r3).toEqual({ kind: 'unknown', reason: 'timeout' })
    })

    describe('admit (fence, then claim when it accepts, as one call)', () => {
      test('a fresh resource and key: accepted and claimed', async () => {
        const s = await open()
        expect(await s.admit({ resource: 'res/adm', token: 4n }, key('adm-1'), req('a'), T0)).toEqual({ fence: { accepted: true, highest: 4n, since: T0, raised: true }, claim: { kind: 'claimed' } })
        expect(await s.highest('res/adm')).toBe(4n)
        expect((await s.claim(key('adm-1'), req('b'), T0 + 1)).kind).toBe('in_flight')
      })

      test('a stale token: refused with the mark, and the key is left untouched', async () => {
        const s = await open()
        await s.fence('res/adm', 9n, T0 - 5000)
        expect(await s.admit({ resource: 'res/adm', token: 3n }, key('adm-2'), req('a'), T0)).toEqual({ fence: { accepted: false, highest: 9n, since: T0 - 5000 } })
        expect(await s.claim(key('adm-2'), req('b'), T0 + 1)).toEqual({ kind: 'claimed' })
      })

      test('a completed key replays through admit; 50 concurrent admits of one key claim it once', async () => {
        const s = await open()
        const results = await Promise.all(Array.from({ length: 50 }, (_, i) => s.admit({ resource: 'res/adm', token: BigInt(i) }, key('adm-3'), req(`c${i}`), T0)))
        const claimed = results.filter((r) => r.claim?.kind === 'claimed')
        expect(claimed).toHaveLength(1)
        // every call either lost the fence to a higher token or found the key in flight
        for (const r of results) if (r.claim?.kind !== 'claimed') expect(r.fence.accepted ? r.claim?.kind : 'stale').toMatch(/^(in_flight|stale)$/)
        const winner = results.indexOf(claimed[0])
        await s.finish(key('adm-3'), `c${winner}`, { kind: 'completed', response: sampleResponse() }, 60_000, T0 + 1)
        const again = await s.admit({ resource: 'res/adm', token: 49n }, key('adm-3'), req('z'), T0 + 2)
        expect(again.fence).toMatchObject({ accepted: true, highest: 49n })
        expectResponse(again.claim!, sampleResponse())
      })

      test('half-failed (the claim step fails, the store still answers): StoreError, the mark as a lone fence leaves it, no claim held; the retry is admitted', async () => {
        // required, not optional: a store that cannot show what a half-failed admit leaves behind fails here
        if (!options.failClaims) {
          throw new Error(`store conformance "${name}": its test file passes no options.failClaims. Every store must provide a fault injector ` +
            'that makes the claim step of admit fail while fences still work (ConformanceOptions.failClaims), so the suite can check ' +
            'what a half-failed admit leaves behind (src/store/contract/store.ts, Store.admit)')
        }
        const s = await open()
        await s.fence('res/half', 5n, T0 - 5_000)
        const heal = await options.failClaims(s)
        try {
          // a token above the mark: the fence raises it, then the claim step fails
          const err = await s.admit({ resource: 'res/half', token: 7n }, key(), req('h1'), T0).then(() => undefined, (e: unknown) => e)
          expect(err, 'admit whose claim step failed').toBeInstanceOf(StoreError)
          // the fence's decision stands (nothing lowers a mark): where a lone fence would have left it
          expect(await s.mark('res/half')).toEqual({ highest: 7n, since: T0 })
          // a stale token never reaches the claim step: refused, without error
          expect(await s.admit({ resource: 'res/half', token: 6n }, key(), req('h2'), T0 + 1)).toEqual({ fence: { accepted: false, highest: 7n, since: T0 } })
          // a plain fence still works under the fault
          expect(await s.fence('res/half', 7n, T0 + 2)).toEqual({ accepted: true, highest: 7n, since: T0 })
          expect(await s.fence('res/half-other', 3n, T0 + 2)).toEqual({ accepted: true, highest: 3n, since: T0 + 2, raised: true })
        } finally {
          await heal()
        }
        // no claim is held: the same admit with a new claimId is admitted and claims the key
        expect(await s.admit({ resource: 'res/half', token: 7n }, key(), req('h3'), T0 + 10)).toEqual({ fence: { accepted: true, highest: 7n, since: T0 }, claim: { kind: 'claimed' } })
        expect(await s.claim(key(), req('h4'), T0 + 11)).toEqual({ kind: 'in_flight', leaseUntil: T0 + 10 + 10_000 })
      })
    })

    describe('ttl', () => {
      test('a completed record past its ttl is claimable again', async () => {
        const s = await open()
        await s.claim(key(), req('c1', { ttlMs: 60_000 }), T0)
        await s.finish(key(), 'c1', { kind: 'completed', response: sampleResponse() }, 60_000, T0 + 100)
        expectResponse(await s.claim(key(), req('c2'), T0 + 100 + 59_000), sampleResponse())
        const r = await s.claim(key(), req('c3', { fingerprint: 'fp-later' }), T0 + 100 + 60_001)
        expect(r.kind).toBe('claimed')
        expect(r.kind === 'claimed' && r.after).toBeUndefined()
      })

      test("finish's ttl counts from the finish, not from the claim", async () => {
        const s = await open()
        await s.claim(key(), req('c1', { ttlMs: 60_000, leaseMs: 55_000 }), T0)
        await s.finish(key(), 'c1', { kind: 'not_stored', status: 201 }, 60_000, T0 + 50_000)
        // past the claim's ttl (T0 + 60s) but within the finish's (T0 + 110s)
        expect(await s.claim(key(), req('c2'), T0 + 70_000)).toEqual({ kind: 'not_stored', status: 201 })
        expect((await s.claim(key(), req('c3'), T0 + 110_001)).kind).toBe('claimed')
      })
    })

    describe('lease expiry (an abandoned in-flight record)', () => {
      test('retryUnknown=false: reported unknown/crash (abandoned once), and unknown/crash again on the next claim', async () => {
        const s = await open()
        await s.claim(key(), req('c1', { leaseMs: 1_000 }), T0)
        expect(await s.claim(key(), req('c2'), T0 + 999)).toEqual({ kind: 'in_flight', leaseUntil: T0 + 1_000 })
        expect(await s.claim(key(), req('c3'), T0 + 1_500)).toEqual({ kind: 'unknown', reason: 'crash', abandoned: true })
        // `abandoned` marks only the call that found it; later ones read the stored unknown record
        expect(await s.claim(key(), req('c4'), T0 + 2_000)).toEqual({ kind: 'unknown', reason: 'crash' })
        expect(await s.claim(key(), req('c5'), T0 + 2_500)).toEqual({ kind: 'unknown', reason: 'crash' })
        // a later retrying client takes it over, learning what came before
        expect(await s.claim(key(), req('c6', { retryUnknown: true }), T0 + 3_000)).toEqual({ kind: 'claimed', after: 'crash' })
      })

      test('retryUnknown=true: taken over as claimed with after=crash; the new holder holds it', async () => {
        const s = await open()
        await s.claim(key(), req('c1', { leaseMs: 1_000 }), T0)
        expect(await s.claim(key(), req('c2', { retryUnknown: true, leaseMs: 1_000 }), T0 + 1_500)).toEqual({ kind: 'claimed', after: 'crash', abandoned: true })
        expect(await s.claim(key(), req('c3', { retryUnknown: true }), T0 + 1_600)).toEqual({ kind: 'in_flight', leaseUntil: T0 + 2_500 })
      })

      test('concurrent claims of an abandoned record: abandoned is reported exactly once', async () => {
        const s = await open()
        await s.claim(key(), req('c1', { leaseMs: 1_000 }), T0)
        const results = await Promise.all(Array.from({ length: 50 }, (_, i) => s.claim(key(), req(`c${i + 2}`), T0 + 1_500)))
        for (const r of results) expect(r).toMatchObject({ kind: 'unknown', reason: 'crash' })
        expect(results.filter((r) => r.kind === 'unknown' && r.abandoned)).toHaveLength(1)
      })

      test('concurrent retrying claims of an abandoned record: exactly one takes it over', async () => {
        const s = await open()
        await s.claim(key(), req('c1', { leaseMs: 1_000 }), T0)
        const results = await Promise.all(
          Array.from({ length: 50 }, (_, i) => s.claim(key(), req(`c${i + 2}`, { retryUnknown: true }), T0 + 1_500)),
        )
        const claimed = results.filter((r) => r.kind === 'claimed')
        expect(claimed).toEqual([{ kind: 'claimed', after: 'crash', abandoned: true }])
        expect(results.filter((r) => r.kind === 'in_flight')).toHaveLength(49)
      })

      test('after a takeover the old holder cannot finish or release; the new holder can', async () => {
        const s = await open()
        await s.claim(key(), req('old', { leaseMs: 1_000 }), T0)
        expect((await s.claim(key(), req('new', { retryUnknown: true, leaseMs: 30_000 }), T0 + 1_500)).kind).toBe('claimed')

        const stale: StoredResponse = { status: 500, headers: [['x-from', 'old']], body: Buffer.from('old') }
        await s.finish(key(), 'old', { kind: 'completed', response: stale }, 60_000, T0 + 1_600)
        await s.release(key(), 'old')
        expect(await s.claim(key(), req('probe'), T0 + 1_700)).toEqual({ kind: 'in_flight', leaseUntil: T0 + 31_500 })

        await s.finish(key(), 'new', { kind: 'completed', response: sampleResponse() }, 60_000, T0 + 2_000)
        expectResponse(await s.claim(key(), req('probe2'), T0 + 2_100), sampleResponse())
      })
    })

    describeRelease(open)
    const onStoreClock = options.onStoreClock && (async () => {
      const s = await options.onStoreClock!()
      opened.push(s)
      return s
    })
    describeSettle(open, onStoreClock)
    describeLeases(open, options.makeSecond && openSecond, onStoreClock)

    describe('renew (the gateway keeps its live claim)', () => {
      test('renewing moves the lease end: the record stays in flight past its first lease, then lapses without renewal', async () => {
        const s = await open()
        await s.claim(key(), req('c1', { leaseMs: 1_000 }), T0)
        expect(await s.renew(key(), 'c1', 1_000, T0 + 800)).toBe(true)
        expect(await s.claim(key(), req('c2'), T0 + 1_500)).toEqual({ kind: 'in_flight', leaseUntil: T0 + 1_800 })
        expect(await s.renew(key(), 'c1', 1_000, T0 + 1_700)).toBe(true)
        expect(await s.claim(key(), req('c3'), T0 + 2_600)).toEqual({ kind: 'in_flight', leaseUntil: T0 + 2_700 })
        // no renewal any more: the holder stopped, its claim lapses into an unknown outcome
        expect(await s.claim(key(), req('c4'), T0 + 2_800)).toEqual({ kind: 'unknown', reason: 'crash', abandoned: true })
      })

      test('a wrong claimId, a finished, a released or a taken-over record is not renewed (false, nothing written)', async () => {
        const s = await open()
        await s.claim(key(), req('c1', { leaseMs: 1_000 }), T0)
        expect(await s.renew(key(), 'other', 60_000, T0 + 100)).toBe(false)
        expect(await s.claim(key(), req('c2'), T0 + 200)).toEqual({ kind: 'in_flight', leaseUntil: T0 + 1_000 })
        await s.finish(key(), 'c1', { kind: 'completed', response: sampleResponse() }, 60_000, T0 + 300)
        expect(await s.renew(key(), 'c1', 60_000, T0 + 400)).toBe(false)
        expectResponse(await s.claim(key(), req('c3'), T0 + 500), sampleResponse())

        await s.claim(key('k2'), req('r1', { leaseMs: 1_000 }), T0)
        await s.release(key('k2'), 'r1')
        expect(await s.renew(key('k2'), 'r1', 60_000, T0 + 100)).toBe(false)
        expect(await s.claim(key('k2'), req('r2'), T0 + 200)).toEqual({ kind: 'claimed' })

        await s.claim(key('k3'), req('old', { leaseMs: 1_000 }), T0)
        expect((await s.claim(key('k3'), req('new', { retryUnknown: true, leaseMs: 1_000 }), T0 + 1_500)).kind).toBe('claimed')
        expect(await s.renew(key('k3'), 'old', 60_000, T0 + 1_600)).toBe(false)
        expect(await s.claim(key('k3'), req('probe'), T0 + 1_700)).toEqual({ kind: 'in_flight', leaseUntil: T0 + 2_500 })
        expect(await s.renew(key('nothing-here'), 'x', 60_000, T0)).toBe(false)
      })
    })

    describe('unknowns (the records an operator must settle)', () => {
      const sorted = (xs: Awaited<ReturnType<Store['unknowns']>>) => xs.map((u) => ({ ...u, key: { ...u.key } })).sort((a, b) => (a.key.key < b.key.key ? -1 : 1))

      test('lists finished-unknown records and in-flight ones past their lease (crash), nothing else, per route', async () => {
        const s = await open()
        const scoped = key('k-timeout', 'POST /orders', 'b'.repeat(64))
        await s.claim(scoped, req('c1'), T0)
        await s.finish(scoped, 'c1', { kind: 'unknown', reason: 'timeout' }, 60_000, T0 + 100)
        await s.claim(key('k-crash:%{x}'), req('c2', { leaseMs: 1_000 }), T0)
        await s.claim(key('k-live'), req('c3', { leaseMs: 10_000 }), T0)
        await s.claim(key('k-done'), req('c4'), T0)
        await s.finish(key('k-done'), 'c4', { kind: 'completed', response: sampleResponse() }, 60_000, T0 + 100)
        await s.claim(key('k-other', 'POST /refunds'), req('c5'), T0)
        await s.finish(key('k-other', 'POST /refunds'), 'c5', { kind: 'unknown', reason: 'reset' }, 60_000, T0 + 100)

        expect(sorted(await s.unknowns(T0 + 2_000, { route: 'POST /orders' }))).toEqual([
          { key: key('k-crash:%{x}'), reason: 'crash', leaseUntil: T0 + 1_000, expiresAt: T0 + 86_400_000 },
          { key: scoped, reason: 'timeout', leaseUntil: 0, expiresAt: T0 + 60_100 },
        ])
        expect((await s.unknowns(T0 + 2_000)).map((u) => u.key.key).sort()).toEqual(['k-crash:%{x}', 'k-other', 'k-timeout'])
        expect(await s.unknowns(T0 + 2_000, { route: 'GET /nothing' })).toEqual([])
        // resolved, or past its ttl: gone from the list
        await s.resolve(scoped, 'failed', 60_000, T0 + 3_000)
        expect((await s.unknowns(T0 + 3_000, { route: 'POST /orders' })).map((u) => u.key.key)).toEqual(['k-crash:%{x}'])
        expect((await s.unknowns(T0 + 70_000, { route: 'POST /refunds' }))).toEqual([])
      })

      test('a crash found by a later claim stays listed; limit caps the list', async () => {
        const s = await open()
        for (let i = 0; i < 5; i++) {
          await s.claim(key(`k${i}`), req(`c${i}`, { leaseMs: 1_000 }), T0)
        }
        expect((await s.claim(key('k0'), req('probe'), T0 + 1_500)).kind).toBe('unknown')
        const all = await s.unknowns(T0 + 1_500)
        expect(all.map((u) => u.key.key).sort()).toEqual(['k0', 'k1', 'k2', 'k3', 'k4'])
        expect(all.every((u) => u.reason === 'crash')).toBe(true)
        expect((await s.unknowns(T0 + 1_500, { limit: 2 })).length).toBe(2)
      })
    })

    describe('finish(unknown)', () => {
      test('reason timeout, retryUnknown=false: claims report unknown/timeout', async () => {
        const s = await open()
        await s.claim(key(), req('c1'), T0)
        await s.finish(key(), 'c1', { kind: 'unknown', reason: 'timeout' }, 60_000, T0 + 10)
        expect(await s.claim(key(), req('c2'), T0 + 20)).toEqual({ kind: 'unknown', reason: 'timeout' })
        expect(await s.claim(key(), req('c3'), T0 + 30)).toEqual({ kind: 'unknown', reason: 'timeout' })
      })

      test('reason timeout, retryUnknown=true: claimed with after=timeout, then held by the new claim', async () => {
        const s = await open()
        await s.claim(key(), req('c1'), T0)
        await s.finish(key(), 'c1', { kind: 'unknown', reason: 'timeout' }, 60_000, T0 + 10)
        expect(await s.claim(key(), req('c2', { retryUnknown: true }), T0 + 20)).toEqual({ kind: 'claimed', after: 'timeout' })
        expect(await s.claim(key(), req('c3', { retryUnknown: true }), T0 + 30)).toEqual({ kind: 'in_flight', leaseUntil: T0 + 20 + 10_000 })
      })

      test('every unknown reason is kept as written', async () => {
        const s = await open()
        const reasons: UnknownReason[] = ['timeout', 'reset', 'client_abort', 'crash']
        for (const reason of reasons) {
          const k = key(`k-${reason}`)
          await s.claim(k, req('c1'), T0)
          await s.finish(k, 'c1', { kind: 'unknown', reason }, 60_000, T0 + 1)
        }
        for (const reason of reasons) {
          const k = key(`k-${reason}`)
          expect(await s.claim(k, req('c2'), T0 + 2)).toEqual({ kind: 'unknown', reason })
          expect(await s.claim(k, req('c3', { retryUnknown: true }), T0 + 3)).toEqual({ kind: 'claimed', after: reason })
        }
      })
    })

    describe('key scoping', () => {
      test('the same key on another route is an independent record', async () => {
        const s = await open()
        const a = key('k', 'POST /orders')
        const b = key('k', 'POST /payments')
        expect((await s.claim(a, req('c1'), T0)).kind).toBe('claimed')
        expect((await s.claim(b, req('c2', { fingerprint: 'fp-other' }), T0)).kind).toBe('claimed')
        await s.finish(a, 'c1', { kind: 'completed', response: sampleResponse() }, 60_000, T0 + 1)
        expect(await s.claim(b, req('c3', { fingerprint: 'fp-other' }), T0 + 2)).toEqual({ kind: 'in_flight', leaseUntil: T0 + 10_000 })
        await s.release(b, 'c2')
        expectResponse(await s.claim(a, req('c4'), T0 + 3), sampleResponse())
        expect((await s.claim(b, req('c5'), T0 + 4)).kind).toBe('claimed')
      })

      test('the same key under another scope is an independent record', async () => {
        const s = await open()
        const a = key('k', 'POST /orders', 'a'.repeat(64))
        const b = key('k', 'POST /orders', 'b'.repeat(64))
        expect((await s.claim(a, req('c1'), T0)).kind).toBe('claimed')
        expect((await s.claim(b, req('c2', { fingerprint: 'fp-other' }), T0)).kind).toBe('claimed')
        await s.finish(b, 'c2', { kind: 'unknown', reason: 'reset' }, 60_000, T0 + 1)
        expect(await s.claim(a, req('c3'), T0 + 2)).toEqual({ kind: 'in_flight', leaseUntil: T0 + 10_000 })
        expect(await s.claim(b, req('c4', { fingerprint: 'fp-other' }), T0 + 3)).toEqual({ kind: 'unknown', reason: 'reset' })
      })
    })

    describe('resolve (an operator settles an unknown outcome)', () => {
      const unknownKey = async (s: Store, k: RecordKey, reason: UnknownReason = 'timeout') => {
        await s.claim(k, req('c1'), T0)
        await s.finish(k, 'c1', { kind: 'unknown', reason }, 60_000, T0 + 10)
      }

      test('failed: the record is released, reporting the reason; the key is claimable as new', async () => {
        const s = await open()
        await unknownKey(s, key(), 'reset')
        expect(await s.resolve(key(), 'failed', 60_000, T0 + 20)).toEqual({ kind: 'resolved', reason: 'reset' })
        const r = await s.claim(key(), req('c2', { fingerprint: 'fp-new' }), T0 + 30)
        expect(r).toEqual({ kind: 'claimed' })
        // once resolved there is nothing unknown left to resolve
        expect(await s.resolve(key(), 'failed', 60_000, T0 + 40)).toEqual({ kind: 'refused', state: 'in_flight' })
      })

      test('completed: later claims get not_stored with status 0, retryUnknown or not, for the ttl from the resolution', async () => {
        const s = await open()
        await unknownKey(s, key())
        expect(await s.resolve(key(), 'completed', 60_000, T0 + 1_000)).toEqual({ kind: 'resolved', reason: 'timeout' })
        expect(await s.claim(key(), req('c2'), T0 + 2_000)).toEqual({ kind: 'not_stored', status: 0 })
        expect(await s.claim(key(), req('c3', { retryUnknown: true }), T0 + 3_000)).toEqual({ kind: 'not_stored', status: 0 })
        // the fingerprint is kept: another request under the key is still a mismatch
        expect(await s.claim(key(), req('c4', { fingerprint: 'fp-other' }), T0 + 4_000)).toEqual({ kind: 'mismatch' })
        expect(await s.claim(key(), req('c5'), T0 + 1_000 + 59_999)).toEqual({ kind: 'not_stored', status: 0 })
        expect((await s.claim(key(), req('c6'), T0 + 1_000 + 60_001)).kind).toBe('claimed')
      })

      test('an in-flight record past its lease (a crashed holder) can be resolved, reason crash', async () => {
        const s = await open()
        await s.claim(key(), req('c1', { leaseMs: 1_000 }), T0)
        expect(await s.resolve(key(), 'failed', 60_000, T0 + 999)).toEqual({ kind: 'refused', state: 'in_flight' })
        expect(await s.resolve(key(), 'failed', 60_000, T0 + 1_500)).toEqual({ kind: 'resolved', reason: 'crash' })
        expect(await s.claim(key(), req('c2'), T0 + 1_600)).toEqual({ kind: 'claimed' })
        // and the old holder cannot write over the new claim
        await s.finish(key(), 'c1', { kind: 'completed', response: sampleResponse() }, 60_000, T0 + 1_700)
        expect(await s.claim(key(), req('c3'), T0 + 1_800)).toEqual({ kind: 'in_flight', leaseUntil: T0 + 1_600 + 10_000 })
      })

      test('a record whose outcome is known is refused and left alone; a missing or expired one is not_found', async () => {
        const s = await open()
        await s.claim(key('done'), req('c1'), T0)
        await s.finish(key('done'), 'c1', { kind: 'completed', response: sampleResponse() }, 60_000, T0 + 1)
        expect(await s.resolve(key('done'), 'failed', 60_000, T0 + 2)).toEqual({ kind: 'refused', state: 'completed' })
        expectResponse(await s.claim(key('done'), req('c2'), T0 + 3), sampleResponse())
        await s.claim(key('big'), req('c1'), T0)
        await s.finish(key('big'), 'c1', { kind: 'not_stored', status: 201 }, 60_000, T0 + 1)
        expect(await s.resolve(key('big'), 'completed', 60_000, T0 + 2)).toEqual({ kind: 'refused', state: 'not_stored' })
        expect(await s.resolve(key('never'), 'failed', 60_000, T0)).toEqual({ kind: 'not_found' })
        await unknownKey(s, key('old'))
        expect(await s.resolve(key('old'), 'failed', 60_000, T0 + 10 + 60_001)).toEqual({ kind: 'not_found' })
      })

      test('resolve touches only its own route and scope', async () => {
        const s = await open()
        await unknownKey(s, key('k', 'r1'))
        await unknownKey(s, key('k', 'r2'))
        await unknownKey(s, key('k', 'r1', 'b'.repeat(64)))
        expect((await s.resolve(key('k', 'r1'), 'failed', 60_000, T0 + 20)).kind).toBe('resolved')
        expect(await s.claim(key('k', 'r2'), req('c2'), T0 + 30)).toEqual({ kind: 'unknown', reason: 'timeout' })
        expect(await s.claim(key('k', 'r1', 'b'.repeat(64)), req('c2'), T0 + 30)).toEqual({ kind: 'unknown', reason: 'timeout' })
      })
    })

    describe('since (when the mark was first accepted, kept with it)', () => {
      test('the first token and every higher one set it; an equal token keeps it; a refusal reports it', async () => {
        const s = await open()
        expect(await s.fence('res/since', 5n, T0)).toEqual({ accepted: true, highest: 5n, since: T0, raised: true })
        expect(await s.fence('res/since', 5n, T0 + 100)).toEqual({ accepted: true, highest: 5n, since: T0 })
        expect(await s.fence('res/since', 4n, T0 + 200)).toEqual({ accepted: false, highest: 5n, since: T0 })
        expect(await s.fence('res/since', 7n, T0 + 300)).toEqual({ accepted: true, highest: 7n, since: T0 + 300, raised: true })
        expect(await s.fence('res/since', 5n, T0 + 400)).toEqual({ accepted: false, highest: 7n, since: T0 + 300 })
        expect(await s.mark('res/since')).toEqual({ highest: 7n, since: T0 + 300 })
        expect(await s.highest('res/since')).toBe(7n)
        expect(await s.mark('res/never')).toBeUndefined()
        expect(await s.highest('res/never')).toBeUndefined()
        // reading never writes: the resource only read takes its first token as a new mark
        expect(await s.fence('res/never', 0n, T0 + 450)).toEqual({ accepted: true, highest: 0n, since: T0 + 450, raised: true })
        // resources keep their own
        expect(await s.fence('res/since2', 1n, T0 + 500)).toEqual({ accepted: true, highest: 1n, since: T0 + 500, raised: true })
        expect(await s.mark('res/since')).toEqual({ highest: 7n, since: T0 + 300 })
      })

      test('2^63-1 keeps its since too', async () => {
        const s = await open()
        expect(await s.fence('res/since-max', MAX_I64, T0)).toEqual({ accepted: true, highest: MAX_I64, since: T0, raised: true })
        expect(await s.fence('res/since-max', MAX_I64 - 1n, T0 + 1)).toEqual({ accepted: false, highest: MAX_I64, since: T0 })
      })

      test('admit: the fence takes admit\'s now as since; a stale token reports it and leaves the key alone', async () => {
        const s = await open()
        expect(await s.admit({ resource: 'res/since-adm', token: 3n }, key('sa-1'), req('a'), T0)).toEqual({ fence: { accepted: true, highest: 3n, since: T0, raised: true }, claim: { kind: 'claimed' } })
        expect(await s.admit({ resource: 'res/since-adm', token: 3n }, key('sa-2'), req('b'), T0 + 50)).toEqual({ fence: { accepted: true, highest: 3n, since: T0 }, claim: { kind: 'claimed' } })
        expect(await s.admit({ resource: 'res/since-adm', token: 2n }, key('sa-3'), req('c'), T0 + 60)).toEqual({ fence: { accepted: false, highest: 3n, since: T0 } })
        expect((await s.claim(key('sa-3'), req('d'), T0 + 61)).kind).toBe('claimed')
        expect(await s.mark('res/since-adm')).toEqual({ highest: 3n, since: T0 })
      })

      test('100 shuffled tokens at once, each with its own now: the mark ends with the since of the call that raised it to the max', async () => {
        const s = await open()
        const tokens = shuffled(Array.from({ length: 100 }, (_, i) => BigInt(i + 1)), 0xc0ffee)
        const results = await Promise.all(tokens.map((t) => s.fence('res/since-race', t, T0 + Number(t))))
        results.forEach((r, i) => {
          if (r.raised) expect(r).toEqual({ accepted: true, highest: tokens[i], since: T0 + Number(tokens[i]), raised: true })
          else if (!r.accepted) expect(r.since! > T0 + Number(tokens[i])).toBe(true)
        })
        expect(results[tokens.indexOf(100n)]).toEqual({ accepted: true, highest: 100n, since: T0 + 100, raised: true })
        expect(await s.mark('res/since-race')).toEqual({ highest: 100n, since: T0 + 100 })
      })

      if (options.makeSecond) {
        test('two clients on the same state: the since one wrote is what the other reads and reports', async () => {
          const a = await open()
          const b = await openSecond()
          expect(await a.fence('res/since-shared', 10n, T0)).toMatchObject({ accepted: true, since: T0, raised: true })
          expect(await b.fence('res/since-shared', 9n, T0 + 5)).toEqual({ accepted: false, highest: 10n, since: T0 })
          expect(await b.mark('res/since-shared')).toEqual({ highest: 10n, since: T0 })
          expect(await b.fence('res/since-shared', 11n, T0 + 9)).toMatchObject({ accepted: true, since: T0 + 9, raised: true })
          expect(await a.fence('res/since-shared', 10n, T0 + 10)).toEqual({ accepted: false, highest: 11n, since: T0 + 9 })
        })
      }
    })

    describe('audit log', () => {
      const now = Date.now()
      const at = (ms: number, over: Partial<AuditEntry>): AuditEntry => ({ time: now + ms, kind: 'attempt', replica: 'host:1', route: 'pay', ...over })

      test('counts per route what the gateway decided, in the window', async () => {
        const s = await open()
        await s.audit.append([
          at(-7_200_000, { outcome: 'forwarded', keyHash: 'k0' }), // before the window
          at(-1000, { outcome: 'forwarded', keyHash: 'k1', token: '33', resource: 'account:a', result: 'stored', status: 201, upstreamStatus: 201, durationMs: 3.5 }),
          at(-900, { outcome: 'replayed', keyHash: 'k1', result: 'replayed', status: 201 }),
          at(-800, { outcome: 'stale', keyHash: 'k1', token: '32', status: 412 }),
          at(-700, { outcome: 'token_missing', status: 428 }),
          at(-600, { outcome: 'in_flight', keyHash: 'k2', result: 'in_flight', status: 409 }),
          at(-500, { outcome: 'key_reused', keyHash: 'k2', result: 'key_reused', status: 422 }),
          at(-400, { outcome: 'forwarded', keyHash: 'k3', result: 'released', status: 503, upstreamStatus: 503 }),
          at(-300, { outcome: 'forwarded', keyHash: 'k4', duplicate: true, overtaken: true, result: 'stored' }),
          at(-200, { outcome: 'forwarded', route: 'other' }),
        ])
        const all = await s.audit.query(now - 3_600_000, now + 1, undefined)
        expect(all.map((c) => c.route)).toEqual(['other', 'pay'])
        expect(all[1]).toEqual({
          route: 'pay', attempts: 8, keys: 4, forwarded: 3, replayed: 1, stale: 1, tokenMissing: 1,
          inFlightConflicts: 1, keyReused: 1, released: 1, unknownOutcomes: { resolved: 0, unresolved: 0 },
          duplicateForwards: 1, overtaken: 1,
        })
        expect(await s.audit.query(now - 3_600_000, now + 1, 'other')).toEqual([expect.objectContaining({ route: 'other', attempts: 1, forwarded: 1, keys: 0 })])
        expect(await s.audit.query(now - 3_600_000, now + 1, 'nothing')).toEqual([])
        expect((await s.audit.query(now - 8_000_000, now + 1, 'pay'))[0].attempts).toBe(9)
      })

      test('timeline: the entries of some key hashes or of one resource, oldest first, every field kept, capped at the newest `limit`', async () => {
        const s = await open()
        const lease: AuditEntry = { time: now - 550, kind: 'lease', replica: 'host:1', route: LEASE_ROUTE, method: 'POST', resource: 'account:l', token: '9007199254740993', result: 'granted', by: 'worker-7', leaseUntil: now + 29_450, status: 201, durationMs: 1.25, requestId: 'req-l1' }
        const probe: AuditEntry = { time: now - 500, kind: 'probe', replica: 'host:1', route: 'pay', keyHash: 'k3', result: 'applied', upstreamStatus: 200, upstreamMs: 12.5, requestId: 'req-p1' }
        const full = at(-900, { method: 'POST', outcome: 'outcome_unknown', keyHash: 'k1', token: '33', resource: 'account:a', fingerprint: 'fp', result: 'stored', unknown: 'timeout', abandoned: true, duplicate: true, overtaken: true, status: 504, upstreamStatus: 201, durationMs: 2.25, upstreamMs: 1.5, lateMs: 41000.25, highestToken: '34', traceId: 'ab'.repeat(16), requestId: 'req-7f3a' })
        await s.audit.append([
          at(-7_200_000, { outcome: 'forwarded', keyHash: 'k1' }), // before `since`
          at(-1000, { outcome: 'forwarded', keyHash: 'k2', resource: 'account:b' }),
          full,
          at(-800, { outcome: 'stale', resource: 'account:a', token: '32' }),
          at(-700, { outcome: 'replayed', keyHash: 'k1', route: 'other' }),
          { time: now - 600, kind: 'resolve', replica: 'cli:1', route: 'pay', keyHash: 'k1', resolution: 'failed' },
          lease,
          probe,
        ])
        const since = now - 3_600_000
        const k1 = await s.audit.timeline({ keyHashes: ['k1'], route: 'pay' }, since, 100)
        expect(k1).toEqual([full, { time: now - 600, kind: 'resolve', replica: 'cli:1', route: 'pay', keyHash: 'k1', resolution: 'failed' }])
        expect((await s.audit.timeline({ keyHashes: ['k1', 'k2'] }, since, 100)).map((e) => e.time - now)).toEqual([-1000, -900, -700, -600])
        expect((await s.audit.timeline({ resource: 'account:a' }, since, 100)).map((e) => e.outcome)).toEqual(['outcome_unknown', 'stale'])
        expect((await s.audit.timeline({ keyHashes: ['k1', 'k2'] }, since, 2)).map((e) => e.time - now)).toEqual([-700, -600])
        expect(await s.audit.timeline({ keyHashes: ['none'] }, since, 100)).toEqual([])
        expect(await s.audit.timeline({}, since, 100)).toEqual([])
        // the page before: only entries older than `until`, still the newest `limit` of them
        expect((await s.audit.timeline({ keyHashes: ['k1', 'k2'], until: now - 700 }, since, 100)).map((e) => e.time - now)).toEqual([-1000, -900])
        expect((await s.audit.timeline({ keyHashes: ['k1', 'k2'], until: now - 600 }, since, 1)).map((e) => e.time - now)).toEqual([-700])
        // every entry of the window (the audit view's latest keys)
        expect((await s.audit.timeline({ all: true }, since, 100)).map((e) => e.time - now)).toEqual([-1000, -900, -800, -700, -600, -550, -500])
        // a lease entry on its resource's timeline, its end and holder kept; a probe on its key's
        expect(await s.audit.timeline({ resource: 'account:l' }, since, 100)).toEqual([lease])
        expect(await s.audit.timeline({ keyHashes: ['k3'] }, since, 100)).toEqual([probe])
        // operator actions (OPERATOR_KINDS): the resolution only; the lease service's and the probe's entries are not
        expect(await s.audit.timeline({ operator: true }, since, 100)).toEqual([{ time: now - 600, kind: 'resolve', replica: 'cli:1', route: 'pay', keyHash: 'k1', resolution: 'failed' }])
        expect((await s.audit.timeline({ all: true, route: 'other', until: now - 650 }, since, 100)).map((e) => e.time - now)).toEqual([-700])
      })

      test('text is kept as written: quotes, backslashes, line breaks, tabs and characters beyond ASCII, in a batch with plain entries', async () => {
        const s = await open()
        const odd = at(-500, { method: 'POST', keyHash: 'odd', resource: 'account:"q"\\b\n\tc', reason: 'checked é ☃ 😀 \u007f', by: 'ops "x"', fingerprint: '{"a":[1]}', outcome: 'forwarded', durationMs: 0.125 })
        await s.audit.append([at(-600, { outcome: 'forwarded', keyHash: 'odd' }), odd, at(-400, { outcome: 'replayed', keyHash: 'odd' })])
        const got = await s.audit.timeline({ keyHashes: ['odd'] }, now - 3_600_000, 100)
        expect(got.map((e) => e.time - now)).toEqual([-600, -500, -400])
        expect(got[1]).toEqual(odd)
      })

      test('fenced: the fenced attempts of a window, oldest first, only the route\'s when asked, capped at the newest `limit`', async () => {
        const s = await open()
        const write = at(-900, { method: 'POST', outcome: 'forwarded', resource: 'account:a', token: '33', status: 201, upstreamStatus: 201, upstreamMs: 12.25, durationMs: 14 })
        const late = at(-700, { method: 'POST', outcome: 'stale', resource: 'account:a', token: '32', status: 412, lateMs: 41_000 })
        await s.audit.append([
          at(-7_200_000, { outcome: 'forwarded', resource: 'account:a', token: '1' }), // before the window
          at(-1000, { outcome: 'forwarded', keyHash: 'k1' }), // not fenced
          write,
          at(-800, { outcome: 'forwarded', resource: 'account:b', token: '2', route: 'other' }),
          late,
          { time: now - 600, kind: 'resolve', replica: 'cli:1', route: 'pay', keyHash: 'k1', resolution: 'failed', resource: 'account:a' },
          at(+5000, { outcome: 'forwarded', resource: 'account:a', token: '34' }), // after the window
        ])
        const got = await s.audit.fenced(now - 3_600_000, now, 'pay', 100)
        expect(got.map((e) => e.time - now)).toEqual([-900, -700])
        expect(got[0]).toMatchObject({ resource: 'account:a', token: '33', outcome: 'forwarded', status: 201, upstreamStatus: 201, upstreamMs: 12.25 })
        expect(got[1]).toMatchObject({ resource: 'account:a', token: '32', outcome: 'stale', status: 412, lateMs: 41_000 })
        expect((await s.audit.fenced(now - 3_600_000, now, undefined, 100)).map((e) => e.time - now)).toEqual([-900, -800, -700])
        expect((await s.audit.fenced(now - 3_600_000, now, undefined, 2)).map((e) => e.time - now)).toEqual([-800, -700])
        expect(await s.audit.fenced(now - 3_600_000, now, 'nothing', 100)).toEqual([])
      })

      test('unknown outcomes count as resolved once a resolve entry for the key follows them', async () => {
        const s = await open()
        await s.audit.append([
          at(-1000, { outcome: 'outcome_unknown', keyHash: 'k1', unknown: 'timeout', status: 504 }),
          at(-900, { outcome: 'outcome_unknown', keyHash: 'k1', status: 409 }), // a repeat refused: not a new unknown outcome
          at(-800, { outcome: 'outcome_unknown', keyHash: 'k2', unknown: 'reset', status: 502 }),
          at(-700, { outcome: 'outcome_unknown', unknown: 'client_abort', status: 499 }), // no key: nothing to resolve
          at(-600, { outcome: 'outcome_unknown', keyHash: 'k3', abandoned: true, status: 409 }), // a crashed attempt found
          at(-500, { kind: 'resolve', keyHash: 'k1', resolution: 'failed' }),
          at(-400, { kind: 'resolve', keyHash: 'k3', resolution: 'completed' }),
          at(-300, { kind: 'resolve', keyHash: 'k2', resolution: 'failed', route: 'other' }), // another route's key
        ])
        const [pay] = await s.audit.query(now - 3_600_000, now + 1, 'pay')
        expect(pay.attempts).toBe(5)
        expect(pay.unknownOutcomes).toEqual({ resolved: 2, unresolved: 2 })
        // a resolution after the window's end does not count
        const [early] = await s.audit.query(now - 3_600_000, now - 450, 'pay')
        expect(early.unknownOutcomes).toEqual({ resolved: 1, unresolved: 3 })
      })
    })

    describe('state markers', () => {
      test('an opened store has an epoch; reading it twice gives the same; accept-loss marks it accepted', async () => {
        const s = await open()
        const first = await s.markers()
        expect(typeof first.epoch).toBe('string')
        expect(first.epoch).not.toBe('')
        expect((await s.markers()).epoch).toBe(first.epoch)
        const accepted = await s.acceptLoss()
        expect(accepted).toBe(first.epoch)
        expect(await s.markers()).toEqual({ epoch: first.epoch, accepted: first.epoch })
      })

      test('retiring the epoch leaves a loss note under a new, unaccepted epoch, seen by every client; accept-loss deletes the note', async () => {
        const s = await open()
        await s.acceptLoss()
        const { epoch } = await s.markers()
        const note: LossNote = { signal: 'sequence', now: '41', was: '57', seen: 'sequence 41 after 57 was seen', op: 'fence', at: T0, by: 'host-a:4242' }
        await s.retireEpoch(note)
        const retired = await s.markers()
        expect(retired.note).toEqual(note)
        // a new epoch (a Redis Cluster's copies still hold the old one: it reads as missing there)
        expect(retired.epoch).not.toBe(epoch)
        expect(retired.accepted).not.toBe(retired.epoch)
        if (options.makeSecond) expect(await (await openSecond()).markers()).toEqual(retired)
        const accepted = await s.acceptLoss()
        const after = await s.markers()
        expect(after.note).toBeUndefined()
        expect(after).toEqual({ epoch: accepted, accepted })
        expect(accepted).not.toBe(epoch)
      })

      test('the data and the epoch survive each other: fences and records do not change the marker', async () => {
        const s = await open()
        const { epoch } = await s.markers()
        await s.fence('res/marker', 3n)
        await s.claim(key(), req('m1'), T0)
        expect((await s.markers()).epoch).toBe(epoch)
      })
    })

    if (!options.unsequenced) {
      describe('write sequence (a store that went back in time)', () => {
        test('every write advances it; a store handed a sequence above its own refuses every write and changes nothing', async () => {
          const s = await open()
          const seq = s.sequence!
          await s.fence('res/seq', 5n, T0)
          const first = seq.seen
          expect(first).toBeGreaterThan(0n)
          await s.claim(key('seq-0'), req('s0'), T0)
          expect(seq.seen).toBe(first + 1n)
          // as after a failover to a replica that lacked the last 1000 writes
          seq.saw(first + 1000n)
          const writes: [string, () => Promise<unknown>][] = [
            ['fence', () => s.fence('res/seq', 9n, T0 + 1)],
            ['admit', () => s.admit({ resource: 'res/seq', token: 9n }, key('seq-1'), req('s1'), T0 + 1)],
            ['claim', () => s.claim(key('seq-1'), req('s1'), T0 + 1)],
            ['finish', () => s.finish(key('seq-0'), 's0', { kind: 'completed', response: sampleResponse() }, 60_000, T0 + 1)],
            ['release', () => s.release(key('seq-0'), 's0')],
            ['resolve', () => s.resolve(key('seq-0'), 'failed', 60_000, T0 + 20_000)],
            ['register', () => s.register('res/seq', 9n, 'w1', T0 + 60_000, T0 + 1)],
          ]
          for (const [op, write] of writes) {
            const e = await write().then(() => undefined, (x: unknown) => x)
            expect(e, op).toBeInstanceOf(StoreWentBack)
            expect((e as StoreWentBack).message, op).toMatch(/went back in time \(sequence \d+ after \d+ was seen\)/)
            // what the loss note records: the signal, the store's sequence and the one seen
            expect([(e as StoreWentBack).signal, BigInt((e as StoreWentBack).was)], op).toEqual(['sequence', first + 1000n])
            expect(BigInt((e as StoreWentBack).now), op).toBeLessThan(first + 1000n)
          }
          expect(seq.seen).toBe(first + 1000n)
          // nothing changed: the mark, the claim still in flight under s0, no record for seq-1, no registration
          expect(await s.mark('res/seq')).toEqual({ highest: 5n, since: T0 })
          seq.reset()
          expect(await s.claim(key('seq-0'), req('other'), T0 + 2)).toEqual({ kind: 'in_flight', leaseUntil: T0 + 10_000 })
          expect(await s.claim(key('seq-1'), req('s2'), T0 + 2)).toEqual({ kind: 'claimed' })
          expect(await s.olderRegistered('res/seq', 10n, T0 + 2)).toEqual({ until: 0 })
          // and the refused writes did not advance the store's sequence
          expect(seq.seen).toBe(first + 3n)
        })
      })
    }

    describe('registrations (fencing.serialize: store)', () => {
      // a resource of its own per call: the registrations table is not emptied between tests everywhere
      const fresh = (name: string) => `reg/${name}/${randomUUID()}`
      const D = T0 + 60_000 // a deadline well ahead of every `now` below

      test('a write registers when the mark is at or below its token (or there is none); with nothing older, no oldest', async () => {
        const s = await open()
        const r = fresh('first')
        await s.fence(r, 5n)
        expect(await s.register(r, 5n, 'a', D, T0)).toEqual({ registered: true, until: 0 })
        expect(await s.register(r, 9n, 'b', D, T0)).toEqual({ registered: true, oldest: 5n, until: D })
        expect(await s.register(fresh('unmarked'), 1n, 'x', D, T0)).toEqual({ registered: true, until: 0 })
      })

      test('the answer names the lowest older token and the latest deadline among the older ones; equal and newer tokens are not older', async () => {
        const s = await open()
        const r = fresh('older')
        await s.fence(r, 3n)
        await s.register(r, 3n, 'a', T0 + 10_000, T0)
        expect(await s.register(r, 3n, 'a2', T0 + 20_000, T0)).toEqual({ registered: true, until: 0 })
        await s.fence(r, 4n)
        await s.register(r, 4n, 'b', T0 + 30_000, T0)
        await s.fence(r, 5n)
        expect(await s.register(r, 5n, 'c', T0 + 5_000, T0)).toEqual({ registered: true, oldest: 3n, until: T0 + 30_000 })
        expect(await s.register(r, 5n, 'c2', T0 + 5_000, T0)).toEqual({ registered: true, oldest: 3n, until: T0 + 30_000 })
        expect(await s.olderRegistered(r, 4n, T0)).toEqual({ oldest: 3n, until: T0 + 20_000 })
        expect(await s.olderRegistered(r, 3n, T0)).toEqual({ until: 0 })
        expect(await s.olderRegistered(r, 6n, T0)).toEqual({ oldest: 3n, until: T0 + 30_000 })
      })

      test('a token below the mark is refused with the mark, and nothing is written', async () => {
        const s = await open()
        const r = fresh('refused')
        await s.fence(r, 7n)
        expect(await s.register(r, 6n, 'late', D, T0)).toEqual({ registered: false, highest: 7n })
        expect(await s.olderRegistered(r, 100n, T0)).toEqual({ until: 0 })
        // the same write with the current token is registered
        expect(await s.register(r, 7n, 'now', D, T0)).toEqual({ registered: true, until: 0 })
      })

      test('a registration counts until its deadline; the same id registered again is replaced', async () => {
        const s = await open()
        const r = fresh('expiry')
        await s.register(r, 1n, 'a', T0 + 100, T0)
        expect(await s.olderRegistered(r, 2n, T0 + 99)).toEqual({ oldest: 1n, until: T0 + 100 })
        expect(await s.olderRegistered(r, 2n, T0 + 100)).toEqual({ until: 0 })
        // an expired one is not reported by register either
        expect(await s.register(r, 2n, 'b', T0 + 1_000, T0 + 200)).toEqual({ registered: true, until: 0 })
        await s.register(r, 1n, 'a', T0 + 500, T0 + 200)
        expect(await s.olderRegistered(r, 2n, T0 + 300)).toEqual({ oldest: 1n, until: T0 + 500 })
        // replaced: one id, one registration
        await s.register(r, 3n, 'a', T0 + 700, T0 + 300)
        expect(await s.olderRegistered(r, 3n, T0 + 300)).toEqual({ oldest: 2n, until: T0 + 1_000 })
        expect(await s.olderRegistered(r, 4n, T0 + 300)).toEqual({ oldest: 2n, until: T0 + 1_000 })
      })

      test('unregister deletes; with `until` it keeps the registration until then, whatever its deadline; an unknown id is a no-op', async () => {
        const s = await open()
        const r = fresh('unregister')
        await s.register(r, 1n, 'a', D, T0)
        await s.unregister(r, 'a')
        expect(await s.olderRegistered(r, 2n, T0)).toEqual({ until: 0 })
        await s.register(r, 1n, 'held', T0 + 100, T0)
        await s.unregister(r, 'held', T0 + 5_000)
        expect(await s.olderRegistered(r, 2n, T0 + 4_999)).toEqual({ oldest: 1n, until: T0 + 5_000 })
        expect(await s.olderRegistered(r, 2n, T0 + 5_000)).toEqual({ until: 0 })
        // a hold may also shorten it
        const r2 = fresh('shortened')
        await s.register(r2, 1n, 'short', D, T0)
        await s.unregister(r2, 'short', T0 + 10)
        expect(await s.olderRegistered(r2, 2n, T0 + 9)).toEqual({ oldest: 1n, until: T0 + 10 })
        expect(await s.olderRegistered(r2, 2n, T0 + 10)).toEqual({ until: 0 })
        await s.unregister(r, 'nobody')
        await s.unregister(r, 'nobody', D)
        expect(await s.olderRegistered(r, 100n, T0 + 5_000)).toEqual({ until: 0 })
      })

      test('registrations belong to their resource', async () => {
        const s = await open()
        const [r1, r2] = [fresh('one'), fresh('two')]
        await s.register(r1, 1n, 'a', D, T0)
        expect(await s.olderRegistered(r2, 2n, T0)).toEqual({ until: 0 })
        expect(await s.register(r2, 2n, 'a', D, T0)).toEqual({ registered: true, until: 0 })
        await s.unregister(r2, 'a')
        expect(await s.olderRegistered(r1, 2n, T0)).toEqual({ oldest: 1n, until: D })
      })

      test('tokens compare exactly at the top of the range', async () => {
        const s = await open()
        const r = fresh('max')
        await s.fence(r, MAX_I64 - 1n)
        await s.register(r, MAX_I64 - 1n, 'a', D, T0)
        await s.fence(r, MAX_I64)
        expect(await s.register(r, MAX_I64, 'b', D, T0)).toEqual({ registered: true, oldest: MAX_I64 - 1n, until: D })
        expect(await s.register(r, MAX_I64 - 1n, 'c', D, T0)).toEqual({ registered: false, highest: MAX_I64 })
        expect(await s.olderRegistered(r, MAX_I64, T0)).toEqual({ oldest: MAX_I64 - 1n, until: D })
        expect(await s.olderRegistered(r, MAX_I64 - 1n, T0)).toEqual({ until: 0 })
      })

      if (options.makeSecond) {
        test('two clients on the same state: a registration made through one is seen, and ended, through the other', async () => {
          const a = await open()
          const b = await openSecond()
          const r = fresh('shared')
          await a.fence(r, 1n)
          await a.register(r, 1n, 'a', D, T0)
          await b.fence(r, 2n)
          expect(await b.register(r, 2n, 'b', D, T0)).toEqual({ registered: true, oldest: 1n, until: D })
          expect(await a.register(r, 1n, 'late', D, T0)).toEqual({ registered: false, highest: 2n })
          await b.unregister(r, 'a')
          expect(await a.olderRegistered(r, 2n, T0)).toEqual({ until: 0 })
        })

        test('two clients, 60 writes racing (fence, then register): no registered write misses an older registered one', async () => {
          const a = await open()
          const b = await openSecond()
          const r = fresh('race')
          const tokens = shuffled(Array.from({ length: 60 }, (_, i) => BigInt(i + 1)), 0x12)
          const outcomes = await Promise.all(tokens.map(async (t, i): Promise<[bigint, Registration | undefined]> => {
            const s = i % 2 ? b : a
            const f = await s.fence(r, t)
            return [t, f.accepted ? await s.register(r, t, `w${i}`, D, T0) : undefined]
          }))
          const registered = outcomes.filter(([, x]) => x?.registered) as [bigint, Registration & { registered: true }][]
          expect(registered.length).toBeGreaterThanOrEqual(1)
          for (const [t, answer] of registered) {
            const older = registered.filter(([u]) => u < t).map(([u]) => u)
            if (older.length === 0) continue
            const lowest = older.reduce((m, u) => (u < m ? u : m))
            // every registered older write was there when this one registered: the lowest of them at least
            expect(answer.oldest, `token ${t} registered without seeing older ${older.join(',')}`).toBeDefined()
            expect(answer.oldest! <= lowest).toBe(true)
          }
          // and every write refused at registration was below a mark a newer registered write had raised
          for (const [t, x] of outcomes) if (x && !x.registered) expect(x.highest > t).toBe(true)
        })
      }

      test('after close() the registration calls reject with StoreError', async () => {
        const s = await open()
        await s.close()
        for (const [op, call] of [
          ['register', () => s.register('res/a', 1n, 'a', D, T0)],
          ['older_registered', () => s.olderRegistered('res/a', 1n, T0)],
          ['unregister', () => s.unregister('res/a', 'a')],
        ] as [string, () => Promise<unknown>][]) {
          const err = await call().then(() => undefined, (e: unknown) => e)
          expect(err, `${op} after close()`).toBeInstanceOf(StoreError)
          expect((err as StoreError).op, `${op} after close()`).toBe(op)
        }
      })
    })

    describe.runIf(options.onStoreClock)('the store\'s own clock (src/store/shared/clock.ts)', () => {
      // this host's clock is the store's here, give or take a round trip
      const SLACK = 2_000
      const TEN_YEARS = 10 * 365 * 86_400_000
      const near = (t: number, want: number) => { expect(Math.abs(t - want)).toBeLessThan(SLACK) }
      const onClock = async () => {
        const s = await options.onStoreClock!()
        opened.push(s)
        return s
      }

      test('a claim\'s lease, a renewal, a finish\'s expiry and a mark\'s since come from the store, whatever `now` the caller passes', async () => {
        const s = await onClock()
        expect(s.clock?.reading).toBeDefined()
        near(s.clock!.reading!.offsetMs, 0)
        const r = await s.admit({ resource: 'res/clock', token: 1n }, key('clock-1'), req('a', { leaseMs: 60_000, ttlMs: 60_000 }), T0)
        expect(r.claim).toEqual({ kind: 'claimed' })
        near(r.fence.since!, Date.now())
        // ten years on by the caller's clock, the lease (60 s on the store's) still holds
        const held = await s.claim(key('clock-1'), req('b'), T0 + TEN_YEARS)
        expect(held.kind).toBe('in_flight')
        near((held as { leaseUntil: number }).leaseUntil, Date.now() + 60_000)
        expect(await s.renew(key('clock-1'), 'a', 120_000, T0)).toBe(true)
        near((await s.claim(key('clock-1'), req('c'), T0) as { leaseUntil: number }).leaseUntil, Date.now() + 120_000)
        // kept 60 s from the store's now, not from T0 (long past)
        await s.finish(key('clock-1'), 'a', { kind: 'not_stored', status: 200 }, 60_000, T0)
        expect(await s.claim(key('clock-1'), req('d'), T0 + TEN_YEARS)).toEqual({ kind: 'not_stored', status: 200 })
        expect((await s.mark('res/clock'))!.since).toBe(r.fence.since)
      })

      test('a lease that ended on the store\'s clock is abandoned and listed, whatever `now` says', async () => {
        const s = await onClock()
        await s.claim(key('clock-2'), req('a', { leaseMs: 0 }), T0 + TEN_YEARS)
        const listed = await s.unknowns(T0)
        expect(listed.map((u) => [u.key.key, u.reason])).toEqual([['clock-2', 'crash']])
        near(listed[0].expiresAt, Date.now() + 86_400_000)
        expect(await s.claim(key('clock-2'), req('b'), T0)).toEqual({ kind: 'unknown', reason: 'crash', abandoned: true })
      })

      test('a registration holds for its deadline minus `now`, on the store\'s clock', async () => {
        const s = await onClock()
        await s.register('res/clock-w', 1n, 'a', T0 + 5_000, T0)
        const older = await s.olderRegistered('res/clock-w', 2n, T0 + TEN_YEARS)
        expect(older.oldest).toBe(1n)
        near(older.until, Date.now() + 5_000)
        const second = await s.register('res/clock-w', 2n, 'b', T0 + 5_000, T0)
        expect(second).toMatchObject({ registered: true, oldest: 1n })
        await s.unregister('res/clock-w', 'a', Date.now() + 30_000)
        near((await s.olderRegistered('res/clock-w', 2n, T0)).until, Date.now() + 30_000)
        await s.unregister('res/clock-w', 'a')
        expect(await s.olderRegistered('res/clock-w', 2n, T0 + TEN_YEARS)).toEqual({ until: 0 })
      })
    })

    describe('close', () => {
      test('every call after close() rejects with StoreError naming it, the attempt log\'s included', async () => {
        const s = await open()
        await s.ping()
        await s.fence('res/a', 1n)
        await s.claim(key(), req('c1'), T0)
        await s.close()
        const calls: [string, () => Promise<unknown>][] = [
          ['fence', () => s.fence('res/a', 2n)],
          ['highest', () => s.highest('res/a')],
          ['mark', () => s.mark('res/a')],
          ['claim', () => s.claim(key(), req('c2'), T0 + 1)],
          ['admit', () => s.admit({ resource: 'res/a', token: 3n }, key('after-close'), req('c3'), T0 + 1)],
          ['finish', () => s.finish(key(), 'c1', { kind: 'not_stored', status: 200 }, 60_000, T0 + 1)],
          ['release', () => s.release(key(), 'c1')],
          ['renew', () => s.renew(key(), 'c1', 1_000, T0 + 1)],
          ['unknowns', () => s.unknowns(T0 + 1)],
          ['unknown_record', () => s.unknownRecord(key(), T0 + 1)],
          ['resolve', () => s.resolve(key(), 'failed', 60_000, T0 + 1)],
          ['ping', () => s.ping()],
          ['markers', () => s.markers()],
          ['accept_loss', () => s.acceptLoss()],
          // the attempt log is the store's too
          ['audit_append', () => s.audit.append([{ time: T0, kind: 'attempt', replica: 'host:1', route: 'pay', outcome: 'forwarded' }])],
          ['audit_query', () => s.audit.query(T0 - 1_000, T0 + 1_000)],
          ['audit_timeline', () => s.audit.timeline({ keyHashes: ['k1'] }, T0 - 1_000, 10)],
          ['audit_fenced', () => s.audit.fenced(T0 - 1_000, T0 + 1_000, undefined, 10)],
        ]
        for (const [op, call] of calls) {
          const err = await call().then(
            () => undefined,
            (e: unknown) => e,
          )
          expect(err, `${op} after close()`).toBeInstanceOf(StoreError)
          expect((err as StoreError).op, `${op} after close()`).toBe(op)
        }
      })
    })
  })
}
