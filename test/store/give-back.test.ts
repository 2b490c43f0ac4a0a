// guardStore's give-backs (src/store/runtime/give-back.ts): a claim the gateway never used — its reply was
// lost, or a release went unanswered — is given back by its id until the store takes it, also
// long past the claim's lease (the store then undoes the unknown outcome that lease made), within
// the record's ttl; while the store fails one is tried at a time, each in turn (a failed one goes to
// the back), after a pause doubling to 5 s.
// Checked with the Store test double of ./scripted.ts on fake timers (time itself included).
import { afterEach, beforeEach, describe, expect, test, vi } from 'vitest'
import { guardStore, StoreError, type Store } from '../../src/store/index.js'
import { keyHashOf } from '../../src/idempotency/record-key.js'
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
  vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'performance'] })
})
afterEach(() => { vi.useRealTimers() })

/** A claim of `key(k)` whose reply is lost (a reset before any answer): the caller gets StoreError. */
async function lostClaim(store: Store, inner: Scripted, claimId: string, over: Parameters<typeof req>[1] = {}, k = 'key-1'): Promise<void> {
  const s = watch(store.claim(key(k), req(claimId, over), T0))
  inner.held.at(-1)!.fail(new Error('read ECONNRESET'))
  await settle()
  expect(s.error).toBeInstanceOf(StoreError)
}

/** How many releases the store was asked for. */
const releasesAt = (inner: Scripted) => inner.calls.filter((c) => c[0] === 'release').length

describe('guardStore gives back a claim never used until the store takes it', () => {
  test('past the lease: tried again after 50 ms, then pauses doubling up to 5 s; once the store answers, given back and no more tries', async () => {
    const inner = new Scripted()
    inner.releaseFails = Infinity
    await lostClaim(guard(inner), inner, 'c1', { leaseMs: 1_000, ttlMs: 3_600_000 })
    const times: number[] = []
    const start = performance.now()
    let seen = releasesAt(inner)
    for (let t = 0; t < 40_000; t += 10) {
      await vi.advanceTimersByTimeAsync(10)
      if (releasesAt(inner) > seen) { seen = releasesAt(inner); times.push(Math.round(performance.now() - start)) }
    }
    const gaps = times.map((t, i) => t - (i ? times[i - 1] : 0))
    // 50, 100, 200, ... doubling (each within one 10 ms step), then 5 s apart, well past the 1 s lease
    expect(gaps.slice(0, 7).map((g) => Math.round(g / 10) * 10)).toEqual([50, 100, 200, 400, 800, 1_600, 3_200])
    expect(gaps.slice(7).every((g) => g >= 5_000 && g <= 5_010)).toBe(true)
    expect(times.at(-1)).toBeGreaterThan(30_000)
    inner.releaseFails = 0
    inner.released = { kind: 'released', lapsed: true }
    await vi.advanceTimersByTimeAsync(5_010)
    const after = releasesAt(inner)
    await vi.advanceTimersByTimeAsync(60_000)
    expect(releasesAt(inner)).toBe(after)
    expect(inner.calls.every((c) => c[0] === 'release' && c[2] === 'c1')).toBe(true)
    // the store undid the unknown outcome the lapsed lease made: said, with route and key hash
    const undone = log.warn.mock.calls.filter((c) => String(c[0]).includes('given back now'))
    expect(undone).toHaveLength(1)
    expect(undone[0][1]).toMatchObject({ store: 'redis', route: key().route, keyHash: keyHashOf(key().scope, key().key) })
  })

  test('within the record\'s ttl: past it no more tries, and the give-up is logged with route and key hash', async () => {
    const inner = new Scripted()
    inner.releaseFails = Infinity
    await lostClaim(guard(inner), inner, 'c1', { leaseMs: 1_000, ttlMs: 20_000 })
    await vi.advanceTimersByTimeAsync(25_000)
    const tried = releasesAt(inner)
    await vi.advanceTimersByTimeAsync(60_000)
    expect(releasesAt(inner)).toBe(tried)
    const gaveUp = log.warn.mock.calls.filter((c) => String(c[0]).includes('could not be given back in time'))
    expect(gaveUp).toHaveLength(1)
    expect(gaveUp[0][1]).toMatchObject({ route: key().route, keyHash: keyHashOf(key().scope, key().key) })
  })

  test('while the store fails one waiting claim is tried at a time, not every one, each in turn; once it answers every one is given back', async () => {
    const inner = new Scripted()
    const store = guard(inner)
    inner.releaseFails = Infinity
    for (let i = 0; i < 100; i++) await lostClaim(store, inner, `c${i}`, {}, `k${i}`)
    inner.calls.length = 0
    await vi.advanceTimersByTimeAsync(20_000)
    // pauses 50 ms doubling to 5 s: about ten tries in 20 s, each of another claim (a failed one goes to the back)
    const tried = inner.calls.map((c) => c[2])
    expect(tried.length).toBeGreaterThan(5)
    expect(tried.length).toBeLessThan(15)
    expect(new Set(tried).size).toBe(tried.length)
    inner.releaseFails = 0
    await vi.advanceTimersByTimeAsync(5_000)
    expect(new Set(inner.calls.map((c) => c[2])).size).toBe(100)
    const n = inner.calls.length
    await vi.advanceTimersByTimeAsync(60_000)
    expect(inner.calls.length).toBe(n)
  })

  test('a release the store did not answer: the caller hears of it, and it is tried again until the store takes it', async () => {
    const inner = new Scripted()
    const store = guard(inner)
    inner.releaseFails = 3
    await expect(store.release(key(), 'c1')).rejects.toBeInstanceOf(StoreError)
    await vi.advanceTimersByTimeAsync(1_000)
    expect(inner.calls).toEqual(Array.from({ length: 4 }, () => ['release', key(), 'c1']))
    await vi.advanceTimersByTimeAsync(60_000)
    expect(inner.calls).toHaveLength(4)
  })

  test('a call that never left the gateway (StoreError.unsent: the store closed, or not connected since start-up) gives nothing back', async () => {
    const inner = new Scripted()
    const store = guard(inner)
    const s = watch(store.claim(key(), req('c1'), T0))
    inner.held[0].fail(new StoreError('the redis store has not answered since start-up', 'claim', { unsent: true }))
    await settle()
    expect(s.error).toBeInstanceOf(StoreError)
    await vi.advanceTimersByTimeAsync(10_000)
    expect(inner.calls).toEqual([])
  })

  test('a give-back that fails for its own key (its server down) holds none behind it: the others are given back', async () => {
    const inner = new Scripted()
    const store = guard(inner)
    inner.releaseFails = Infinity
    await lostClaim(store, inner, 'c-down', {}, 'k-down')
    await lostClaim(store, inner, 'c-ok', {}, 'k-ok')
    inner.releaseFails = 0
    inner.failRelease = (id) => id === 'c-down'
    inner.calls.length = 0
    await vi.advanceTimersByTimeAsync(30_000)
    const okTries = inner.calls.filter((c) => c[2] === 'c-ok').length
    expect(okTries).toBe(1)
    // the failing one is still tried, alone and paused, not given up
    const downTries = inner.calls.filter((c) => c[2] === 'c-down').length
    expect(downTries).toBeGreaterThan(1)
    expect(downTries).toBeLessThan(15)
  })

  test('close: one last try, then no more; what is left is logged, and the store is closed', async () => {
    const inner = new Scripted()
    const store = guard(inner)
    inner.releaseFails = Infinity
    await lostClaim(store, inner, 'c1')
    await lostClaim(store, inner, 'c2', {}, 'key-2')
    await vi.advanceTimersByTimeAsync(1_000)
    const before = releasesAt(inner)
    await store.close()
    expect(inner.closed).toBe(true)
    expect(releasesAt(inner)).toBeGreaterThan(before)
    const n = releasesAt(inner)
    await vi.advanceTimersByTimeAsync(60_000)
    expect(releasesAt(inner)).toBe(n)
    const left = log.warn.mock.calls.filter((c) => String(c[0]).includes('before the gateway closed'))
    expect(left).toHaveLength(1)
    expect(left[0][1]).toMatchObject({ claims: 2, routes: key().route })
  })
})
