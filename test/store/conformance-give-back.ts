/**
 * The conformance suite's cases for `release` (src/store/contract/store.ts), run by conformance.ts against
 * every store: a claim given back reads as before it — nothing, or the unknown outcome it took over
 * (which the store keeps on the claim itself) — also after its own lease ran out and a later
 * claim made it an unknown outcome (reason crash), as long as nobody took it over or settled it.
 * What a release leaves is read the way a gateway would read it: through `claim` and `unknowns`.
 */
import { describe, expect, test } from 'vitest'
import type { Store } from '../../src/store/index.js'
import { key, req, sampleResponse, T0 } from './conformance.js'

const DAY = 86_400_000

export function describeRelease(open: () => Promise<Store>): void {
  /** key() finished as unknown (timeout) at T0 + 10, kept 60 s */
  const unknownTimeout = async (s: Store) => {
    await s.claim(key(), req('first'), T0)
    await s.finish(key(), 'first', { kind: 'unknown', reason: 'timeout' }, 60_000, T0 + 10)
  }

  describe('release (a claim given back: the key reads as before it)', () => {
    test('a fresh claim: released, the key claimable as new; by another claim id, or again: not_held', async () => {
      const s = await open()
      await s.claim(key(), req('c1'), T0)
      expect(await s.release(key(), 'other')).toEqual({ kind: 'not_held' })
      expect(await s.release(key(), 'c1')).toEqual({ kind: 'released' })
      expect(await s.release(key(), 'c1')).toEqual({ kind: 'not_held' })
      expect(await s.claim(key(), req('c2'), T0 + 10)).toEqual({ kind: 'claimed' })
      expect(await s.release(key('never-claimed'), 'c1')).toEqual({ kind: 'not_held' })
    })

    test('a claim that took over an unknown outcome: restored — the same reason, listed, and a retrying client still learns of it', async () => {
      const s = await open()
      await unknownTimeout(s)
      expect(await s.claim(key(), req('c2', { retryUnknown: true }), T0 + 20)).toEqual({ kind: 'claimed', after: 'timeout' })
      expect(await s.release(key(), 'c2')).toEqual({ kind: 'restored' })
      expect(await s.claim(key(), req('c3'), T0 + 30)).toEqual({ kind: 'unknown', reason: 'timeout' })
      expect((await s.unknowns(T0 + 30)).map((u) => [u.key.key, u.reason, u.leaseUntil])).toEqual([[key().key, 'timeout', 0]])
      // once put back, the claim holds nothing: a second release or a finish changes nothing
      expect(await s.release(key(), 'c2')).toEqual({ kind: 'not_held' })
      await s.finish(key(), 'c2', { kind: 'completed', response: sampleResponse() }, 60_000, T0 + 40)
      expect(await s.claim(key(), req('c4', { retryUnknown: true }), T0 + 50)).toEqual({ kind: 'claimed', after: 'timeout' })
    })

    test('a claim that took over a crashed holder: restored as unknown, reason crash', async () => {
      const s = await open()
      await s.claim(key(), req('c1', { leaseMs: 1_000 }), T0)
      expect(await s.claim(key(), req('c2', { retryUnknown: true }), T0 + 1_500)).toEqual({ kind: 'claimed', after: 'crash', abandoned: true })
      expect(await s.release(key(), 'c2')).toEqual({ kind: 'restored' })
      expect(await s.claim(key(), req('c3'), T0 + 1_600)).toEqual({ kind: 'unknown', reason: 'crash' })
      // the crash was its own holder's (c1), not the releasing claim's: c1 cannot undo it now
      expect(await s.release(key(), 'c1')).toEqual({ kind: 'not_held' })
      expect(await s.claim(key(), req('c4'), T0 + 1_700)).toEqual({ kind: 'unknown', reason: 'crash' })
    })

    test('an unknown outcome only its own lapsed lease made: undone (lapsed), the key claimable as new, nothing listed', async () => {
      const s = await open()
      await s.claim(key(), req('c1', { leaseMs: 1_000 }), T0)
      expect(await s.claim(key(), req('c2'), T0 + 1_500)).toEqual({ kind: 'unknown', reason: 'crash', abandoned: true })
      expect(await s.claim(key(), req('c3'), T0 + 1_600)).toEqual({ kind: 'unknown', reason: 'crash' })
      expect(await s.release(key(), 'c2')).toEqual({ kind: 'not_held' })
      expect(await s.release(key(), 'c1')).toEqual({ kind: 'released', lapsed: true })
      expect(await s.unknowns(T0 + 1_700)).toEqual([])
      expect(await s.claim(key(), req('c4'), T0 + 1_800)).toEqual({ kind: 'claimed' })
    })

    test('the same after a takeover of an unknown outcome: that outcome is restored (lapsed), not forgotten', async () => {
      const s = await open()
      await unknownTimeout(s)
      expect(await s.claim(key(), req('c2', { retryUnknown: true, leaseMs: 1_000 }), T0 + 20)).toEqual({ kind: 'claimed', after: 'timeout' })
      expect(await s.claim(key(), req('c3'), T0 + 1_500)).toEqual({ kind: 'unknown', reason: 'crash', abandoned: true })
      expect(await s.release(key(), 'c2')).toEqual({ kind: 'restored', lapsed: true })
      expect(await s.claim(key(), req('c4'), T0 + 1_600)).toEqual({ kind: 'unknown', reason: 'timeout' })
      expect((await s.unknowns(T0 + 1_600)).map((u) => [u.reason, u.leaseUntil])).toEqual([['timeout', 0]])
    })

    test('left alone: an unknown outcome its claim finished itself (any reason, crash too)', async () => {
      const s = await open()
      for (const reason of ['timeout', 'crash'] as const) {
        const k = key(`finished-${reason}`)
        await s.claim(k, req('c1'), T0)
        await s.finish(k, 'c1', { kind: 'unknown', reason }, 60_000, T0 + 10)
        expect(await s.release(k, 'c1')).toEqual({ kind: 'not_held' })
        expect(await s.claim(k, req('c2'), T0 + 20)).toEqual({ kind: 'unknown', reason })
      }
    })

    test('left alone: a lapsed claim taken over by another that forwarded, finished, or gave it back itself', async () => {
      const s = await open()
      await s.claim(key('live'), req('old', { leaseMs: 1_000 }), T0)
      expect((await s.claim(key('live'), req('new', { retryUnknown: true }), T0 + 1_500)).kind).toBe('claimed')
      expect(await s.release(key('live'), 'old')).toEqual({ kind: 'not_held' })
      expect(await s.claim(key('live'), req('probe'), T0 + 1_600)).toEqual({ kind: 'in_flight', leaseUntil: T0 + 1_500 + 10_000 })
      await s.finish(key('live'), 'new', { kind: 'completed', response: sampleResponse() }, 60_000, T0 + 2_000)
      expect(await s.release(key('live'), 'old')).toEqual({ kind: 'not_held' })
      expect((await s.claim(key('live'), req('probe2'), T0 + 2_100)).kind).toBe('completed')
    })

    test('left alone: a lapsed claim an operator settled; a new claim after a failed resolution', async () => {
      const s = await open()
      for (const k of [key('done'), key('failed')]) {
        await s.claim(k, req('c1', { leaseMs: 1_000 }), T0)
        expect((await s.claim(k, req('c2'), T0 + 1_500)).kind).toBe('unknown')
      }
      expect((await s.resolve(key('done'), 'completed', 60_000, T0 + 2_000)).kind).toBe('resolved')
      expect(await s.release(key('done'), 'c1')).toEqual({ kind: 'not_held' })
      expect(await s.claim(key('done'), req('c3'), T0 + 2_100)).toEqual({ kind: 'not_stored', status: 0 })

      expect((await s.resolve(key('failed'), 'failed', 60_000, T0 + 2_000)).kind).toBe('resolved')
      expect(await s.claim(key('failed'), req('c3'), T0 + 2_100)).toEqual({ kind: 'claimed' })
      expect(await s.release(key('failed'), 'c1')).toEqual({ kind: 'not_held' })
      expect(await s.claim(key('failed'), req('c4'), T0 + 2_200)).toEqual({ kind: 'in_flight', leaseUntil: T0 + 2_100 + 10_000 })
    })

    test('a restored outcome keeps the claim\'s expiry, then the key is new', async () => {
      const s = await open()
      await unknownTimeout(s)
      await s.claim(key(), req('c2', { retryUnknown: true, ttlMs: DAY }), T0 + 20)
      expect(await s.release(key(), 'c2')).toEqual({ kind: 'restored' })
      expect((await s.unknowns(T0 + 30)).map((u) => u.expiresAt)).toEqual([T0 + 20 + DAY])
    })
  })
}
