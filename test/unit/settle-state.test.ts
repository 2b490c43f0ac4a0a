// idempotency.settle's part of the record state machine (src/store/shared/record-state.ts), without a store.
import { describe, expect, test } from 'vitest'
import { decideClaim, decideFinish, decideRelease, decideResolve, decideSettle, decideTakeProbe, type IdemRecord } from '../../src/store/shared/record-state.js'
import type { ClaimRequest } from '../../src/store/index.js'

const T = 1_700_000_000_000
const PROBE = 'GET /charges?idempotencyKey=k'
const req = (claimId: string, over: Partial<ClaimRequest> = {}): ClaimRequest => ({ fingerprint: 'fp', claimId, leaseMs: 1_000, ttlMs: 60_000, retryUnknown: false, probe: PROBE, ...over })
const p = (seen: number) => ({ seen, afterMs: 2_000, nextInMs: 30_000 })
const response = { status: 200, headers: [['content-type', 'application/json']] as [string, string][], body: Buffer.from('{}') }

/** claimed at T, finished as unknown (timeout) at T + 10 with the first probe due at T + 2010 */
const unknown = (): IdemRecord => decideFinish(decideClaim(undefined, req('c1'), T).write!, 'c1', { kind: 'unknown', reason: 'timeout', probeInMs: 2_000 }, 60_000, T + 10)!

describe('settle in the record state machine (decideTakeProbe, decideSettle)', () => {
  test('a claim keeps its probe; finish as unknown keeps it and sets the first probe time; completion and not_stored drop it', () => {
    const held = decideClaim(undefined, req('c1'), T).write!
    expect(held.probe).toBe(PROBE)
    expect(unknown()).toMatchObject({ state: 'unknown', probe: PROBE, nextProbe: T + 2_010 })
    expect(unknown().probes).toBeUndefined()
    expect(decideFinish(held, 'c1', { kind: 'completed', response }, 60_000, T)!.probe).toBeUndefined()
    expect(decideFinish(held, 'c1', { kind: 'not_stored', status: 201 }, 60_000, T)!.probe).toBeUndefined()
    // without probeInMs no first probe time is set
    expect(decideFinish(held, 'c1', { kind: 'unknown', reason: 'reset' }, 60_000, T)!.nextProbe).toBeUndefined()
  })

  test('takeProbe: due at nextProbe, a count compare-and-set, the next due nextInMs on', () => {
    const u = unknown()
    expect(decideTakeProbe(u, p(0), T + 2_009)).toEqual({ result: { kind: 'not_due' } })
    const t = decideTakeProbe(u, p(0), T + 2_010)
    expect(t.result).toEqual({ kind: 'taken', probe: PROBE, probes: 1, reason: 'timeout' })
    expect(t.write).toMatchObject({ state: 'unknown', probes: 1, nextProbe: T + 32_010, probe: PROBE })
    expect(decideTakeProbe(t.write, p(0), T + 40_000)).toEqual({ result: { kind: 'not_due' } })
    expect(decideTakeProbe(t.write, p(1), T + 32_009)).toEqual({ result: { kind: 'not_due' } })
    expect(decideTakeProbe(t.write, p(1), T + 32_010).result).toMatchObject({ kind: 'taken', probes: 2 })
  })

  test('a lapsed in-flight record: due afterMs past its lease, taken as abandoned (crash); claim id and lease kept for its holder\'s release', () => {
    const held = decideClaim(undefined, req('c1'), T).write!
    expect(decideTakeProbe(held, p(0), T + 999)).toEqual({ result: { kind: 'not_due' } })
    expect(decideTakeProbe(held, p(0), T + 2_999)).toEqual({ result: { kind: 'not_due' } })
    const t = decideTakeProbe(held, p(0), T + 3_000)
    expect(t.result).toEqual({ kind: 'taken', probe: PROBE, probes: 1, reason: 'crash', abandoned: true })
    expect(t.write).toMatchObject({ state: 'unknown', reason: 'crash', claimId: 'c1', leaseUntil: T + 1_000 })
    expect(decideRelease(t.write, 'c1')).toEqual({ result: { kind: 'released', lapsed: true }, write: null })
  })

  test('no probe, not unknown, or expired: not_due', () => {
    const bare = decideFinish(decideClaim(undefined, req('c1', { probe: undefined }), T).write!, 'c1', { kind: 'unknown', reason: 'timeout', probeInMs: 0 }, 60_000, T)!
    expect(decideTakeProbe(bare, p(0), T + 1e6)).toEqual({ result: { kind: 'not_due' } })
    expect(decideTakeProbe(undefined, p(0), T)).toEqual({ result: { kind: 'not_due' } })
    expect(decideTakeProbe(unknown(), p(0), T + 60_010)).toEqual({ result: { kind: 'not_due' } })
    const resolved = decideResolve(unknown(), 'completed', 60_000, T + 20).write!
    expect(decideTakeProbe(resolved, p(0), T + 1e5)).toEqual({ result: { kind: 'not_due' } })
  })

  test('settle: only the unknown outcome with that probe count; applied completes it, not_applied deletes it', () => {
    const t = decideTakeProbe(unknown(), p(0), T + 2_010).write!
    expect(decideSettle(t, 0, { kind: 'not_applied' }, 60_000, T + 2_020)).toEqual({ result: { kind: 'moved' } })
    expect(decideSettle(t, 1, { kind: 'not_applied' }, 60_000, T + 2_020)).toEqual({ result: { kind: 'settled', reason: 'timeout' }, write: null })
    const applied = decideSettle(t, 1, { kind: 'applied', response }, 60_000, T + 2_020)
    expect(applied.result).toEqual({ kind: 'settled', reason: 'timeout' })
    expect(applied.write).toMatchObject({ state: 'completed', response, expiresAt: T + 62_020 })
    expect(applied.write!.probe).toBeUndefined()
    expect(decideClaim(applied.write!, req('c2'), T + 2_030).result).toEqual({ kind: 'completed', response })
    expect(decideSettle(undefined, 1, { kind: 'not_applied' }, 60_000, T)).toEqual({ result: { kind: 'moved' } })
    expect(decideSettle(t, 1, { kind: 'not_applied' }, 60_000, T + 60_010)).toEqual({ result: { kind: 'moved' } })
  })

  test('a takeover starts afresh with its own probe; its release puts back the outcome it took over, probe fields and all', () => {
    const t = decideTakeProbe(unknown(), p(0), T + 2_010).write!
    const over = decideClaim(t, req('c2', { retryUnknown: true, probe: 'GET /second' }), T + 2_020)
    expect(over.result).toEqual({ kind: 'claimed', after: 'timeout' })
    expect(over.write).toMatchObject({ state: 'in_flight', probe: 'GET /second' })
    expect(over.write!.probes).toBeUndefined()
    expect(decideSettle(over.write, 1, { kind: 'not_applied' }, 60_000, T + 2_030)).toEqual({ result: { kind: 'moved' } })
    const back = decideRelease(over.write, 'c2')
    expect(back.result).toEqual({ kind: 'restored' })
    expect(back.write).toMatchObject({ state: 'unknown', reason: 'timeout', probe: PROBE, probes: 1, nextProbe: T + 32_010 })
  })
})
