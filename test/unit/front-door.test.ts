// The front door's pure parts (src/front-door.ts): which paths and request ids are refused or
// replaced, and the URL a request is routed on. The listener-level refusals over real sockets
// are in test/hostile/input.test.ts.
import type { IncomingMessage } from 'node:http'
import { describe, expect, test } from 'vitest'
import { routingUrl, saneRequestId } from '../../src/front-door.js'
import { dotSegmentPath } from '../../src/gateway.js'
import { Problem } from '../../src/problems.js'

describe('dot-segment paths', () => {
  test.each(['/a/../b', '/a/./b', '/..', '/a/..', '/a/%2e%2E/b', '/a%2f..%2fb', '/a\\..\\b', '/a/.%2e/b?x=1'])('%s is refused: 400 bad-path', (target) => {
    const p = dotSegmentPath(target)
    expect([p?.status, p?.name_]).toEqual([400, 'bad-path'])
  })
  test.each(['/a/b', '/a.b/c', '/a/..b', '/a/b.', '/files/v1.2.3', '/a?next=/../b', '/%41'])('%s passes', (target) => {
    expect(dotSegmentPath(target)).toBeUndefined()
  })
})

describe('client request ids', () => {
  test.each(['9b2f0c1e-6f55-4a0e-8d8e-0a4b7d1c2e3f', '01HZY3K5Q7W8', '00-abc-01', 'a:b/c+d=e.f_g'])('%s is used', (id) => {
    expect(saneRequestId(id)).toBe(id)
  })
  test.each([['', 'empty'], ['a b', 'a space'], ['x'.repeat(201), '201 characters'], ['a\nb', 'a newline'], ['<script>', 'markup']])('%j (%s) is replaced', (id) => {
    expect(saneRequestId(id)).toBeUndefined()
  })
  test('an id sent twice is replaced', () => {
    expect(saneRequestId(['a', 'b'])).toBeUndefined()
  })
})

describe('the URL a request is routed on', () => {
  const req = (url: string, host?: string, encrypted = false) =>
    ({ url, headers: host === undefined ? {} : { host }, socket: { encrypted } }) as unknown as IncomingMessage
  test.each([
    ['/a/b?x=1', 'gw:8080', 'http://gw:8080/a/b?x=1'],
    ['', 'gw', 'http://gw/'],
    ['/a?next=\\x', 'gw', 'http://gw/a?next=\\x'],
    ['/caf%C3%A9', 'gw', 'http://gw/caf%C3%A9'],
    ['/a"b', 'GW', 'http://gw/a%22b'],
    ['http://elsewhere/x?y', 'gw', 'http://elsewhere/x?y'],
  ])('%j with Host %j: %s', (target, host, url) => {
    expect(routingUrl(req(target, host))).toBe(url)
  })
  test('over TLS the scheme is https', () => {
    expect(routingUrl(req('/a', 'gw', true))).toBe('https://gw/a')
  })
  test.each([
    ['*', 'gw', 'Invalid URL'],
    ['/a', undefined, 'Missing host header'],
    ['/a', 'user@gw', 'Invalid host header'],
    ['/a', 'g w', 'Invalid URL'],
    ['/a\\..\\b', 'gw', 'Backslash in request path'],
    ['/a\\b', 'g:w', 'Backslash in request path'],
    ['http://x\\y/z', 'gw', 'Invalid absolute URL'],
  ])('%j with Host %j: 400 request-malformed (%s)', (target, host, why) => {
    const p = routingUrl(req(target, host))
    expect(p).toBeInstanceOf(Problem)
    expect([(p as Problem).status, (p as Problem).name_, (p as Problem).detail]).toEqual([400, 'request-malformed', `The request cannot be routed (${why}); nothing was forwarded.`])
  })
})
