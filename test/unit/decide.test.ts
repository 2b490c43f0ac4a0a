// The contract's admission precedence (contract §3, §4) as src/admission/decide.ts states it: one
// pure function over what was read and what the store answered; each row one decision and, for a
// refusal, its one status and problem.
import { describe, expect, test } from 'vitest'
import { decide, type ClaimAnswer, type Decision, type FenceAnswer, type KeyInput } from '../../src/admission/decide.js'
import type { FenceInput } from '../../src/fencing/read.js'
import type { ClaimResult } from '../../src/store/index.js'
import { Problem } from '../../src/problems.js'

const T = 1_700_000_000_000
const fence: FenceInput = { resource: 'account:a', token: 5n }
const tokenMissing: FenceInput = { reason: 'missing', refused: new Problem('fencing-token-required', 'no token') }
const tokenMalformed: FenceInput = { reason: 'malformed', refused: new Problem('fencing-token-malformed', 'bad token') }
const resourceMissing: FenceInput = { reason: 'malformed', refused: new Problem('fencing-resource-missing', 'no resource') }
const key: KeyInput = { recordKey: { route: 'pay', scope: '', key: 'k' }, body: Buffer.from('{}'), fingerprint: 'f'.repeat(64), keyHash: 'h'.repeat(64) }
const keyRequired: KeyInput = { refused: new Problem('idempotency-key-required', 'no key') }
const keyMalformed: KeyInput = { refused: new Problem('idempotency-key-malformed', 'bad key') }
const bodyTooLarge: KeyInput = { refused: new Problem('body-too-large', 'too large') }
const current: FenceAnswer = { kind: 'current', highest: 5n }
const stale: FenceAnswer = { kind: 'stale', highest: 7n, since: T - 1500, at: T }
const claim = (result: ClaimResult, mayWait = false, expectedMs?: number): ClaimAnswer => ({ result, mayWait, now: T, expectedMs })
const stored = { status: 201, headers: [['content-type', 'application/json']] as [string, string][], body: Buffer.from('{"id":1}') }

/** The refusal's status and problem name, or the decision's kind. */
function outcome(d: Decision): string {
  return d.kind === 'refuse' ? `${d.problem.status} ${d.problem.name_}` : d.kind
}

describe('the precedence, row by row', () => {
  const rows: [string, FenceInput | undefined, KeyInput, FenceAnswer | undefined, ClaimAnswer | undefined, string][] = [
    // 1. fencing's own refusals, before anything else
    ['no token where the route requires one', tokenMissing, undefined, undefined, undefined, '428 fencing-token-required'],
    ['a malformed token', tokenMalformed, undefined, undefined, undefined, '400 fencing-token-malformed'],
    ['a resource the request does not fill', resourceMissing, undefined, undefined, undefined, '400 fencing-resource-missing'],
    ['a missing token with a bad key too', tokenMissing, keyMalformed, undefined, undefined, '428 fencing-token-required'],
    // 2. a stale token, even when the key has a stored response or is the request's own mistake
    ['a stale token', fence, undefined, stale, undefined, '412 stale-fencing-token'],
    ['a stale token whose key has a stored response', fence, key, stale, claim({ kind: 'completed', response: stored }), '412 stale-fencing-token'],
    ['a stale token with a malformed key', fence, keyMalformed, stale, undefined, '412 stale-fencing-token'],
    ['a stale token with a body over the limit', fence, bodyTooLarge, stale, undefined, '412 stale-fencing-token'],
    ['a newer token got ahead while it waited (serialize)', fence, key, { kind: 'held', where: 'process', waitedMs: 2000, retryAfter: 3 }, undefined, '503 serialize-timeout'],
    ['older tokens still registered in the store (serialize: store)', fence, undefined, { kind: 'held', where: 'store', waitedMs: 2000, retryAfter: 1 }, undefined, '503 serialize-timeout'],
    ['the client left while it waited', fence, key, { kind: 'left' }, undefined, '503 serialize-timeout'],
    // 3. the request's own mistake, the token current (or none)
    ['no key where one is required', fence, keyRequired, current, undefined, '400 idempotency-key-required'],
    ['a malformed key (or scope)', fence, keyMalformed, { kind: 'current' }, undefined, '400 idempotency-key-malformed'],
    ['a body over the limit', fence, bodyTooLarge, current, undefined, '413 body-too-large'],
    ['a malformed key on a route without fencing', undefined, keyMalformed, undefined, undefined, '400 idempotency-key-malformed'],
    // 4. the claim's result
    ['a claimed key', fence, key, current, claim({ kind: 'claimed' }), 'forward'],
    ['a claimed key after an unknown outcome (unknownOutcome: retry)', fence, key, current, claim({ kind: 'claimed', after: 'timeout' }), 'forward'],
    ['a completed key', fence, key, current, claim({ kind: 'completed', response: stored }), 'replay'],
    ['a completed key whose response was too large to keep', fence, key, current, claim({ kind: 'not_stored', status: 201 }), '409 response-not-stored'],
    ['a key resolved as completed by an operator', undefined, key, undefined, claim({ kind: 'not_stored', status: 0 }), '409 response-not-stored'],
    ['the key with another fingerprint', fence, key, current, claim({ kind: 'mismatch' }), '422 idempotency-key-reused'],
    ['the key\'s first attempt has an unknown outcome (unknownOutcome: reject)', fence, key, current, claim({ kind: 'unknown', reason: 'reset' }), '409 outcome-unknown'],
    ['the key in flight (inFlight: reject)', fence, key, current, claim({ kind: 'in_flight', leaseUntil: T + 30_000 }), '409 request-in-flight'],
    ['the key in flight (inFlight: wait, time left)', fence, key, current, claim({ kind: 'in_flight', leaseUntil: T + 30_000 }, true), 'wait'],
    // nothing to refuse
    ['a current token, no key', fence, undefined, current, undefined, 'forward'],
    ['neither check applies', undefined, undefined, undefined, undefined, 'forward'],
  ]
  for (const [what, f, k, fa, ca, want] of rows) {
    test(`${what}: ${want}`, () => {
      expect(outcome(decide(f, k, fa, ca))).toBe(want)
    })
  }
})

describe('what each refusal carries', () => {
  const refusal = (d: Decision): Extract<Decision, { kind: 'refuse' }> => {
    if (d.kind !== 'refuse') throw new Error(`expected a refusal, got ${d.kind}`)
    return d
  }
  const body = (p: Problem) => JSON.parse(p.body()) as Record<string, unknown>

  test('412: the resource, both tokens as decimal strings, and how late the writer came', () => {
    const d = refusal(decide(fence, key, stale))
    expect(d.fencing).toBe('stale')
    expect(d.lateMs).toBe(1500)
    expect(body(d.problem)).toMatchObject({ status: 412, resource: 'account:a', token: '5', highestToken: '7', supersededForMs: 1500 })
    expect(d.problem.detail).toContain('token 7 took over 1.5 s before this request')
  })

  test('412 for a mark kept without its first acceptance: no lateness', () => {
    const d = refusal(decide(fence, undefined, { kind: 'stale', highest: 9n, at: T }))
    expect(d.lateMs).toBeUndefined()
    expect(body(d.problem)).not.toHaveProperty('supersededForMs')
  })

  test('fencing\'s own refusals are counted by reason; the key\'s mistakes are not fencing\'s', () => {
    expect(refusal(decide(tokenMissing, undefined)).fencing).toBe('missing')
    expect(refusal(decide(resourceMissing, undefined)).fencing).toBe('malformed')
    expect(refusal(decide(fence, keyMalformed, current)).fencing).toBeUndefined()
  })

  test('409 request-in-flight: Retry-After from the route\'s p90 effect, bounded by the lease end', () => {
    const inFlight = (leaseUntil: number, expectedMs?: number) => refusal(decide(undefined, key, undefined, claim({ kind: 'in_flight', leaseUntil }, false, expectedMs))).problem.headers['retry-after']
    expect(inFlight(T + 30_000)).toBe('1') // nothing observed yet
    expect(inFlight(T + 30_000, 4200)).toBe('5')
    expect(inFlight(T + 2000, 4200)).toBe('2')
  })

  test('the idempotency results counted: key_reused and in_flight refusals, a replay', () => {
    expect(refusal(decide(undefined, key, undefined, claim({ kind: 'mismatch' }))).result).toBe('key_reused')
    expect(refusal(decide(undefined, key, undefined, claim({ kind: 'in_flight', leaseUntil: T }))).result).toBe('in_flight')
    expect(refusal(decide(undefined, key, undefined, claim({ kind: 'unknown', reason: 'crash' }))).result).toBeUndefined()
    expect(decide(undefined, key, undefined, claim({ kind: 'completed', response: stored }))).toEqual({ kind: 'replay', response: stored, result: 'replayed' })
  })

  test('serialize-timeout: Retry-After when older writes hold the resource; none when the client left (499)', () => {
    const held = refusal(decide(fence, undefined, { kind: 'held', where: 'process', waitedMs: 250, retryAfter: 4 }))
    expect(held.problem.headers['retry-after']).toBe('4')
    expect(held.problem.detail).toContain('after 250 ms')
    expect(held.clientLeft).toBeUndefined()
    const left = refusal(decide(fence, undefined, { kind: 'left' }))
    expect(left.clientLeft).toBe(true)
    expect(left.problem.headers['retry-after']).toBeUndefined()
  })

  test('outcome-unknown and response-not-stored name what the client needs to know', () => {
    expect(body(refusal(decide(undefined, key, undefined, claim({ kind: 'unknown', reason: 'timeout' }))).problem)).toMatchObject({ reason: 'timeout' })
    expect(body(refusal(decide(undefined, key, undefined, claim({ kind: 'not_stored', status: 201 }))).problem)).toMatchObject({ originalStatus: 201 })
    expect(body(refusal(decide(undefined, key, undefined, claim({ kind: 'not_stored', status: 0 }))).problem)).toMatchObject({ resolvedBy: 'operator' })
  })
})
