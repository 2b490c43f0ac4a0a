// What the server-side stores answer, decoded once for redis and postgres (src/store/shared/replies.ts).
import { describe, expect, test } from 'vitest'
import { asReason, claimResult, fenceResult, resolveResult } from '../../src/store/shared/replies.js'

describe('replies of the server-side stores (src/store/shared/replies.ts)', () => {
  test('a fence: accepted, the mark as an exact bigint, since and raised only when given', () => {
    expect(fenceResult({ accepted: true, highest: '9223372036854775807', since: '1700000000000', raised: true }))
      .toEqual({ accepted: true, highest: 9223372036854775807n, since: 1700000000000, raised: true })
    expect(fenceResult({ accepted: false, highest: '7', since: '', raised: false })).toEqual({ accepted: false, highest: 7n })
    expect(fenceResult({ accepted: true, highest: '7', since: null, raised: null })).toEqual({ accepted: true, highest: 7n })
  })

  test('a claim, each kind with its fields; numbers may come as text', () => {
    expect(claimResult({ kind: 'claimed', after: '', abandoned: false })).toEqual({ kind: 'claimed' })
    expect(claimResult({ kind: 'claimed', after: 'timeout', abandoned: true })).toEqual({ kind: 'claimed', after: 'timeout', abandoned: true })
    const body = Buffer.from([0, 1, 255])
    expect(claimResult({ kind: 'completed', status: '201', headers: '[["a","1"],["set-cookie","x"],["set-cookie","y"]]', body }))
      .toEqual({ kind: 'completed', response: { status: 201, headers: [['a', '1'], ['set-cookie', 'x'], ['set-cookie', 'y']], body } })
    expect(claimResult({ kind: 'completed', status: 204, headers: null, body: null }))
      .toEqual({ kind: 'completed', response: { status: 204, headers: [], body: Buffer.alloc(0) } })
    expect(claimResult({ kind: 'not_stored', status: '0' })).toEqual({ kind: 'not_stored', status: 0 })
    expect(claimResult({ kind: 'in_flight', leaseUntil: '1700000001000' })).toEqual({ kind: 'in_flight', leaseUntil: 1700000001000 })
    expect(claimResult({ kind: 'unknown', reason: 'reset', abandoned: false })).toEqual({ kind: 'unknown', reason: 'reset' })
    expect(claimResult({ kind: 'unknown', reason: 'crash', abandoned: true })).toEqual({ kind: 'unknown', reason: 'crash', abandoned: true })
    expect(claimResult({ kind: 'mismatch' })).toEqual({ kind: 'mismatch' })
  })

  test('a kind this version does not know is an error, not a guess', () => {
    expect(() => claimResult({ kind: 'paused' })).toThrow(/"paused"/)
    expect(() => resolveResult('postponed', null)).toThrow(/"postponed"/)
  })

  test('a resolution: resolved with its reason, not found, refused with the state', () => {
    expect(resolveResult('resolved', 'client_abort')).toEqual({ kind: 'resolved', reason: 'client_abort' })
    expect(resolveResult('not_found', null)).toEqual({ kind: 'not_found' })
    expect(resolveResult('refused', 'in_flight')).toEqual({ kind: 'refused', state: 'in_flight' })
  })

  test('a stored reason that is missing or unknown reads as crash', () => {
    for (const r of ['timeout', 'reset', 'client_abort', 'crash'] as const) expect(asReason(r)).toBe(r)
    expect(asReason(undefined)).toBe('crash')
    expect(asReason('')).toBe('crash')
    expect(asReason('gremlins')).toBe('crash')
  })
})
