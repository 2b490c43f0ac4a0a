// The test helpers themselves: a helper that stopped failing would let every test using it pass
// vacuously, so each one is shown failing where it must.
import { describe, expect, test } from 'vitest'
import { parse } from 'yaml'
import { until } from './wait.js'
import { expectProblem, send } from './http.js'
import { gatewayConfig, withGateway } from './gateway.js'
import { parseConfig } from '../../src/config/load.js'

describe('until', () => {
  test('resolves with the first truthy value', async () => {
    let n = 0
    expect(await until(() => ++n >= 3 && `after ${n}`)).toBe('after 3')
  })

  test('times out naming what it waited for and the last value, or the last error', async () => {
    await expect(until(() => 0, { timeoutMs: 60, message: 'the count to move' })).rejects.toThrow(/waiting for the count to move; last value: 0$/)
    await expect(until(() => { expect(2).toBe(3); return true }, { timeoutMs: 60 })).rejects.toThrow(/; last error: expected 2 to be 3/)
    await expect(until(() => false, { timeoutMs: 60, message: () => 'a message made at the end' })).rejects.toThrow(/waiting for a message made at the end/)
  })
})

describe('expectProblem', () => {
  const body = {
    type: 'urn:fencegate:problem:stale-fencing-token', title: 'Stale fencing token', status: 412, detail: 'Token 5 is below 6.',
    instance: 'req-1', token: '5', error: { type: 'invalid_request_error', code: 'stale-fencing-token', message: 'Token 5 is below 6.' },
  }
  const reply = (over: Record<string, unknown> = {}, headers: Record<string, string> = {}) => ({
    status: 412,
    headers: { 'content-type': 'application/problem+json', 'x-request-id': 'req-1', 'retry-after': '1', ...headers },
    text: JSON.stringify({ ...body, ...over }),
  })
  const want = { status: 412, type: 'stale-fencing-token' }

  test('passes a problem the gateway would make, and returns its body', () => {
    expect(expectProblem(reply(), { ...want, title: 'Stale fencing token', detail: ['Token 5', /below \d/], instance: 'req-1', members: { token: '5' }, headers: { 'retry-after': '1' } }).token).toBe('5')
  })

  test.each([
    ['another status', reply(), { ...want, status: 409 }],
    ['another type', reply(), { ...want, type: 'fencing-token-required' }],
    ['not problem+json', reply({}, { 'content-type': 'application/json' }), want],
    ['a body status that differs', reply({ status: 400 }), want],
    ['no title', reply({ title: '' }), want],
    ['no detail', reply({ detail: undefined }), want],
    ['an error member naming another problem', reply({ error: { ...body.error, code: 'x' } }), want],
    ['an error member without the detail', reply({ error: { ...body.error, message: 'other' } }), want],
    ['an instance that is not the echoed request id', reply({}, { 'x-request-id': 'req-2' }), want],
    ['another member', reply(), { ...want, members: { token: '6' } }],
    ['a detail without the fragment', reply(), { ...want, detail: 'above' }],
    ['a missing header', reply(), { ...want, headers: { 'www-authenticate': /./ } }],
  ])('fails on %s', (_what, r, w) => {
    expect(() => expectProblem(r, w)).toThrow()
  })
})

describe('gatewayConfig and withGateway', () => {
  test('a config object becomes the YAML of contract §2, with the tests\' defaults', () => {
    const text = gatewayConfig({
      routes: [
        { name: 'pay', path: '/accounts/:account/*', methods: ['POST'], upstream: 'http://127.0.0.1:9', fencing: { resource: 'account:{param.account}' } },
        { name: 'q', path: '/q/*', upstream: { url: 'http://127.0.0.1:9', connections: 1 }, idempotency: { releaseStatuses: [422, 503] } },
      ],
    })
    expect(parse(text)).toEqual({
      listen: '127.0.0.1:0',
      admin: { listen: '127.0.0.1:0' },
      store: { kind: 'memory' },
      routes: [
        { name: 'pay', match: { path: '/accounts/:account/*', methods: ['POST'] }, upstream: { url: 'http://127.0.0.1:9', timeout: '2s' }, fencing: { resource: 'account:{param.account}' } },
        { name: 'q', match: { path: '/q/*' }, upstream: { url: 'http://127.0.0.1:9', connections: 1, timeout: '2s' }, idempotency: { releaseStatuses: [422, 503] } },
      ],
    })
    expect(text).toContain('methods: [POST]')
    expect(parseConfig(text, '/tmp/fencegate.yaml').routes[1].upstream).toMatchObject({ timeout: 2000, connections: 1 })
  })

  const early = withGateway((up) => ({ routes: [{ name: 'plain', path: '/plain/*', upstream: up.url }] }))
  let before = ''
  try { void early.gw.url } catch (e) { before = (e as Error).message }

  test('withGateway\'s handles throw before its beforeAll, and reach the gateway and upstream after it', async () => {
    expect(before).toMatch(/withGateway's gateway is not started/)
    expect((await send(`${early.gw.url}/plain/x`)).status).toBe(201)
    expect(early.up.count('/plain/')).toBe(1)
  })
})
