// The record state machine, the fencing window tracker and the header rules, without sockets.
import { describe, expect, test } from 'vitest'
import type { IncomingMessage } from 'node:http'
import { decideClaim, decideFinish, decideRelease, decideResolve, mayRenew, type IdemRecord } from '../../src/store/shared/record-state.js'
import { WindowTracker } from '../../src/fencing/window-tracker.js'
import { connectionNamed, requestHeaders, responseHeaders, flat } from '../../src/forward/headers.js'
import type { ClaimRequest } from '../../src/store/index.js'

const T = 1_700_000_000_000
const req = (claimId: string, over: Partial<ClaimRequest> = {}): ClaimRequest => ({ fingerprint: 'fp', claimId, leaseMs: 1_000, ttlMs: 60_000, retryUnknown: false, ...over })

describe('the idempotency record state machine (src/store/shared/record-state.ts)', () => {
  test('none → in_flight → completed; a repeat reads the response; another fingerprint is a mismatch', () => {
    const c = decideClaim(undefined, req('c1'), T)
    expect(c.result).toEqual({ kind: 'claimed' })
    const held = c.write!
    expect(decideClaim(held, req('c2'), T + 10).result).toEqual({ kind: 'in_flight', leaseUntil: T + 1_000 })
    const response = { status: 201, headers: [] as [string, string][], body: Buffer.from('ok') }
    const done = decideFinish(held, 'c1', { kind: 'completed', response }, 60_000, T + 20)!
    expect(decideClaim(done, req('c3'), T + 30).result).toEqual({ kind: 'completed', response })
    expect(decideClaim(done, req('c4', { fingerprint: 'other' }), T + 30).result).toEqual({ kind: 'mismatch' })
  })
  test('past its lease an in-flight record is an unknown outcome (crash), taken over only with retryUnknown', () => {
    const held = decideClaim(undefined, req('c1'), T).write!
    const found = decideClaim(held, req('c2'), T + 1_000)
    expect(found.result).toEqual({ kind: 'unknown', reason: 'crash', abandoned: true })
    expect(found.write?.state).toBe('unknown')
    expect(decideClaim(held, req('c3', { retryUnknown: true }), T + 1_000).result).toEqual({ kind: 'claimed', after: 'crash', abandoned: true })
  })
  test('finish, renew and release act only for the claim that holds the record', () => {
    const held = decideClaim(undefined, req('c1'), T).write!
    expect(decideFinish(held, 'other', { kind: 'not_stored', status: 201 }, 60_000, T)).toBeUndefined()
    expect(mayRenew(held, 'other')).toBe(false)
    expect(mayRenew(held, 'c1')).toBe(true)
    expect(decideRelease(held, 'other')).toEqual({ result: { kind: 'not_held' } })
    expect(decideRelease(held, 'c1')).toEqual({ result: { kind: 'released' }, write: null })
  })
  test('release puts back the unknown outcome a claim took over, also after that claim\'s own lease made it a crash', () => {
    const unknown: IdemRecord = { state: 'unknown', fingerprint: 'fp', claimId: 'c1', leaseUntil: 0, expiresAt: T + 60_000, reason: 'timeout' }
    const taken = decideClaim(unknown, req('c2', { retryUnknown: true }), T).write!
    expect(decideRelease(taken, 'c2')).toEqual({ result: { kind: 'restored' }, write: { ...unknown, claimId: 'c2' } })
    const crashed = decideClaim(taken, req('c3'), T + 1_000).write!
    expect(decideRelease(crashed, 'c2')).toEqual({ result: { kind: 'restored', lapsed: true }, write: { ...unknown, claimId: 'c2' } })
    // a finished unknown outcome, even reason crash, is not its claim's to give back
    expect(decideRelease({ ...unknown, reason: 'crash' }, 'c1')).toEqual({ result: { kind: 'not_held' } })
  })
  test('resolve settles only unknown outcomes (or crashed holders)', () => {
    const unknown: IdemRecord = { state: 'unknown', fingerprint: 'fp', claimId: 'c1', leaseUntil: 0, expiresAt: T + 60_000, reason: 'timeout' }
    expect(decideResolve(unknown, 'failed', 60_000, T)).toEqual({ result: { kind: 'resolved', reason: 'timeout' }, write: null })
    expect(decideResolve(unknown, 'completed', 60_000, T).write).toMatchObject({ state: 'not_stored', status: 0 })
    const live = decideClaim(undefined, req('c1'), T).write!
    expect(decideResolve(live, 'failed', 60_000, T + 10).result).toEqual({ kind: 'refused', state: 'in_flight' })
    expect(decideResolve(undefined, 'failed', 60_000, T).result).toEqual({ kind: 'not_found' })
  })
})

describe('the fencing window tracker (src/fencing/window-tracker.ts)', () => {
  test('a newer token waits for an older one of its resource, and goes once it leaves', async () => {
    const t = new WindowTracker()
    const f5 = t.enter('r', 5n)
    const f6 = t.enter('r', 6n)
    expect(f5).toBe(f6)
    let went = false
    const wait = t.waitForOlder(f6, 6n, 1_000).then((ok) => { went = ok })
    await Promise.resolve()
    expect(went).toBe(false)
    t.leave(f5, 5n)
    await wait
    expect(went).toBe(true)
    t.leave(f6, 6n)
    expect(t.resources).toBe(0)
  })
  test('the wait runs out when the older one stays', async () => {
    const t = new WindowTracker()
    const f = t.enter('r', 1n)
    t.enter('r', 2n)
    expect(await t.waitForOlder(f, 2n, 20)).toBe(false)
  })
  test('markSent keeps the highest token sent: an older one ending after it is overtaken', () => {
    const t = new WindowTracker()
    const f = t.enter('r', 3n)
    f.markSent(4n)
    f.markSent(3n)
    expect(f.sent).toBe(4n)
  })
})

describe('header rules (RFC 9110 §7.6)', () => {
  const incoming = (raw: string[]) => {
    const headers: Record<string, string> = {}
    for (let i = 0; i < raw.length; i += 2) headers[raw[i].toLowerCase()] = raw[i + 1]
    return { rawHeaders: raw, headers, socket: { remoteAddress: '::ffff:10.0.0.9' } } as unknown as IncomingMessage
  }
  test('hop-by-hop and Connection-named fields go; the gateway\'s own come after; the request id replaces the client\'s', () => {
    const out = requestHeaders(incoming(['Host', 'gw', 'Connection', 'x-secret, keep-alive', 'X-Secret', '1', 'Keep-Alive', 't=5', 'X-Forwarded-For', '1.2.3.4', 'X-Request-Id', 'old', 'Fencing-Token', '7', 'traceparent', 'client']),
      'up:80', new Set(['fencing-token']), ['x-request-id', 'new'], ['traceparent'])
    const pairs: [string, string][] = []
    for (let i = 0; i < out.length; i += 2) pairs.push([out[i].toLowerCase(), out[i + 1]])
    expect(pairs).toEqual([
      ['fencing-token', '7'],
      ['x-request-id', 'new'],
      ['host', 'up:80'],
      ['x-forwarded-for', '1.2.3.4, 10.0.0.9'],
      ['x-forwarded-host', 'gw'],
      ['x-forwarded-proto', 'http'],
      ['via', '1.1 fencegate'],
    ])
  })
  test('responses: hop-by-hop and Connection-named fields go (every Connection line counts), the rest stay in order, Set-Cookie lines several', () => {
    const pairs = responseHeaders(['set-cookie', 'a=1', 'connection', 'x-internal', 'x-internal', '1', 'content-type', 'text/plain', 'connection', 'keep-alive, X-Other', 'x-other', '2', 'set-cookie', 'b=2', 'transfer-encoding', 'chunked'])
    expect(pairs).toEqual([['set-cookie', 'a=1'], ['content-type', 'text/plain'], ['set-cookie', 'b=2']])
    expect(flat(pairs, ['via', 'v'], 'content-type')).toEqual(['set-cookie', 'a=1', 'set-cookie', 'b=2', 'via', 'v'])
  })
  test('Connection values name fields; keep-alive and close name none', () => {
    expect(connectionNamed('close')).toBeUndefined()
    expect(connectionNamed(['X-A, x-b', 'X-C'])).toEqual(new Set(['x-a', 'x-b', 'x-c']))
  })
})
