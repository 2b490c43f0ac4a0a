// The front door's pure parts (src/front-door.ts): which paths and request ids are refused or
// replaced, and that an error escaping @hono/node-server's listener is the gateway's 500, not
// the upstream's 502. The listener-level refusals over real sockets are in test/hostile/input.test.ts.
import { describe, expect, test } from 'vitest'
import { RequestError } from '@hono/node-server'
import { dotSegmentPath, saneRequestId, unusableRequest } from '../../src/front-door.js'

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

describe('what @hono/node-server cannot turn into a Request', () => {
  test('a request it refuses is the client\'s 400 request-malformed, with a new request id', async () => {
    const r = unusableRequest('x-request-id')(new RequestError('Invalid URL'))
    expect(r.status).toBe(400)
    const body = await r.json() as Record<string, unknown>
    expect(body).toMatchObject({ type: 'urn:fencegate:problem:request-malformed', status: 400, instance: r.headers.get('x-request-id') })
    expect(r.headers.get('content-type')).toBe('application/problem+json')
    expect(r.headers.get('connection')).toBe('close')
  })
  test('any other error is the gateway\'s 500 gateway-error, never blamed on the upstream', async () => {
    const r = unusableRequest('x-request-id')(new TypeError('boom'))
    expect(r.status).toBe(500)
    expect(await r.json()).toMatchObject({ type: 'urn:fencegate:problem:gateway-error', status: 500, error: { type: 'api_error', code: 'gateway-error' } })
  })
})
