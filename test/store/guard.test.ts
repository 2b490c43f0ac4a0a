// guardStore (src/store/runtime/guard.ts): every call of a store that is not in process is raced against
// `store.timeout`; the caller gets StoreError when the store is slower, and the request fails
// closed (503, nothing forwarded). A claim the slow store still makes after that is given back by
// its id (the store deletes it, or puts back the unknown outcome it took over), since nobody
// will finish it. Retrying a give-back past the lease: give-back.test.ts.
// Checked with a Store test double whose claim/admit answer when the test says, and with the real
// MemoryStore behind a proxy that holds its answers back.
import { afterEach, beforeEach, describe, expect, test, vi } from 'vitest'
import { guardStore, MemoryStore, StoreError, StoreFull, type ClaimResult, type Store } from '../../src/store/index.js'
import type { Metrics } from '../../src/telemetry/metrics.js'
import type { Logger } from '../../src/log.js'
import { key, req, T0 } from './conformance.js'
import { fakeLog, fakeMetrics, Scripted, settle, watch } from './scripted.js'

const TIMEOUT_MS = 50

let metrics: ReturnType<typeof fakeMetrics>
let log: ReturnType<typeof fakeLog>
const guard = (inner: Store) => guardStore(inner, metrics as unknown as Metrics, TIMEOUT_MS, log as unknown as Logger)

beforeEach(() => {
  metrics = fakeMetrics()
  log = fakeLog()
  vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] })
})
afterEach(() => { vi.useRealTimers() })

/** Makes the call, lets `store.timeout` pass, and checks the caller got StoreError then and not before. */
async function timedOut<T>(call: () => Promise<T>, op: string): Promise<void> {
  const s = watch(call())
  await vi.advanceTimersByTimeAsync(TIMEOUT_MS - 1)
  expect(s.done, 'settled before store.timeout').toBe(false)
  await vi.advanceTimersByTimeAsync(1)
  expect(s.done, 'not settled at store.timeout').toBe(true)
  expect(s.error).toBeInstanceOf(StoreError)
  expect((s.error as StoreError).op).toBe(op)
  expect((s.error as StoreError).message).toBe(`store did not answer ${op} within ${TIMEOUT_MS} ms`)
}

describe('guardStore: a call slower than store.timeout', () => {
  test('claim: the caller gets StoreError at the timeout; counted and logged under the op', async () => {
    const inner = new Scripted()
    await timedOut(() => guard(inner).claim(key(), req('c1'), T0), 'claim')
    expect(metrics.storeErrors.inc).toHaveBeenCalledTimes(1)
    expect(metrics.storeErrors.inc).toHaveBeenCalledWith({ store: 'redis', op: 'claim' })
    expect(metrics.storeDuration.observe).toHaveBeenCalledWith({ store: 'redis', op: 'claim' }, expect.any(Number))
    expect(log.error).toHaveBeenCalledTimes(1)
    expect(log.error.mock.calls[0][1]).toMatchObject({ store: 'redis', op: 'claim', error: `store did not answer claim within ${TIMEOUT_MS} ms` })
  })

  test('an answer after the timeout, an error or not, is neither counted nor measured again', async () => {
    const inner = new Scripted()
    const store = guard(inner)
    await timedOut(() => store.claim(key(), req('late-a'), T0), 'claim')
    await timedOut(() => store.claim(key('key-2'), req('late-b'), T0), 'claim')
    inner.held[0].fail(new Error('ECONNRESET'))
    inner.held[1].answer({ kind: 'claimed' })
    await settle()
    expect(metrics.storeErrors.inc).toHaveBeenCalledTimes(2)
    expect(metrics.storeDuration.observe.mock.calls.filter((c) => c[0].op === 'claim')).toHaveLength(2)
  })

  test('an outage logs its first failure once (later ones are summarised a minute on), and counts every failed call', async () => {
    const store = guard(new Scripted())
    await timedOut(() => store.claim(key(), req('c1'), T0), 'claim')
    await timedOut(() => store.claim(key(), req('c2'), T0), 'claim')
    await timedOut(() => store.admit({ resource: 'r', token: 1n }, key(), req('c3'), T0), 'admit')
    expect(metrics.storeErrors.inc.mock.calls).toEqual([[{ store: 'redis', op: 'claim' }], [{ store: 'redis', op: 'claim' }], [{ store: 'redis', op: 'admit' }]])
    expect(log.error.mock.calls.map((c) => c[1].op)).toEqual(['claim'])
  })

  test('an answer within the timeout is the answer: nothing counted, nothing given back', async () => {
    const inner = new Scripted()
    const s = watch(guard(inner).claim(key(), req('c1'), T0))
    await vi.advanceTimersByTimeAsync(TIMEOUT_MS - 1)
    inner.held[0].answer({ kind: 'claimed' })
    await settle()
    expect(s).toEqual({ done: true, value: { kind: 'claimed' } })
    await vi.advanceTimersByTimeAsync(TIMEOUT_MS)
    expect(inner.calls).toEqual([])
    expect(metrics.storeErrors.inc).not.toHaveBeenCalled()
  })

  test('a store in process (inProcess) is not raced: a slow answer is still the answer', async () => {
    const inner = new Scripted(true)
    const s = watch(guard(inner).claim(key(), req('c1'), T0))
    await vi.advanceTimersByTimeAsync(TIMEOUT_MS * 10)
    expect(s.done).toBe(false)
    inner.held[0].answer({ kind: 'claimed' })
    await settle()
    expect(s).toEqual({ done: true, value: { kind: 'claimed' } })
    expect(inner.calls).toEqual([])
  })
})

describe('guardStore: a claim that answers after the timeout is given back', () => {
  test('claim answers `claimed` late: released under its claimId', async () => {
    const inner = new Scripted()
    await timedOut(() => guard(inner).claim(key(), req('late-1'), T0), 'claim')
    expect(inner.calls).toEqual([])
    inner.held[0].answer({ kind: 'claimed' })
    await settle()
    expect(inner.calls).toEqual([['release', key(), 'late-1']])
  })

  test('claim answers `claimed` late after taking over an unknown outcome: given back by its id too (the store puts that outcome back)', async () => {
    const inner = new Scripted()
    await timedOut(() => guard(inner).claim(key(), req('late-2', { retryUnknown: true, ttlMs: 60_000 }), T0), 'claim')
    inner.held[0].answer({ kind: 'claimed', after: 'timeout' })
    await settle()
    expect(inner.calls).toEqual([['release', key(), 'late-2']])
  })

  test('admit answers accepted and `claimed` late: released under its claimId', async () => {
    const inner = new Scripted()
    await timedOut(() => guard(inner).admit({ resource: 'res/a', token: 7n }, key(), req('late-3'), T0), 'admit')
    inner.held[0].answer({ fence: { accepted: true, highest: 7n, since: T0, raised: true }, claim: { kind: 'claimed' } })
    await settle()
    expect(inner.calls).toEqual([['release', key(), 'late-3']])
  })

  test('admit answers `claimed` after a crashed holder late: given back by its id, the crash counted', async () => {
    const inner = new Scripted()
    await timedOut(() => guard(inner).admit({ resource: 'res/a', token: 7n }, key(), req('late-4', { retryUnknown: true }), T0), 'admit')
    inner.held[0].answer({ fence: { accepted: true, highest: 7n }, claim: { kind: 'claimed', after: 'crash', abandoned: true } })
    await settle()
    expect(inner.calls).toEqual([['release', key(), 'late-4']])
    // the crashed holder's unknown outcome is counted here: the request that found it got 503
    expect(metrics.unknownOutcomes.inc).toHaveBeenCalledTimes(1)
    expect(metrics.unknownOutcomes.inc).toHaveBeenCalledWith({ route: key().route, reason: 'crash' })
  })

  test('claim answers `unknown` (abandoned) late: nothing given back, the crash counted once', async () => {
    const inner = new Scripted()
    await timedOut(() => guard(inner).claim(key(), req('late-5'), T0), 'claim')
    inner.held[0].answer({ kind: 'unknown', reason: 'crash', abandoned: true })
    await settle()
    expect(inner.calls).toEqual([])
    expect(metrics.unknownOutcomes.inc).toHaveBeenCalledTimes(1)
    expect(metrics.unknownOutcomes.inc).toHaveBeenCalledWith({ route: key().route, reason: 'crash' })
  })

  const notClaimed: [string, ClaimResult][] = [
    ['completed (a replay)', { kind: 'completed', response: { status: 201, headers: [], body: Buffer.from('x') } }],
    ['not_stored', { kind: 'not_stored', status: 201 }],
    ['in_flight', { kind: 'in_flight', leaseUntil: T0 + 1_000 }],
    ['unknown', { kind: 'unknown', reason: 'reset', abandoned: true }],
    ['mismatch', { kind: 'mismatch' }],
  ]
  for (const [what, late] of notClaimed) {
    test(`claim answers ${what} late: nothing is given back`, async () => {
      const inner = new Scripted()
      await timedOut(() => guard(inner).claim(key(), req('c1'), T0), 'claim')
      inner.held[0].answer(late)
      await settle()
      expect(inner.calls).toEqual([])
    })
  }

  test('admit answers a stale token, or a key it did not claim, late: nothing is given back', async () => {
    const inner = new Scripted()
    const store = guard(inner)
    await timedOut(() => store.admit({ resource: 'res/a', token: 1n }, key(), req('c1'), T0), 'admit')
    await timedOut(() => store.admit({ resource: 'res/a', token: 9n }, key(), req('c2'), T0), 'admit')
    inner.held[0].answer({ fence: { accepted: false, highest: 5n } })
    inner.held[1].answer({ fence: { accepted: true, highest: 9n, raised: true }, claim: { kind: 'in_flight', leaseUntil: T0 + 1_000 } })
    await settle()
    expect(inner.calls).toEqual([])
  })

  test('a late failure without a reply (a reset: the claim may have run) gives the claim back by its id, and throws nowhere', async () => {
    const inner = new Scripted()
    await timedOut(() => guard(inner).claim(key(), req('c1'), T0), 'claim')
    inner.held[0].fail(new Error('connection reset'))
    await settle()
    expect(inner.calls).toEqual([['release', key(), 'c1']])
  })

  test('a store error before the timeout: StoreError at once, under the op, and the claim id released (a no-op when nothing was claimed)', async () => {
    const inner = new Scripted()
    const s = watch(guard(inner).claim(key(), req('c1'), T0))
    inner.held[0].fail(new Error('WRONGTYPE Operation against a key holding the wrong kind of value'))
    await settle()
    expect(s.done).toBe(true)
    expect(s.error).toBeInstanceOf(StoreError)
    expect(s.error).toMatchObject({ op: 'claim', message: 'redis claim: WRONGTYPE Operation against a key holding the wrong kind of value' })
    expect(metrics.storeErrors.inc).toHaveBeenCalledWith({ store: 'redis', op: 'claim' })
    expect(inner.calls).toEqual([['release', key(), 'c1']])
  })

  test('a full store that refused the claim (StoreFull): 503 at once, counted under its limit, and nothing given back (no claim was made)', async () => {
    const inner = new Scripted()
    const s = watch(guard(inner).claim(key(), req('c1'), T0))
    inner.held[0].fail(new StoreFull('the memory store holds 3 unexpired idempotency records', 'claim', 'max_records', 3))
    await settle()
    await vi.advanceTimersByTimeAsync(60_000)
    expect(s.error).toBeInstanceOf(StoreFull)
    expect(metrics.storeFull.inc).toHaveBeenCalledWith({ store: 'redis', limit: 'max_records' })
    expect(inner.calls).toEqual([])
  })

  test('register answers `registered` late: unregistered, so it does not hold newer tokens back', async () => {
    const inner = new Scripted()
    await timedOut(() => guard(inner).register('res/a', 7n, 'w1', T0 + 60_000, T0), 'register')
    inner.held[0].answer({ registered: true, until: 0 })
    await settle()
    expect(inner.calls).toEqual([['unregister', 'res/a', 'w1', undefined]])
  })
})

/**
 * The real MemoryStore behind a proxy that runs `claim` and `admit` at once (the store applies
 * them) but holds their answers back until `deliver()`: a store whose answer comes late. Not in
 * process, so guardStore races it.
 */
function slowAnswers(inner: MemoryStore): { store: Store; deliver(): void } {
  const waiting: (() => void)[] = []
  const store = new Proxy(inner, {
    get(target, prop) {
      if (prop === 'inProcess') return false
      const v = Reflect.get(target, prop, target) as unknown
      if (typeof v !== 'function') return v
      const f = (v as (...a: unknown[]) => Promise<unknown>).bind(target)
      if (prop !== 'claim' && prop !== 'admit') return f
      return (...args: unknown[]) => {
        const answer = f(...args)
        return new Promise((resolve) => waiting.push(() => resolve(answer)))
      }
    },
  }) as unknown as Store
  return { store, deliver: () => { for (const w of waiting.splice(0)) w() } }
}

describe('guardStore on a real MemoryStore whose answers come late', () => {
  test('a late claim is released: the key is free again', async () => {
    const mem = new MemoryStore()
    const slow = slowAnswers(mem)
    await timedOut(() => guard(slow.store).claim(key(), req('late'), T0), 'claim')
    // the store made the claim; its answer has not come back yet
    expect(await mem.claim(key(), req('probe'), T0 + 1)).toEqual({ kind: 'in_flight', leaseUntil: T0 + 10_000 })
    slow.deliver()
    await settle()
    expect(await mem.claim(key(), req('next'), T0 + 2)).toEqual({ kind: 'claimed' })
  })

  test('a late takeover of an unknown outcome is put back: the key still reads as that unknown outcome', async () => {
    const mem = new MemoryStore()
    await mem.claim(key(), req('first'), T0)
    await mem.finish(key(), 'first', { kind: 'unknown', reason: 'timeout' }, 60_000, T0 + 10)
    const slow = slowAnswers(mem)
    await timedOut(() => guard(slow.store).claim(key(), req('late', { retryUnknown: true }), T0 + 20), 'claim')
    slow.deliver()
    await settle()
    expect(await mem.claim(key(), req('at-most-once'), T0 + 30)).toEqual({ kind: 'unknown', reason: 'timeout' })
    expect((await mem.unknowns(T0 + 30)).map((u) => [u.key.key, u.reason])).toEqual([[key().key, 'timeout']])
    // a retrying client still learns what came before (a possible duplicate effect)
    expect(await mem.claim(key(), req('retry', { retryUnknown: true }), T0 + 40)).toEqual({ kind: 'claimed', after: 'timeout' })
  })

  test('a late admit: the claim is released, the raised mark stays', async () => {
    const mem = new MemoryStore()
    await mem.fence('res/a', 5n, T0 - 1_000)
    const slow = slowAnswers(mem)
    await timedOut(() => guard(slow.store).admit({ resource: 'res/a', token: 7n }, key(), req('late'), T0), 'admit')
    slow.deliver()
    await settle()
    expect(await mem.mark('res/a')).toEqual({ highest: 7n, since: T0 })
    expect(await mem.admit({ resource: 'res/a', token: 7n }, key(), req('next'), T0 + 1)).toEqual({ fence: { accepted: true, highest: 7n, since: T0 }, claim: { kind: 'claimed' } })
  })
})
