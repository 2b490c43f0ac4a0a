/**
 * Hostile input (issue: promises that hold in the corners).
 * - One fencing input, one value: a fencing resource or idempotency scope read from a value the
 *   upstream could read otherwise (given twice, matrix parameters, %2F, %5C, %00, double
 *   encoding, "_" header variants) is refused with 400 before anything changes: no mark raised,
 *   no key claimed, nothing forwarded.
 * - The request line: a #fragment is refused (400, as Envoy does), a version other than HTTP/1.0
 *   and 1.1 gets 505; both never reach the upstream.
 * - Client timeouts (`server.headersTimeout`, `requestTimeout`, `keepAliveTimeout`).
 * - Raw-socket abuse (smuggling variants, oversized heads, unknown methods, odd targets, bad
 *   bytes): never a crash, never a 500, nothing of a refused request reaches the upstream, and
 *   the gateway serves the next request.
 */
import net from 'node:net'
import { describe, expect, test } from 'vitest'
import { withGateway } from '../helpers/gateway.js'
import { expectProblem, post, send } from '../helpers/http.js'
import { sleep } from '../helpers/wait.js'
import { parseConfig, ConfigError } from '../../src/config/load.js'

const P = 'urn:fencegate:problem:'

interface RawReply {
  /** everything the gateway sent */
  text: string
  /** status of the first response, 0 when none */
  status: number
  /** the first response's header fields, by lower-case name (the last line of a name wins) */
  headers: Record<string, string>
  /** the first response's body (Content-Length bytes of it, when given) */
  body: string
  /** the first response's body parsed as JSON, when it is */
  json?: any
  /** whether the gateway closed the connection before `waitMs` */
  closed: boolean
  /** ms from the first write until the gateway closed the connection (or until `waitMs`) */
  ms: number
}

/**
 * Writes `chunks` to a fresh connection (a number in the list pauses that many ms) and collects
 * what comes back until the gateway closes the connection or `waitMs` have passed.
 */
function raw(url: string, chunks: (string | Buffer | number)[], waitMs = 1500): Promise<RawReply> {
  const { hostname, port } = new URL(url)
  return new Promise((resolve) => {
    const s = net.connect(Number(port), hostname)
    const got: Buffer[] = []
    let t0 = 0
    let done = false
    const finish = (closed: boolean) => {
      if (done) return
      done = true
      clearTimeout(timer)
      const text = Buffer.concat(got).toString('latin1')
      const m = /^HTTP\/1\.[01] (\d{3})/.exec(text)
      const head = text.indexOf('\r\n\r\n')
      const headers: Record<string, string> = {}
      let body = ''
      let json: any
      if (head > 0) {
        for (const line of text.slice(0, head).split('\r\n').slice(1)) {
          const i = line.indexOf(':')
          if (i > 0) headers[line.slice(0, i).trim().toLowerCase()] = line.slice(i + 1).trim()
        }
        const cl = headers['content-length']
        body = text.slice(head + 4, cl !== undefined ? head + 4 + Number(cl) : undefined)
        try { json = JSON.parse(body) } catch { /* not JSON */ }
      }
      s.destroy()
      resolve({ text, status: m ? Number(m[1]) : 0, headers, body, json, closed, ms: performance.now() - t0 })
    }
    const timer = setTimeout(() => finish(false), waitMs)
    s.on('data', (d) => got.push(d))
    s.on('close', () => finish(true))
    s.on('error', () => { /* a reset counts as closed */ })
    s.on('connect', async () => {
      t0 = performance.now()
      for (const c of chunks) {
        if (typeof c === 'number') await sleep(c)
        else if (!s.destroyed) s.write(c)
      }
    })
  })
}

const crlf = (lines: string[], body = '') => `${lines.join('\r\n')}\r\n\r\n${body}`

describe('one fencing input, one value', () => {
  const { up, gw } = withGateway((up) => ({
    store: { kind: 'sqlite', path: '@DIR@/fg.db' },
    routes: [
      { name: 'q', path: '/q/*', upstream: up.url, fencing: { resource: 'acct:{query.account}' } },
      { name: 'h', path: '/h/*', upstream: up.url, fencing: { resource: 'acct:{header.X-Account}' } },
      { name: 'accounts', path: '/accounts/:account/*', upstream: up.url, fencing: { resource: 'account:{param.account}' } },
      {
        name: 'scoped', path: '/scoped/:org/:team/*', upstream: up.url,
        fencing: { resource: 'org:{param.org}' },
        idempotency: { required: true, scope: '{param.team}|{header.X-Tenant}|{query.t}' },
      },
    ],
  }))
  let n = 0
  const acct = () => `A${++n}x${Date.now()}`

  /** what the upstream received whose url starts with `prefix` */
  const seen = (prefix: string) => up.count(prefix)

  test('the issue: ?account=O&account=V with token 5 after token 100 for V is 400, nothing forwarded, the mark stays 100', async () => {
    const V = acct(), O = acct()
    expect((await post(`${gw.url}/q/x?account=${V}`, {}, { 'fencing-token': '100' })).status).toBe(201)
    const before = up.seen.length
    const r = await post(`${gw.url}/q/x?account=${O}&account=${V}`, {}, { 'fencing-token': '5' })
    expectProblem(r, { status: 400, type: 'fencing-resource-missing', detail: 'query parameter account is given twice' })
    expect(up.seen.length).toBe(before)
    // O was not fenced either: its mark was never raised to 5
    expect((await post(`${gw.url}/q/x?account=${O}`, {}, { 'fencing-token': '4' })).status).toBe(201)
    // V's mark is still 100: token 5 alone is stale
    const stale = await post(`${gw.url}/q/x?account=${V}`, {}, { 'fencing-token': '5' })
    expectProblem(stale, { status: 412, type: 'stale-fencing-token', members: { resource: `acct:${V}`, token: '5', highestToken: '100' } })
  })

  test.each([
    ['repeated with an empty value', (v: string) => `account=&account=${v}`],
    ['repeated behind an encoded key', (v: string) => `account=${v}&acc%6Funt=O`],
    ['repeated behind a ";"', (v: string) => `account=${v}&x=1;account=O`],
    ['next to a ";"', (v: string) => `account=${v};account=O`],
    ['after a ";"', (v: string) => `x=1;account=${v}`],
    ['holding a double-encoded slash', (v: string) => `account=${v}%252Fx`],
    ['holding bytes that are not UTF-8', (v: string) => `account=${v}%FF`],
    ['holding a NUL', (v: string) => `account=${v}%00`],
  ])('a query parameter %s is refused and nothing is forwarded', async (_what, q) => {
    const V = acct()
    const before = up.seen.length
    const r = await post(`${gw.url}/q/x?${q(V)}`, {}, { 'fencing-token': '7' })
    expectProblem(r, { status: 400, type: 'fencing-resource-missing' })
    expect(up.seen.length).toBe(before)
    expect((await post(`${gw.url}/q/x?account=${V}`, {}, { 'fencing-token': '1' })).status).toBe(201) // no mark raised
  })

  test('a query value with an encoded slash, a "+" or other parameters around it is one value, read decoded', async () => {
    const V = acct()
    expect((await post(`${gw.url}/q/x?a=1&account=${V}%2Fsub+1&b=2`, {}, { 'fencing-token': '9' })).status).toBe(201)
    const stale = await post(`${gw.url}/q/x?account=${V}/sub%201`, {}, { 'fencing-token': '8' })
    expectProblem(stale, { status: 412, type: 'stale-fencing-token', members: { resource: `acct:${V}/sub 1` } })
  })

  test('two X-Account header lines are 400 (the gateway used to fence "O, V" and forward both)', async () => {
    const V = acct(), O = acct()
    const before = up.seen.length
    const r = await post(`${gw.url}/h/x`, {}, { 'fencing-token': '5', 'x-account': [O, V] })
    expectProblem(r, { status: 400, type: 'fencing-resource-missing', detail: 'header X-Account is given on more than one line' })
    expect(up.seen.length).toBe(before)
    // one line with a comma list is one value, as every server reads it
    expect((await post(`${gw.url}/h/x`, {}, { 'fencing-token': '5', 'x-account': `${O}, ${V}` })).status).toBe(201)
  })

  test('X-Account with X_Account (read as one header by PHP, Rack, WSGI) is 400', async () => {
    const V = acct(), O = acct()
    const before = up.seen.length
    const both = await raw(gw.url, [crlf(['POST /h/x HTTP/1.1', 'Host: x', 'Fencing-Token: 5', `X-Account: ${O}`, `X_Account: ${V}`, 'Content-Length: 0', 'Connection: close'])])
    expectProblem(both, { status: 400, type: 'fencing-resource-missing' })
    const variant = await raw(gw.url, [crlf(['POST /h/x HTTP/1.1', 'Host: x', 'Fencing-Token: 5', `X_Account: ${V}`, 'Content-Length: 0', 'Connection: close'])])
    expect(variant.status).toBe(400)
    expect(up.seen.length).toBe(before)
  })

  test.each([
    ['matrix parameters', 'a;x=1'],
    ['an encoded ";"', 'a%3Bx=1'],
    ['an encoded slash', 'a%2Fb'],
    ['an encoded slash, lower case', 'a%2fb'],
    ['an encoded backslash', 'a%5Cb'],
    ['a NUL', 'a%00b'],
    ['a double-encoded slash', 'a%252Fb'],
    ['bytes that are not UTF-8', 'a%C0%AF'],
  ])('a path parameter with %s is 400 and nothing is forwarded', async (_what, seg) => {
    const before = up.seen.length
    const r = await post(`${gw.url}/accounts/${seg}/charges`, {}, { 'fencing-token': '5' })
    expectProblem(r, { status: 400, type: 'fencing-resource-missing', detail: /^The fencing resource of this route cannot be determined from the request: path parameter :account / })
    expect(up.seen.length).toBe(before)
  })

  test('a path parameter with ordinary escapes is decoded and fenced; matrix parameters elsewhere do not matter', async () => {
    const a = acct()
    expect((await post(`${gw.url}/accounts/${a}%20x/charges`, {}, { 'fencing-token': '3' })).status).toBe(201)
    const stale = await post(`${gw.url}/accounts/${a}%20x/charges;jsessionid=1`, {}, { 'fencing-token': '2' })
    expectProblem(stale, { status: 412, type: 'stale-fencing-token', members: { resource: `account:${a} x` } })
    expect(seen(`/accounts/${a}`)).toBe(1)
  })

  describe('the idempotency scope', () => {
    const ok = { 'x-tenant': 'T' }
    const call = (path: string, token: string, headers: Record<string, string | string[]> = ok) =>
      post(`${gw.url}${path}`, { a: 1 }, { 'fencing-token': token, 'idempotency-key': `k-${++n}`, ...headers })

    test.each([
      ['a query parameter given twice', (org: string) => call(`/scoped/${org}/team/x?t=1&t=2`, '100')],
      ['a header given on two lines', (org: string) => call(`/scoped/${org}/team/x?t=1`, '100', { 'x-tenant': ['T', 'U'] })],
      ['a path parameter with matrix parameters', (org: string) => call(`/scoped/${org}/team;v=1/x?t=1`, '100')],
      ['a path parameter with an encoded slash', (org: string) => call(`/scoped/${org}/te%2Fam/x?t=1`, '100')],
    ])('%s: 400 idempotency-key-malformed, nothing claimed, no mark raised, nothing forwarded', async (_what, refused) => {
      const org = acct()
      expect((await call(`/scoped/${org}/team/x?t=1`, '5')).status).toBe(201)
      const before = up.seen.length
      expectProblem(await refused(org), { status: 400, type: 'idempotency-key-malformed', detail: 'ambiguously' })
      expect(up.seen.length).toBe(before)
      // token 100 was not accepted for org: 5 is still current (a raised mark would answer 412)
      expect((await call(`/scoped/${org}/team/x?t=1`, '5')).status).toBe(201)
    })

    test('a scope that is absent is refused before the fencing check too', async () => {
      const org = acct()
      expect((await call(`/scoped/${org}/team/x?t=1`, '5')).status).toBe(201)
      const r = await call(`/scoped/${org}/team/x`, '100')
      expectProblem(r, { status: 400, type: 'idempotency-key-malformed', detail: 'query parameter t is absent' })
      expect((await call(`/scoped/${org}/team/x?t=1`, '5')).status).toBe(201)
    })
  })
})

describe('the request line', () => {
  const { up, gw } = withGateway((up) => ({ routes: [{ name: 'plain', path: '/plain/*', upstream: up.url }] }))

  test.each(['/plain/a#frag', '/plain/a#/../../admin', '/plain/a?x=1#frag', '/plain/#'])('a #fragment (%s) is refused with 400, never forwarded', async (target) => {
    const before = up.seen.length
    const r = await raw(gw.url, [crlf([`GET ${target} HTTP/1.1`, 'Host: x', 'Connection: close'])])
    expectProblem(r, { status: 400, type: 'bad-path' })
    expect(up.seen.length).toBe(before)
  })

  test.each(['HTTP/2.0', 'HTTP/0.9', 'HTTP/1.2', 'HTTP/3.0', 'HTTP/9.9'])('version %s gets 505, never forwarded', async (version) => {
    const before = up.seen.length
    const r = await raw(gw.url, [crlf([`POST /plain/v ${version}`, 'Host: x', 'Content-Length: 2', 'Connection: close'], 'ab')])
    expectProblem(r, { status: 505, type: 'http-version-not-supported', members: { error: { type: 'api_error' } } })
    expect(r.text).toContain(`\r\nx-request-id: ${r.json.instance}\r\n`)
    expect(r.closed).toBe(true)
    expect(up.seen.length).toBe(before)
  })

  test('HTTP/1.0 and HTTP/1.1 are served', async () => {
    expect((await raw(gw.url, [crlf(['GET /plain/ten HTTP/1.0', 'Host: x'])])).status).toBe(201)
    expect((await raw(gw.url, [crlf(['GET /plain/eleven HTTP/1.1', 'Host: x', 'Connection: close'])])).status).toBe(201)
    expect(up.count('/plain/ten')).toBe(1)
  })
})

describe('client timeouts (server.headersTimeout, requestTimeout, keepAliveTimeout)', () => {
  const { up, gw } = withGateway((up) => ({
    server: { headersTimeout: '300ms', requestTimeout: '700ms', keepAliveTimeout: '500ms' },
    routes: [{ name: 'plain', path: '/plain/*', upstream: up.url }],
  }))

  test('a partial request line is answered 408 and closed after headersTimeout', async () => {
    const r = await raw(gw.url, ['GET /plain/slowloris HT'], 3000)
    expect(r.closed).toBe(true)
    expect(r.ms).toBeGreaterThanOrEqual(290)
    expect(r.ms).toBeLessThan(1000)
    expectProblem(r, { status: 408, type: 'request-timeout' })
    expect(up.count('/plain/slowloris')).toBe(0)
  })

  test('headers dripping in one by one are cut off at headersTimeout', async () => {
    const drip: (string | number)[] = ['GET /plain/drip HTTP/1.1\r\n']
    for (let i = 0; i < 20; i++) drip.push(100, `X-${i}: y\r\n`)
    const r = await raw(gw.url, drip, 3000)
    expect(r.closed).toBe(true)
    expect(r.ms).toBeLessThan(1000)
    expect(r.status).toBe(408)
    expect(up.count('/plain/drip')).toBe(0)
  })

  test('a connection that never sends a byte is closed after headersTimeout', async () => {
    const r = await raw(gw.url, [], 3000)
    expect(r.closed).toBe(true)
    expect(r.ms).toBeLessThan(1000)
  })

  test('a body that stalls is cut off at requestTimeout', async () => {
    const r = await raw(gw.url, [crlf(['POST /plain/stall HTTP/1.1', 'Host: x', 'Content-Length: 10'], 'ab')], 3000)
    expect(r.closed).toBe(true)
    expect(r.ms).toBeGreaterThanOrEqual(690)
    expect(r.ms).toBeLessThan(1800)
    expect(r.status).not.toBe(500)
  })

  test('an idle keep-alive connection is closed after keepAliveTimeout, not before; the wait for the upstream is not the request\'s time', async () => {
    const r = await raw(gw.url, [crlf(['GET /plain/slow?ms=900 HTTP/1.1', 'Host: x'])], 4000)
    expect(r.status).toBe(200) // 900 ms upstream > requestTimeout 700 ms: only receiving the request counts
    expect(r.closed).toBe(true)
    // closed keepAliveTimeout (500 ms) after the response at ~900 ms
    expect(r.ms).toBeGreaterThanOrEqual(1350)
    expect(r.ms).toBeLessThan(2500)
  })

  test('a keep-alive connection idle longer than headersTimeout (not keepAliveTimeout) serves its next request', async () => {
    const r = await raw(gw.url, [crlf(['GET /plain/ka1 HTTP/1.1', 'Host: x']), 420, crlf(['GET /plain/ka2 HTTP/1.1', 'Host: x', 'Connection: close'])], 3000)
    expect(r.text.match(/HTTP\/1\.1 201/g)).toHaveLength(2)
    expect(up.count('/plain/ka2')).toBe(1)
  })
})

describe('server: config block', () => {
  const base = `routes:
  - name: r
    match:
      path: /r/*
    upstream:
      url: http://127.0.0.1:1
`
  const problems = (text: string): string[] => {
    try {
      parseConfig(text, 'f.yaml')
    } catch (e) {
      expect(e).toBeInstanceOf(ConfigError)
      return (e as ConfigError).problems.map((p) => `${p.path}: ${p.message}`)
    }
    return []
  }

  test('defaults: headers 20s, request 60s, keep-alive 75s', () => {
    expect(parseConfig(base, 'f.yaml').server).toEqual({ headersTimeout: 20_000, requestTimeout: 60_000, keepAliveTimeout: 75_000 })
  })

  test('durations are parsed; mistakes name their YAML path', () => {
    expect(parseConfig(`server:\n  headersTimeout: 300ms\n  requestTimeout: 2s\n  keepAliveTimeout: 1m\n${base}`, 'f.yaml').server)
      .toEqual({ headersTimeout: 300, requestTimeout: 2000, keepAliveTimeout: 60_000 })
    expect(problems(`server:\n  headersTimeout: soon\n${base}`)).toEqual([expect.stringMatching(/^server\.headersTimeout: "soon" is not a duration/)])
    expect(problems(`server:\n  keepAliveTimeout: 0ms\n${base}`)).toEqual([expect.stringMatching(/^server\.keepAliveTimeout: 0ms is out of range/)])
    expect(problems(`server:\n  idleTimeout: 5s\n${base}`)).toEqual(['server.idleTimeout: unknown key'])
    expect(problems(`server:\n  headersTimeout: 2m\n${base}`)).toEqual([expect.stringMatching(/^server\.headersTimeout: headersTimeout \(120000 ms\) must be at most requestTimeout \(60000 ms\)/)])
  })
})

describe('raw-socket abuse: never a crash, never a 500, nothing refused reaches the upstream', () => {
  const { up, gw } = withGateway((up) => ({
    routes: [
      { name: 'posts', path: '/posts/*', methods: ['POST'], upstream: up.url },
      { name: 'plain', path: '/plain/*', upstream: up.url },
    ],
  }))

  const H = ['Host: x', 'Connection: close']
  const big = 'a'.repeat(20_000)
  // [name, bytes, the statuses acceptable]; each request's path starts with /plain/evil or /posts/evil
  const cases: [string, string | Buffer, number[]][] = [
    ['Content-Length and Transfer-Encoding', crlf(['POST /plain/evil HTTP/1.1', ...H, 'Content-Length: 6', 'Transfer-Encoding: chunked'], '0\r\n\r\nGET /plain/evil-smuggled HTTP/1.1\r\nHost: x\r\n\r\n'), [400]],
    ['Transfer-Encoding and Content-Length', crlf(['POST /plain/evil HTTP/1.1', ...H, 'Transfer-Encoding: chunked', 'Content-Length: 6'], '0\r\n\r\nX'), [400]],
    ['two different Content-Length values', crlf(['POST /plain/evil HTTP/1.1', ...H, 'Content-Length: 5', 'Content-Length: 30'], 'helloGET /plain/evil-smuggled HTTP/1.1\r\n\r\n'), [400]],
    ['two equal Content-Length lines', crlf(['POST /plain/evil HTTP/1.1', ...H, 'Content-Length: 5', 'Content-Length: 5'], 'hello'), [400]],
    ['a Content-Length list', crlf(['POST /plain/evil HTTP/1.1', ...H, 'Content-Length: 5, 5'], 'hello'), [400]],
    ['a signed Content-Length', crlf(['POST /plain/evil HTTP/1.1', ...H, 'Content-Length: +5'], 'hello'), [400]],
    ['Transfer-Encoding with obs-fold', crlf(['POST /plain/evil HTTP/1.1', ...H, 'Transfer-Encoding:', ' chunked'], '5\r\nhello\r\n0\r\n\r\n'), [400]],
    ['Transfer-Encoding: chunked, identity', crlf(['POST /plain/evil HTTP/1.1', ...H, 'Transfer-Encoding: chunked, identity'], '5\r\nhello\r\n0\r\n\r\n'), [400]],
    ['Transfer-Encoding: identity', crlf(['POST /plain/evil HTTP/1.1', ...H, 'Transfer-Encoding: identity'], 'hello'), [400]],
    ['Transfer-Encoding: xchunked', crlf(['POST /plain/evil HTTP/1.1', ...H, 'Transfer-Encoding: xchunked'], '5\r\nhello\r\n0\r\n\r\n'), [400]],
    ['Transfer-Encoding on two lines', crlf(['POST /plain/evil HTTP/1.1', ...H, 'Transfer-Encoding: chunked', 'Transfer-Encoding: chunked'], '5\r\nhello\r\n0\r\n\r\n'), [400]],
    ['a space before the colon', crlf(['POST /plain/evil HTTP/1.1', ...H, 'Transfer-Encoding : chunked'], '5\r\nhello\r\n0\r\n\r\n'), [400]],
    ['a chunk size in hex with 0x', crlf(['POST /plain/evil HTTP/1.1', ...H, 'Transfer-Encoding: chunked'], '0x5\r\nhello\r\n0\r\n\r\n'), [400]],
    ['bare LF line ends', 'POST /plain/evil HTTP/1.1\nHost: x\nTransfer-Encoding: chunked\n\n5\nhello\n0\n\n', [400]],
    ['a header line without a colon', crlf(['GET /plain/evil HTTP/1.1', ...H, 'Just-A-Name']), [400]],
    ['oversized headers', crlf(['GET /plain/evil HTTP/1.1', ...H, `X-Big: ${big}`]), [431]],
    ['a very long target', crlf([`GET /plain/evil/${big} HTTP/1.1`, ...H]), [431, 414]],
    ['an unknown method', crlf(['FOO /plain/evil HTTP/1.1', ...H]), [400]],
    ['a lower-case method', crlf(['get /plain/evil HTTP/1.1', ...H]), [400]],
    ['a method the route does not take', crlf(['PROPFIND /posts/evil HTTP/1.1', ...H]), [404]],
    ['CONNECT', crlf(['CONNECT example.com:443 HTTP/1.1', 'Host: example.com:443']), [0, 400, 404, 405]],
    ['the target "*"', crlf(['OPTIONS * HTTP/1.1', ...H]), [400]],
    ['an empty target', crlf(['GET  HTTP/1.1', ...H]), [400]],
    ['a target without a leading slash', crlf(['GET plain/evil HTTP/1.1', ...H]), [400]],
    ['a raw backslash in the path', crlf(['GET /plain\\evil HTTP/1.1', ...H]), [400]],
    ['a raw non-ASCII byte in the target', Buffer.concat([Buffer.from('GET /plain/evil\xff HTTP/1.1\r\n', 'latin1'), Buffer.from(crlf(H))]), [400]],
    ['a NUL in a header value', crlf(['GET /plain/evil HTTP/1.1', ...H, 'X-A: a\x00b']), [400]],
    ['a control character in a header value', crlf(['GET /plain/evil HTTP/1.1', ...H, 'X-A: a\x01b']), [400]],
    ['a CR alone in a header value', crlf(['GET /plain/evil HTTP/1.1', ...H, 'X-A: a\rX-B: b']), [400]],
    ['a bad Host', crlf(['GET /plain/evil HTTP/1.1', 'Host: a b', 'Connection: close']), [400]],
    ['no Host on HTTP/1.1', crlf(['GET /plain/evil HTTP/1.1', 'Connection: close']), [400]],
    ['garbage', '\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03 not http at all\r\n\r\n', [400]],
    ['an h2 preface', 'PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n', [400, 505]],
  ]

  test.each(cases)('%s', async (_name, bytes, statuses) => {
    const before = up.seen.length
    const r = await raw(gw.url, [bytes])
    expect(statuses).toContain(r.status)
    expect(r.closed).toBe(true)
    if (r.status) {
      // a problem like every other the gateway makes (whichever of the statuses above it is):
      // instance (the request id, echoed) and error
      expectProblem(r, { status: r.status, type: String(r.json?.type).replace(P, ''), members: { error: { type: 'invalid_request_error' } } })
      expect(r.text).toContain(`\r\nx-request-id: ${r.json.instance}\r\n`)
    }
    // refused: nothing at all reached the upstream (neither the request nor a smuggled one)
    expect(up.seen.length).toBe(before)
    // and the gateway still serves a normal request
    expect((await send(`${gw.url}/plain/ok`)).status).toBe(201)
  })

  test('a body holding a request is the body: the upstream sees one request', async () => {
    const inner = 'GET /plain/evil-smuggled HTTP/1.1\r\nHost: x\r\n\r\n'
    const r = await raw(gw.url, [crlf(['POST /plain/carrier HTTP/1.1', ...H, `Content-Length: ${inner.length}`], inner)])
    expect(r.status).toBe(201)
    expect(up.count('/plain/carrier')).toBe(1)
    expect(up.count('/plain/evil-smuggled')).toBe(0)
    expect(up.seen.find((s) => s.url === '/plain/carrier')!.body.toString()).toBe(inner)
  })

  test('obs-text (bytes 0x80-0xFF) in a header value is no 500', async () => {
    const r = await raw(gw.url, [Buffer.concat([Buffer.from(crlf(['GET /plain/latin HTTP/1.1', ...H, 'X-Name: caf']).slice(0, -4), 'latin1'), Buffer.from([0xe9]), Buffer.from('\r\n\r\n')])])
    expect(r.status).not.toBe(500)
    expect(r.status).toBeGreaterThan(0)
    expect((await send(`${gw.url}/plain/ok`)).status).toBe(201)
  })

  test('a client that sends half a request and leaves: nothing forwarded, next request served', async () => {
    const before = up.seen.length
    const s = net.connect(Number(new URL(gw.url).port), '127.0.0.1')
    await new Promise((r) => s.on('connect', r))
    s.write('POST /posts/evil HTTP/1.1\r\nHost: x\r\nContent-Le')
    await sleep(50)
    s.destroy()
    await sleep(50)
    expect(up.seen.length).toBe(before)
    expect((await send(`${gw.url}/plain/ok`)).status).toBe(201)
  })
})
