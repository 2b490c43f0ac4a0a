// idempotency.settle's pure parts (contract §4a): the probe templates with {key}, the filled
// probe request, and when a record's next probe is due (or none: probing ended).
import { describe, expect, test } from 'vitest'
import { compileProbeTemplate } from '../../src/config/probe-template.js'
import { parseProbe, probeFiller } from '../../src/idempotency/settle/request.js'
import { nextProbeAt, unknownSince } from '../../src/idempotency/settle/settler.js'
import type { TemplateSource } from '../../src/config/template.js'
import type { UnknownRecord } from '../../src/store/index.js'

const src = (values: Record<string, string>): TemplateSource => ({
  param: (n) => values[`param.${n}`], header: (n) => values[`header.${n}`], query: (n) => values[`query.${n}`],
})

describe('probe templates', () => {
  test('{key} and every filled value are percent-encoded in the path, as they are in a header', () => {
    const path = compileProbeTemplate('/accounts/{param.account}/charges?idempotencyKey={key}', ['account'], true)
    expect(path(src({ 'param.account': 'a b/c' }), 'k&1=2#x/y')).toBe('/accounts/a%20b%2Fc/charges?idempotencyKey=k%261%3D2%23x%2Fy')
    const header = compileProbeTemplate('Key {key} for {header.authorization}', [], false)
    expect(header(src({ 'header.authorization': 'Bearer t/1' }), 'k/1')).toBe('Key k/1 for Bearer t/1')
  })

  test('{{key}} is a literal; a missing value is unfilled; a parameter the route lacks does not compile', () => {
    expect(compileProbeTemplate('/x/{{key}}/{key}', [], true)(src({}), 'k')).toBe('/x/{key}/k')
    expect(compileProbeTemplate('/x/{header.x-user}/{key}', [], true)(src({}), 'k')).toMatchObject({ unfilled: 'missing' })
    expect(() => compileProbeTemplate('/x/{param.user}', ['account'], true)).toThrow(/\{param\.user\} names no parameter/)
  })

  test('the filled request round-trips; text that is not one is refused', () => {
    const fill = probeFiller({ probe: { method: 'GET', path: '/a/{param.account}?k={key}', headers: { Authorization: '{header.authorization}' }, applied: [200], notApplied: [404] }, after: 2000, every: 30_000, for: undefined }, '/a/:account/*')
    const text = fill(src({ 'param.account': 'acc', 'header.authorization': 'Bearer x' }), 'key-1', 'req-1')!
    expect(parseProbe(text)).toEqual({ method: 'GET', path: '/a/acc?k=key-1', headers: [['Authorization', 'Bearer x']], requestId: 'req-1' })
    expect(fill(src({ 'param.account': 'acc' }), 'key-1', 'req-1')).toBeUndefined()
    expect(parseProbe('{"method":"POST","path":"/a","headers":[],"requestId":"r"}')).toBeUndefined()
    expect(parseProbe('not json')).toBeUndefined()
  })
})

describe('when the next probe is due', () => {
  const key = { route: 'payments', scope: '', key: 'k' }
  const p = { afterMs: 2000, forMs: 60_000, ttlMs: 86_400_000 }
  test('finished as unknown: its nextProbe; a crashed holder never probed: after past its lease', () => {
    const finished: UnknownRecord = { key, reason: 'timeout', leaseUntil: 0, expiresAt: 1_000_000 + p.ttlMs, probe: '{}', nextProbe: 1_002_000 }
    expect(unknownSince(finished, p.ttlMs)).toBe(1_000_000)
    expect(nextProbeAt(finished, p)).toBe(1_002_000)
    const crashed: UnknownRecord = { key, reason: 'crash', leaseUntil: 5_000_000, expiresAt: 9_000_000, probe: '{}' }
    expect(nextProbeAt(crashed, p)).toBe(5_002_000)
  })

  test('none without a probe request, or once `for` has passed since it became unknown', () => {
    expect(nextProbeAt({ key, reason: 'timeout', leaseUntil: 0, expiresAt: p.ttlMs }, p)).toBeNull()
    expect(nextProbeAt({ key, reason: 'timeout', leaseUntil: 0, expiresAt: p.ttlMs, probe: '{}', probes: 9, nextProbe: 60_001 }, p)).toBeNull()
    expect(nextProbeAt({ key, reason: 'timeout', leaseUntil: 0, expiresAt: p.ttlMs, probe: '{}', probes: 9, nextProbe: 60_000 }, p)).toBe(60_000)
  })
})
