// The pure cores the request path is built on, without sockets: cheap enough to run on every
// save (`npx vitest run test/unit`). The contract's behaviour through real HTTP is in the
// other test files; these pin the rules each core implements.
import { describe, expect, test } from 'vitest'
import { parseFencingToken, MAX_TOKEN } from '../../src/fencing/token.js'
import { parseIdempotencyKey } from '../../src/idempotency/key.js'
import { fingerprint } from '../../src/idempotency/fingerprint.js'
import { keyHashOf } from '../../src/idempotency/record-key.js'
import { compileTemplate, pathParams } from '../../src/config/template.js'
import { parseDuration, parseSize } from '../../src/config/units.js'

describe('fencing token (contract §3)', () => {
  test.each([['0', 0n], ['1', 1n], ['33', 33n], ['9223372036854775807', MAX_TOKEN]])('%s is accepted', (s, n) => {
    expect(parseFencingToken(s)).toBe(n)
  })
  test.each(['', '-1', '+1', '01', '1.0', '1e3', ' 1', '1 ', '1, 2', '9223372036854775808', '99999999999999999999', '0x10'])('%j is malformed', (s) => {
    expect(parseFencingToken(s)).toBeUndefined()
  })
  test('2^53 + 1 is kept exactly', () => {
    expect(parseFencingToken('9007199254740993')).toBe(9007199254740993n)
  })
})

describe('idempotency key (draft-ietf-httpapi-idempotency-key-header §2.1)', () => {
  test('bare and quoted name the same key; escapes are undone', () => {
    expect(parseIdempotencyKey('abc')).toBe('abc')
    expect(parseIdempotencyKey('"abc"')).toBe('abc')
    expect(parseIdempotencyKey('"a\\"b\\\\c"')).toBe('a"b\\c')
  })
  test.each(['', '""', 'a b', '"a b"', '"abc', '"a\\x"', 'a, b', 'x'.repeat(256), 'é'])('%j is malformed', (s) => {
    expect(parseIdempotencyKey(s)).toBeUndefined()
  })
  test('255 characters is the longest key', () => {
    expect(parseIdempotencyKey('k'.repeat(255))).toBe('k'.repeat(255))
  })
})

describe('fingerprint (contract §4)', () => {
  const body = Buffer.from('{"amount":1}')
  test('method, path and query, content type and body each change it', () => {
    const base = fingerprint('POST', '/a?x=1', 'application/json', body)
    expect(fingerprint('POST', '/a?x=1', 'application/json', Buffer.from(body))).toBe(base)
    for (const other of [
      fingerprint('PATCH', '/a?x=1', 'application/json', body),
      fingerprint('POST', '/a?x=2', 'application/json', body),
      fingerprint('POST', '/a?x=1', 'text/plain', body),
      fingerprint('POST', '/a?x=1', undefined, body),
      fingerprint('POST', '/a?x=1', 'application/json', Buffer.from('{"amount":2}')),
    ]) expect(other).not.toBe(base)
  })
  test('parts are length-prefixed: moving bytes between them changes it', () => {
    expect(fingerprint('POST', '/ab', 'c', Buffer.alloc(0))).not.toBe(fingerprint('POST', '/a', 'bc', Buffer.alloc(0)))
  })
  test('a large body hashes the same way in parts as in one piece', () => {
    const big = Buffer.alloc(64 * 1024, 7)
    expect(fingerprint('POST', '/', 'x', big)).toMatch(/^[0-9a-f]{64}$/)
    expect(fingerprint('POST', '/', 'x', big)).toBe(fingerprint('POST', '/', 'x', Buffer.from(big)))
  })
  test('the key hash joins scope and key, so one key under two scopes differs', () => {
    expect(keyHashOf('', 'k')).not.toBe(keyHashOf('a'.repeat(64), 'k'))
    expect(keyHashOf('', 'k')).toMatch(/^[0-9a-f]{64}$/)
  })
})

describe('templates (fencing.resource, idempotency.scope)', () => {
  const src = (over: Partial<Record<'param' | 'header' | 'query', Record<string, string>>> = {}) => ({
    param: (n: string) => over.param?.[n],
    header: (n: string) => over.header?.[n],
    query: (n: string) => over.query?.[n],
  })
  test('literals, placeholders and escaped braces fill in order', () => {
    const t = compileTemplate('{{acct}}:{param.account}/{header.X-Tenant}?{query.q}', ['account'])
    expect(t(src({ param: { account: 'a1' }, header: { 'x-tenant': 't' }, query: { q: 'v' } }))).toBe('{acct}:a1/t?v')
  })
  test('an absent or empty value leaves the template unfilled', () => {
    const t = compileTemplate('account:{param.account}', ['account'])
    expect(typeof t(src())).not.toBe('string')
    expect(typeof t(src({ param: { account: '' } }))).not.toBe('string')
  })
  test.each([
    ['{param.nope}', /names no parameter/],
    ['{header.bad name}', /not a valid header field name/],
    ['{header.Connection}', /hop-by-hop/],
    ['{cookie.x}', /unknown source/],
    ['{param}', /must be/],
    ['a}b', /unmatched/],
    ['{param.account', /unclosed/],
  ])('%s is a config error', (text, message) => {
    expect(() => compileTemplate(text, ['account'])).toThrow(message)
  })
  test('path parameters are read from the route pattern', () => {
    expect(pathParams('/accounts/:account/charges/:id')).toEqual(['account', 'id'])
  })
})

describe('units', () => {
  test.each([['500ms', 500], ['10s', 10_000], ['5m', 300_000], ['24h', 86_400_000], ['7d', 604_800_000]])('%s is %d ms', (s, ms) => {
    expect(parseDuration(s)).toBe(ms)
  })
  test.each(['10', '10 s', '1w', '-1s', ''])('%j is not a duration', (s) => {
    expect(parseDuration(s)).toBeUndefined()
  })
  test.each([['65536', 65536], ['64KiB', 65536], ['1MiB', 1048576]])('%s is %d bytes', (s, n) => {
    expect(parseSize(s)).toBe(n)
  })
})
