// guardStore (src/store/runtime/guard.ts) and a retry after a heal (issue 38 item 4): a new claim
// of a key this gateway is still giving a claim back for sends that give-back first, so the
// retry's claim can never reach the store before it and find this gateway's own claim past its
// lease (an unknown outcome, reason crash, for a request never sent). The order is read from the
// calls a Store test double receives.
import { afterEach, beforeEach, describe, expect, test, vi } from 'vitest'
import { guardStore, StoreError, type ClaimRequest, type RecordKey, type Store } from '../../src/store/index.js'
import type { Metrics } from '../../src/telemetry/metrics.js'
import type { Logger } from '../../src/log.js'
import { key, req, T0 } from './conformance.js'
import { fakeLog, fakeMetrics, Scripted, settle, watch } from './scripted.js'

const TIMEOUT_MS = 50
let metrics: ReturnType<typeof fakeMetrics>
let log: ReturnType<typeof fakeLog>

beforeEach(() => {
  metrics = fakeMetrics()
  log = fakeLog()
  vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] })
})
afterEach(() => { vi.useRealTimers() })

/** A Scripted store that also notes each claim in `calls`, so releases and claims are in one order. */
function scripted(): Scripted {
  const inner = new Scripted()
  const claim = inner.claim.bind(inner)
  Object.assign(inner, { claim: (k: RecordKey, r: ClaimRequest) => { inner.calls.push(['claim', k, r.claimId]); return claim() } })
  return inner
}

/** c1's claim times out, its connection then fails (the claim may have run), and its give-back fails while the store is out of reach. */
async function lostAndWaiting(inner: Scripted, store: Store): Promise<void> {
  inner.releaseFails = Infinity
  const c1 = watch(store.claim(key(), req('c1'), T0))
  await vi.advanceTimersByTimeAsync(TIMEOUT_MS)
  expect(c1.error).toBeInstanceOf(StoreError)
  inner.held[0].fail(new Error('read ECONNRESET'))
  await settle()
  expect(inner.calls.filter((c) => c[0] === 'release').length).toBeGreaterThan(0)
  inner.calls.length = 0
}

describe('a claim of a key with a give-back waiting', () => {
  test('the give-back goes first; the claim follows once the store took it, and the give-back is not sent again', async () => {
    const inner = scripted()
    const store = guardStore(inner, metrics as unknown as Metrics, TIMEOUT_MS, log as unknown as Logger)
    await lostAndWaiting(inner, store)
    inner.releaseFails = 0 // the heal
    const c2 = watch(store.claim(key(), req('c2'), T0))
    await settle()
    expect(inner.calls.slice(0, 2)).toEqual([['release', key(), 'c1'], ['claim', key(), 'c2']])
    inner.held[1].answer({ kind: 'claimed' })
    await settle()
    expect(c2.value).toEqual({ kind: 'claimed' })
    await vi.advanceTimersByTimeAsync(10_000) // the give-back loop's next rounds: c1 is not waiting any more
    expect(inner.calls.filter((c) => c[0] === 'release')).toEqual([['release', key(), 'c1']])
    await store.close()
  })

  test('while the store still refuses the give-back, the claim is not sent: StoreError, and the give-back keeps waiting', async () => {
    const inner = scripted()
    const store = guardStore(inner, metrics as unknown as Metrics, TIMEOUT_MS, log as unknown as Logger)
    await lostAndWaiting(inner, store)
    const c2 = watch(store.claim(key(), req('c2'), T0))
    await settle()
    expect(c2.error).toBeInstanceOf(StoreError)
    expect(inner.calls.filter((c) => c[0] === 'claim')).toEqual([])
    inner.releaseFails = 0
    inner.calls.length = 0
    await vi.advanceTimersByTimeAsync(10_000)
    expect(inner.calls).toContainEqual(['release', key(), 'c1'])
    await store.close()
  })

  test('a claim of another key is not held back by it', async () => {
    const inner = scripted()
    const store = guardStore(inner, metrics as unknown as Metrics, TIMEOUT_MS, log as unknown as Logger)
    await lostAndWaiting(inner, store)
    watch(store.claim(key('key-2'), req('c3'), T0))
    await settle()
    expect(inner.calls.filter((c) => c[0] === 'claim')).toEqual([['claim', key('key-2'), 'c3']])
    expect(inner.calls.filter((c) => c[0] === 'release' && c[2] === 'c3')).toEqual([])
    inner.held[1].answer({ kind: 'claimed' })
    await settle()
    inner.releaseFails = 0
    await store.close()
  })

  test('an answer that found an abandoned attempt while this gateway\'s own claim of the key is unanswered: that claim is given back and the key claimed again', async () => {
    const inner = scripted()
    const store = guardStore(inner, metrics as unknown as Metrics, TIMEOUT_MS, log as unknown as Logger)
    const c1 = watch(store.claim(key(), req('c1'), T0))
    await vi.advanceTimersByTimeAsync(TIMEOUT_MS)
    expect(c1.error).toBeInstanceOf(StoreError) // c1's call is still out: the store may have made it
    const c2 = watch(store.claim(key(), req('c2'), T0))
    await settle()
    inner.held[1].answer({ kind: 'unknown', reason: 'crash', abandoned: true })
    await settle()
    expect(inner.calls).toEqual([['claim', key(), 'c1'], ['claim', key(), 'c2'], ['release', key(), 'c1'], ['claim', key(), 'c2']])
    inner.held[2].answer({ kind: 'claimed' })
    await settle()
    expect(c2.value).toEqual({ kind: 'claimed' })
    await store.close()
  })

  test('an abandoned attempt with no claim of this gateway\'s on the key: the answer stands, nothing given back', async () => {
    const inner = scripted()
    const store = guardStore(inner, metrics as unknown as Metrics, TIMEOUT_MS, log as unknown as Logger)
    const c = watch(store.claim(key(), req('c1'), T0))
    await settle()
    inner.held[0].answer({ kind: 'unknown', reason: 'crash', abandoned: true })
    await settle()
    expect(c.value).toEqual({ kind: 'unknown', reason: 'crash', abandoned: true })
    expect(inner.calls).toEqual([['claim', key(), 'c1']])
  })

  test('this gateway\'s claim given back, yet the key still reads unknown: it was another attempt, and the first answer (abandoned, to be counted) stands', async () => {
    const inner = scripted()
    const store = guardStore(inner, metrics as unknown as Metrics, TIMEOUT_MS, log as unknown as Logger)
    watch(store.claim(key(), req('c1'), T0))
    await vi.advanceTimersByTimeAsync(TIMEOUT_MS)
    const c2 = watch(store.claim(key(), req('c2'), T0))
    await settle()
    inner.held[1].answer({ kind: 'unknown', reason: 'crash', abandoned: true })
    await settle()
    inner.held[2].answer({ kind: 'unknown', reason: 'crash' })
    await settle()
    expect(c2.value).toEqual({ kind: 'unknown', reason: 'crash', abandoned: true })
    await store.close()
  })
})
