/**
 * The conformance suite's cases for `idempotency.settle` (contract §4a; src/store/contract/
 * records.ts `SettleStore`), run by conformance.ts against every store: the probe request kept
 * with an unsettled record and listed, one probe at a time per key by a count compare-and-set on
 * the store's clock, a crashed holder's record probed `afterMs` past its lease, and a settlement
 * that only lands while the record is still the unknown outcome that was probed. What a
 * settlement leaves is read the way a gateway reads it: through `claim` and `unknowns`.
 */
import { describe, expect, test } from 'vitest'
import { StoreError, type Store } from '../../src/store/index.js'
import { key, req, sampleResponse, T0 } from './conformance.js'

const PROBE = 'GET /accounts/acc-1/charges?idempotencyKey=key-1\nauthorization: Bearer t'
const AFTER = 2_000
const EVERY = 30_000
const take = (seen: number) => ({ seen, afterMs: AFTER, nextInMs: EVERY })

/**
 * the settle cases, as `describeStoreConformance` runs them on the stores `open` makes; `onClock`
 * (its `onStoreClock`) opens one that takes its instants from its own clock (redis, postgres)
 */
export function describeSettle(open: () => Promise<Store>, onClock?: () => Promise<Store>): void {
  /** key() claimed with a probe at T0, finished as unknown (timeout) at T0 + 10, first probe due T0 + 10 + AFTER */
  const unknownWithProbe = async (s: Store) => {
    await s.claim(key(), req('first', { probe: PROBE }), T0)
    await s.finish(key(), 'first', { kind: 'unknown', reason: 'timeout', probeInMs: AFTER }, 60_000, T0 + 10)
  }
  const due = T0 + 10 + AFTER

  describe('settle (contract §4a)', () => {
    test('an unknown outcome with a probe lists it, no probes yet, and when the first is due', async () => {
      const s = await open()
      await unknownWithProbe(s)
      expect(await s.unknowns(T0 + 20)).toEqual([
        { key: key(), reason: 'timeout', leaseUntil: 0, expiresAt: T0 + 10 + 60_000, probe: PROBE, nextProbe: due },
      ])
    })

    test('takeProbe: not before it is due; at due one caller takes it, a second with the same count does not; the next only after nextInMs', async () => {
      const s = await open()
      await unknownWithProbe(s)
      expect(await s.takeProbe(key(), take(0), due - 1)).toEqual({ kind: 'not_due' })
      expect(await s.takeProbe(key(), take(0), due)).toEqual({ kind: 'taken', probe: PROBE, probes: 1, reason: 'timeout' })
      expect(await s.takeProbe(key(), take(0), due)).toEqual({ kind: 'not_due' })
      expect(await s.takeProbe(key(), take(1), due + 1)).toEqual({ kind: 'not_due' })
      const [listed] = await s.unknowns(due + 1)
      expect(listed).toMatchObject({ probe: PROBE, probes: 1, nextProbe: due + EVERY })
      expect(await s.takeProbe(key(), take(1), due + EVERY - 1)).toEqual({ kind: 'not_due' })
      expect(await s.takeProbe(key(), take(1), due + EVERY)).toEqual({ kind: 'taken', probe: PROBE, probes: 2, reason: 'timeout' })
      // still unknown to a claim that does not retry
      expect(await s.claim(key(), req('c2'), due + EVERY + 1)).toEqual({ kind: 'unknown', reason: 'timeout' })
    })

    test('unknownRecord: the one key\'s record as unknowns lists it, its probe count included; undefined for a key in flight, completed, or absent', async () => {
      const s = await open()
      await unknownWithProbe(s)
      expect(await s.unknownRecord(key(), T0 + 20)).toEqual({ key: key(), reason: 'timeout', leaseUntil: 0, expiresAt: T0 + 10 + 60_000, probe: PROBE, nextProbe: due })
      expect((await s.takeProbe(key(), take(0), due)).kind).toBe('taken')
      expect(await s.unknownRecord(key(), due + 1)).toMatchObject({ probes: 1, nextProbe: due + EVERY })
      expect(await s.unknownRecord(key('other'), due + 1)).toBeUndefined()
      await s.claim(key('busy'), req('b1', { leaseMs: 1_000 }), T0)
      expect(await s.unknownRecord(key('busy'), T0 + 500)).toBeUndefined()
      expect(await s.unknownRecord(key('busy'), T0 + 1_000)).toMatchObject({ reason: 'crash', leaseUntil: T0 + 1_000 })
      await s.claim(key('done'), req('d1'), T0)
      await s.finish(key('done'), 'd1', { kind: 'completed', response: sampleResponse() }, 60_000, T0 + 1)
      expect(await s.unknownRecord(key('done'), T0 + 2)).toBeUndefined()
      // past its expiry it reads as gone
      expect(await s.unknownRecord(key(), T0 + 10 + 60_000)).toBeUndefined()
    })

    test('two callers at once with the same count: exactly one takes the probe', async () => {
      const s = await open()
      await unknownWithProbe(s)
      const results = await Promise.all(Array.from({ length: 10 }, () => s.takeProbe(key(), take(0), due)))
      expect(results.filter((r) => r.kind === 'taken').length).toBe(1)
    })

    test('a crashed holder (in flight past its lease): due afterMs past the lease, taken as abandoned with reason crash', async () => {
      const s = await open()
      await s.claim(key(), req('c1', { probe: PROBE, leaseMs: 1_000 }), T0)
      expect(await s.takeProbe(key(), take(0), T0 + 500)).toEqual({ kind: 'not_due' })
      expect(await s.takeProbe(key(), take(0), T0 + 1_000 + AFTER - 1)).toEqual({ kind: 'not_due' })
      expect((await s.unknowns(T0 + 1_500)).map((u) => [u.reason, u.leaseUntil, u.probe, u.probes, u.nextProbe])).toEqual([['crash', T0 + 1_000, PROBE, undefined, undefined]])
      expect(await s.takeProbe(key(), take(0), T0 + 1_000 + AFTER)).toEqual({ kind: 'taken', probe: PROBE, probes: 1, reason: 'crash', abandoned: true })
      // counted once: a claim now finds an unknown outcome, not a newly abandoned one
      expect(await s.claim(key(), req('c2'), T0 + 1_000 + AFTER + 1)).toEqual({ kind: 'unknown', reason: 'crash' })
    })

    test('a crashed holder probed, then its own give-back (never sent): released, and the probe\'s answer finds it moved', async () => {
      const s = await open()
      await s.claim(key(), req('c1', { probe: PROBE, leaseMs: 1_000 }), T0)
      expect((await s.takeProbe(key(), take(0), T0 + 1_000 + AFTER)).kind).toBe('taken')
      expect(await s.release(key(), 'c1')).toEqual({ kind: 'released', lapsed: true })
      expect(await s.settle(key(), 1, { kind: 'applied', response: sampleResponse() }, 60_000, T0 + 1_000 + AFTER + 1)).toEqual({ kind: 'moved' })
      expect(await s.claim(key(), req('c2'), T0 + 1_000 + AFTER + 2)).toEqual({ kind: 'claimed' })
    })

    test('settle applied: a claim replays the probe\'s response, and the key leaves unknowns', async () => {
      const s = await open()
      await unknownWithProbe(s)
      await s.takeProbe(key(), take(0), due)
      const answer = { ...sampleResponse(), status: 200 }
      expect(await s.settle(key(), 1, { kind: 'applied', response: answer }, 60_000, due + 5)).toEqual({ kind: 'settled', reason: 'timeout' })
      const r = await s.claim(key(), req('c2'), due + 6)
      expect(r.kind).toBe('completed')
      if (r.kind === 'completed') {
        expect(r.response.status).toBe(200)
        expect(r.response.headers).toEqual(answer.headers)
        expect(Buffer.compare(r.response.body, answer.body)).toBe(0)
      }
      expect(await s.unknowns(due + 6)).toEqual([])
      // kept ttlMs from the settlement
      expect((await s.claim(key(), req('c3'), due + 5 + 59_000)).kind).toBe('completed')
      expect(await s.claim(key(), req('c4'), due + 5 + 60_001)).toEqual({ kind: 'claimed' })
    })

    test('settle not_applied: the key claims as new (no after), and leaves unknowns', async () => {
      const s = await open()
      await unknownWithProbe(s)
      await s.takeProbe(key(), take(0), due)
      expect(await s.settle(key(), 1, { kind: 'not_applied' }, 60_000, due + 5)).toEqual({ kind: 'settled', reason: 'timeout' })
      expect(await s.unknowns(due + 6)).toEqual([])
      expect(await s.claim(key(), req('c2', { retryUnknown: true }), due + 6)).toEqual({ kind: 'claimed' })
    })

    test('settle with a stale probe count: moved, nothing changed; a later count settles', async () => {
      const s = await open()
      await unknownWithProbe(s)
      await s.takeProbe(key(), take(0), due)
      await s.takeProbe(key(), take(1), due + EVERY)
      expect(await s.settle(key(), 1, { kind: 'not_applied' }, 60_000, due + EVERY + 1)).toEqual({ kind: 'moved' })
      expect(await s.claim(key(), req('c2'), due + EVERY + 2)).toEqual({ kind: 'unknown', reason: 'timeout' })
      expect(await s.settle(key(), 2, { kind: 'not_applied' }, 60_000, due + EVERY + 3)).toEqual({ kind: 'settled', reason: 'timeout' })
    })

    test('an operator\'s resolve before the answer wins: settle moved, the resolution stands', async () => {
      const s = await open()
      await unknownWithProbe(s)
      await s.takeProbe(key(), take(0), due)
      expect(await s.resolve(key(), 'completed', 60_000, due + 1)).toEqual({ kind: 'resolved', reason: 'timeout' })
      expect(await s.settle(key(), 1, { kind: 'not_applied' }, 60_000, due + 2)).toEqual({ kind: 'moved' })
      expect(await s.claim(key(), req('c2'), due + 3)).toEqual({ kind: 'not_stored', status: 0 })
      expect(await s.takeProbe(key(), take(1), due + EVERY)).toEqual({ kind: 'not_due' })
    })

    test('a retry\'s takeover (retryUnknown) before the answer wins: settle moved, the new attempt holds the key', async () => {
      const s = await open()
      await unknownWithProbe(s)
      await s.takeProbe(key(), take(0), due)
      expect(await s.claim(key(), req('c2', { retryUnknown: true, probe: PROBE }), due + 1)).toEqual({ kind: 'claimed', after: 'timeout' })
      expect(await s.settle(key(), 1, { kind: 'applied', response: sampleResponse() }, 60_000, due + 2)).toEqual({ kind: 'moved' })
      expect(await s.claim(key(), req('c3'), due + 3)).toEqual({ kind: 'in_flight', leaseUntil: due + 1 + 10_000 })
      // an attempt inside its lease is not probed
      expect(await s.takeProbe(key(), take(0), due + 3)).toEqual({ kind: 'not_due' })
    })

    test('a completion drops the probe; a later unknown after a takeover carries the new claim\'s probe and no probes', async () => {
      const s = await open()
      await s.claim(key('done'), req('d1', { probe: PROBE }), T0)
      await s.finish(key('done'), 'd1', { kind: 'completed', response: sampleResponse() }, 60_000, T0 + 10)
      expect(await s.unknowns(T0 + 20)).toEqual([])
      expect(await s.takeProbe(key('done'), take(0), T0 + 100_000)).toEqual({ kind: 'not_due' })

      await unknownWithProbe(s)
      await s.takeProbe(key(), take(0), due)
      expect(await s.claim(key(), req('c2', { retryUnknown: true, probe: 'GET /second' }), due + 1)).toEqual({ kind: 'claimed', after: 'timeout' })
      await s.finish(key(), 'c2', { kind: 'unknown', reason: 'reset', probeInMs: AFTER }, 60_000, due + 100)
      expect(await s.unknowns(due + 200)).toEqual([
        { key: key(), reason: 'reset', leaseUntil: 0, expiresAt: due + 100 + 60_000, probe: 'GET /second', nextProbe: due + 100 + AFTER },
      ])
      expect(await s.takeProbe(key(), take(1), due + 100 + AFTER)).toEqual({ kind: 'not_due' })
      expect(await s.takeProbe(key(), take(0), due + 100 + AFTER)).toEqual({ kind: 'taken', probe: 'GET /second', probes: 1, reason: 'reset' })
    })

    test('a takeover given back (release) restores the unknown outcome with its probe, its count and its next probe', async () => {
      const s = await open()
      await unknownWithProbe(s)
      await s.takeProbe(key(), take(0), due)
      expect(await s.claim(key(), req('c2', { retryUnknown: true, probe: 'GET /second' }), due + 1)).toEqual({ kind: 'claimed', after: 'timeout' })
      expect(await s.release(key(), 'c2')).toEqual({ kind: 'restored' })
      expect((await s.unknowns(due + 2)).map((u) => [u.reason, u.probe, u.probes, u.nextProbe])).toEqual([['timeout', PROBE, 1, due + EVERY]])
      expect(await s.takeProbe(key(), take(1), due + EVERY)).toEqual({ kind: 'taken', probe: PROBE, probes: 2, reason: 'timeout' })
    })

    test('a record without a probe is never taken; it lists no probe fields', async () => {
      const s = await open()
      await s.claim(key(), req('c1'), T0)
      await s.finish(key(), 'c1', { kind: 'unknown', reason: 'timeout', probeInMs: AFTER }, 60_000, T0 + 10)
      expect(await s.takeProbe(key(), take(0), T0 + 100_000)).toEqual({ kind: 'not_due' })
      expect(await s.unknowns(T0 + 20)).toEqual([{ key: key(), reason: 'timeout', leaseUntil: 0, expiresAt: T0 + 10 + 60_000 }])
      expect(await s.takeProbe(key('never'), take(0), T0)).toEqual({ kind: 'not_due' })
      expect(await s.settle(key('never'), 1, { kind: 'not_applied' }, 60_000, T0)).toEqual({ kind: 'moved' })
    })

    test('after close(), takeProbe and settle reject with StoreError naming them', async () => {
      const s = await open()
      await s.close()
      for (const [op, call] of [['take_probe', () => s.takeProbe(key(), take(0), T0)], ['settle', () => s.settle(key(), 1, { kind: 'not_applied' }, 60_000, T0)]] as const) {
        const err = await call().then(() => undefined, (e: unknown) => e)
        expect(err, op).toBeInstanceOf(StoreError)
        expect((err as StoreError).op, op).toBe(op)
      }
    })

    test.runIf(onClock)('on the store\'s own clock: the first and next probe times, a probe\'s due time and a settlement\'s ttl come from the store, whatever `now` says', async () => {
      const SLACK = 2_000
      const TEN_YEARS = 10 * 365 * 86_400_000
      const near = (t: number | undefined, want: number) => { expect(Math.abs((t ?? 0) - want)).toBeLessThan(SLACK) }
      const s = await onClock!()
      const later = key('clock-probe-later'), now = key('clock-probe-now')
      for (const k of [later, now]) await s.claim(k, req('a', { probe: PROBE, leaseMs: 60_000, ttlMs: 600_000 }), T0)
      await s.finish(later, 'a', { kind: 'unknown', reason: 'timeout', probeInMs: 60_000 }, 600_000, T0)
      await s.finish(now, 'a', { kind: 'unknown', reason: 'timeout', probeInMs: 0 }, 600_000, T0 + TEN_YEARS)
      const listed = new Map((await s.unknowns(T0)).map((u) => [u.key.key, u]))
      near(listed.get(later.key)?.nextProbe, Date.now() + 60_000)
      near(listed.get(now.key)?.nextProbe, Date.now())
      // ten years on by the caller's clock, the first probe (60 s on the store's) is not due yet
      expect(await s.takeProbe(later, take(0), T0 + TEN_YEARS)).toEqual({ kind: 'not_due' })
      // long before it by the caller's clock, the other is due on the store's
      expect(await s.takeProbe(now, { seen: 0, afterMs: AFTER, nextInMs: 60_000 }, T0)).toEqual({ kind: 'taken', probe: PROBE, probes: 1, reason: 'timeout' })
      near((await s.unknowns(T0)).find((u) => u.key.key === now.key)?.nextProbe, Date.now() + 60_000)
      expect(await s.settle(now, 1, { kind: 'applied', response: sampleResponse() }, 60_000, T0)).toEqual({ kind: 'settled', reason: 'timeout' })
      // kept 60 s from the store's now, not from T0 (long past)
      expect((await s.claim(now, req('b'), T0 + TEN_YEARS)).kind).toBe('completed')
    })

    test('an expired unknown outcome is neither probed nor settled', async () => {
      const s = await open()
      await unknownWithProbe(s)
      await s.takeProbe(key(), take(0), due)
      expect(await s.settle(key(), 1, { kind: 'not_applied' }, 60_000, T0 + 10 + 60_000)).toEqual({ kind: 'moved' })
      expect(await s.takeProbe(key(), take(1), T0 + 10 + 60_000)).toEqual({ kind: 'not_due' })
    })
  })
}
