/**
 * Forwarding (contract §5, RFC 9110 §7.6): what a client and the upstream each see when a request
 * passes through the gateway. Real gateways, a real recording upstream, real sockets; every test
 * checks the client's side and what the upstream received (or that it received nothing).
 */
import { describe, it, expect, beforeAll, afterAll } from 'vitest'
import http from 'node:http'
import net from 'node:net'
import { Readable } from 'node:stream'
import { request, Agent } from 'undici'
import { startUpstream, headerValues, GZIPPED, type Upstream, type Seen } from './helpers/upstream.js'
import { startTestGateway, refusedUrl, type TestGateway } from './helpers/gateway.js'
import { expectProblem, send, metrics, metric } from './helpers/http.js'
import { sleep, until } from './helpers/wait.js'

// ---------------------------------------------------------------- client helpers

interface NodeReply {
  status: number
  headers: http.IncomingHttpHeaders
  rawHeaders: string[]
  body: Buffer
  /** true when the gateway answered `100 Continue` */
  continued: boolean
}

/**
 * One request through node:http (no header vetting, no path normalisation, no keep-alive),
 * for what undici refuses to send (Connection: x, Keep-Alive, Upgrade, TE, Expect) and for
 * the raw response header lines.
 */
function nodeRequest(base: string, path: string, opts: { method?: string; headers?: http.OutgoingHttpHeaders; body?: Buffer | string } = {}): Promise<NodeReply> {
  const u = new URL(base)
  return new Promise((resolve, reject) => {
    let continued = false
    const req = http.request({ host: u.hostname, port: u.port, path, method: opts.method ?? 'GET', headers: opts.headers, agent: false }, (res) => {
      const chunks: Buffer[] = []
      res.on('data', (c: Buffer) => chunks.push(c))
      res.on('error', reject)
      res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, rawHeaders: res.rawHeaders, body: Buffer.concat(chunks), continued }))
    })
    req.on('error', reject)
    const expectsContinue = String(opts.headers?.expect ?? opts.headers?.Expect ?? '').toLowerCase() === '100-continue'
    if (expectsContinue) req.on('continue', () => { continued = true; req.end(opts.body) })
    else req.end(opts.body)
  })
}

interface RawReply {
  /** everything the gateway sent, as latin1 text */
  text: string
  /** the status of the first response, or undefined when nothing came */
  status?: number
  /** the first response's body (de-chunked) */
  body: string
  headers: Record<string, string>
  /** true when the gateway closed the connection (rather than us after `idleMs`) */
  closedByServer: boolean
}

/** Writes raw bytes to the gateway over TCP; reads until the gateway closes or `idleMs` of silence. */
function rawExchange(base: string, bytes: string, idleMs = 1000): Promise<RawReply> {
  const u = new URL(base)
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = []
    let closedByServer = true
    const s = net.connect(Number(u.port), u.hostname, () => s.write(bytes, 'latin1'))
    s.setTimeout(idleMs, () => { closedByServer = false; s.destroy() })
    s.on('data', (c: Buffer) => chunks.push(c))
    s.on('error', (e: NodeJS.ErrnoException) => { if (e.code !== 'ECONNRESET') reject(e) })
    s.on('close', () => {
      const text = Buffer.concat(chunks).toString('latin1')
      const headEnd = text.indexOf('\r\n\r\n')
      const head = headEnd < 0 ? text : text.slice(0, headEnd)
      const m = /^HTTP\/1\.1 (\d{3})/.exec(head)
      const headers: Record<string, string> = {}
      for (const line of head.split('\r\n').slice(1)) {
        const i = line.indexOf(':')
        if (i > 0) headers[line.slice(0, i).trim().toLowerCase()] = line.slice(i + 1).trim()
      }
      let body = headEnd < 0 ? '' : text.slice(headEnd + 4)
      if (headers['content-length'] !== undefined) body = body.slice(0, Number(headers['content-length']))
      else if (/chunked/i.test(headers['transfer-encoding'] ?? '')) {
        let out = ''
        let rest = body
        for (;;) {
          const nl = rest.indexOf('\r\n')
          const size = parseInt(rest.slice(0, nl), 16)
          if (!(size > 0)) break
          out += rest.slice(nl + 2, nl + 2 + size)
          rest = rest.slice(nl + 2 + size + 2)
        }
        body = out
      }
      resolve({ text, status: m ? Number(m[1]) : undefined, body, headers, closedByServer })
    })
  })
}

/** The requests the upstream received whose path starts with `prefix`. */
const seenAt = (up: Upstream, prefix: string): Seen[] => up.seen.filter((s) => s.url.startsWith(prefix))

const fresh = new Agent({ pipelining: 0, keepAliveTimeout: 1 })

// ---------------------------------------------------------------- fixtures

let up: Upstream
/** one route, "/*", everything forwarded with a 2 s timeout */
let gw: TestGateway
/** routes with edge settings; anything else is unrouted */
let edge: TestGateway

beforeAll(async () => {
  up = await startUpstream()
  gw = await startTestGateway({ routes: [{ name: 'plain', path: '/*', upstream: up.url }] })
  const closedUrl = await refusedUrl()
  edge = await startTestGateway({
    routes: [
      { name: 'small', path: '/small/*', upstream: up.url, maxRequestBytes: '1KiB' },
      { name: 'down', path: '/down/*', upstream: closedUrl },
      { name: 'short', path: '/hang', upstream: { url: up.url, timeout: '500ms' } },
      { name: 'api', path: '/api/*', upstream: up.url },
    ],
  })
})

afterAll(async () => {
  await gw?.close()
  await edge?.close()
  await up?.close()
  await fresh.close()
})

// ---------------------------------------------------------------- tests

describe('forwarding (contract §5)', () => {
  it('removes hop-by-hop headers and those named in Connection, on the request and on the response', async () => {
    const r = await nodeRequest(gw.url, '/hop-by-hop', {
      headers: {
        Connection: 'keep-alive, X-Hop-Custom, x-also-hop',
        'Keep-Alive': 'timeout=5',
        TE: 'trailers',
        Upgrade: 'h2c',
        'Proxy-Connection': 'keep-alive',
        'X-Hop-Custom': 'secret',
        'X-Also-Hop': 'secret-2',
        'X-End-To-End': 'kept',
      },
    })
    expect(r.status).toBe(201)
    const [seen] = seenAt(up, '/hop-by-hop')
    expect(seenAt(up, '/hop-by-hop')).toHaveLength(1)
    const names = seen.headers.map(([k]) => k.toLowerCase())
    for (const gone of ['keep-alive', 'te', 'upgrade', 'proxy-connection', 'x-hop-custom', 'x-also-hop']) expect(names).not.toContain(gone)
    // the only Connection the upstream sees is the gateway's own connection management
    for (const v of headerValues(seen, 'connection')) expect(v.toLowerCase()).toMatch(/^(keep-alive|close)$/)
    expect(headerValues(seen, 'x-end-to-end')).toEqual(['kept'])

    // response side: the upstream answers "Connection: x-secret" with X-Secret and X-Public
    const res = await nodeRequest(gw.url, '/conn-header')
    expect(res.status).toBe(200)
    expect(res.body.toString()).toBe('ok')
    expect(res.headers['x-public']).toBe('1')
    expect(res.headers['x-secret']).toBeUndefined()
    expect(String(res.headers.connection ?? '')).not.toMatch(/x-secret/i)
    expect(seenAt(up, '/conn-header')).toHaveLength(1)
  })

  it('adds Via and X-Forwarded-*, and sends the upstream its own Host', async () => {
    const upHost = new URL(up.url).host
    const a = await send(`${gw.url}/xff-a`, {
      headers: {
        host: 'shop.example:8443',
        'x-forwarded-for': '1.2.3.4',
        via: '1.0 edge-proxy',
        // spoofed values the gateway must replace, never pass on
        'x-forwarded-host': 'evil.example',
        'x-forwarded-proto': 'https',
      },
    })
    expect(a.status).toBe(201)
    expect(String(a.headers.via)).toContain('1.1 fencegate')
    const [sa] = seenAt(up, '/xff-a')
    expect(headerValues(sa, 'x-forwarded-for')).toEqual(['1.2.3.4, 127.0.0.1'])
    expect(headerValues(sa, 'x-forwarded-host')).toEqual(['shop.example:8443'])
    expect(headerValues(sa, 'x-forwarded-proto')).toEqual(['http'])
    expect(headerValues(sa, 'via')).toEqual(['1.0 edge-proxy, 1.1 fencegate'])
    expect(headerValues(sa, 'host')).toEqual([upHost])

    const b = await send(`${gw.url}/xff-b`)
    expect(b.status).toBe(201)
    expect(String(b.headers.via)).toContain('1.1 fencegate')
    const [sb] = seenAt(up, '/xff-b')
    expect(headerValues(sb, 'x-forwarded-for')).toEqual(['127.0.0.1'])
    expect(headerValues(sb, 'x-forwarded-host')).toEqual([new URL(gw.url).host])
    expect(headerValues(sb, 'x-forwarded-proto')).toEqual(['http'])
    expect(headerValues(sb, 'via')).toEqual(['1.1 fencegate'])
    expect(headerValues(sb, 'host')).toEqual([upHost])
  })

  it('streams the answer: the first chunk reaches the client before the upstream has finished', async () => {
    const started = Date.now()
    const res = await request(`${gw.url}/drip?ms=400`, { dispatcher: fresh })
    expect(res.statusCode).toBe(200)
    const chunks: { at: number; text: string }[] = []
    for await (const c of res.body) chunks.push({ at: Date.now() - started, text: (c as Buffer).toString() })
    expect(chunks.map((c) => c.text).join('')).toBe('first;last')
    expect(chunks[0].text.startsWith('first;')).toBe(true)
    expect(chunks[0].at).toBeLessThan(300) // not held back until the end at ~400 ms
  })

  it('passes an 8 MiB answer to a client that reads slowly, byte for byte (the upstream is paused, not buffered)', async () => {
    const bytes = 8 * 1024 * 1024
    const res = await request(`${gw.url}/large?bytes=${bytes}`, { dispatcher: fresh, highWaterMark: 16 * 1024 })
    expect(res.statusCode).toBe(200)
    let size = 0
    let wrong = 0
    let n = 0
    for await (const c of res.body) {
      const b = c as Buffer
      size += b.length
      for (let i = 0; i < b.length; i += 4096) if (b[i] !== 0x78) wrong++
      if (++n % 64 === 0) await sleep(5) // a slow reader: the gateway's socket fills up
    }
    expect(size).toBe(bytes)
    expect(wrong).toBe(0)
  })

  it('passes redirects to the client instead of following them', async () => {
    const r = await send(`${gw.url}/redirect`)
    expect(r.status).toBe(302)
    expect(r.headers.location).toBe('/login')
    expect(up.count('/redirect')).toBe(1)
    await sleep(100)
    expect(up.count('/login')).toBe(0)
  })

  it('passes content encodings through untouched (gzip body byte for byte)', async () => {
    const r = await send(`${gw.url}/gzip`, { headers: { 'accept-encoding': 'gzip' } })
    expect(r.status).toBe(200)
    expect(r.headers['content-encoding']).toBe('gzip')
    expect(r.body.equals(GZIPPED)).toBe(true)
    const [s] = seenAt(up, '/gzip')
    expect(headerValues(s, 'accept-encoding')).toEqual(['gzip'])
  })

  it('keeps several Set-Cookie lines several', async () => {
    const r = await nodeRequest(gw.url, '/cookies')
    expect(r.status).toBe(200)
    expect(r.body.toString()).toBe('cookies')
    const cookies: string[] = []
    for (let i = 0; i < r.rawHeaders.length; i += 2) if (r.rawHeaders[i].toLowerCase() === 'set-cookie') cookies.push(r.rawHeaders[i + 1])
    expect(cookies).toEqual(['a=1; Path=/', 'b=2; Path=/'])
    expect(up.count('/cookies')).toBe(1)
  })

  it('answers 502 upstream-unavailable when the upstream refuses the connection', async () => {
    const before = up.seen.length
    const r = await send(`${edge.url}/down/charges`, { method: 'POST', body: '{"amount":1}', headers: { 'content-type': 'application/json' } })
    expectProblem(r, { status: 502, type: 'upstream-unavailable', title: 'Upstream unavailable' })
    expect(up.seen.length).toBe(before)
  })

  it('answers 504 upstream-timeout when no response headers come within the route timeout', async () => {
    const started = Date.now()
    const r = await send(`${edge.url}/hang`)
    const took = Date.now() - started
    expectProblem(r, { status: 504, type: 'upstream-timeout' })
    expect(took).toBeGreaterThanOrEqual(450)
    expect(took).toBeLessThan(1900) // the route's 500 ms, not the 2 s of the others
    expect(seenAt(up, '/hang').length).toBeGreaterThanOrEqual(1)
  })

  it('cancels the upstream request when the client goes away', async () => {
    const target = '/hang?cancel=1'
    const unknownBefore = metric(await metrics(gw.adminUrl), 'fencegate_unknown_outcomes_total', { route: 'plain', reason: 'client_abort' })
    const u = new URL(gw.url)
    const client = net.connect(Number(u.port), u.hostname)
    const got: Buffer[] = []
    client.on('data', (c: Buffer) => got.push(c))
    client.on('error', () => {})
    client.write(`GET ${target} HTTP/1.1\r\nHost: ${u.host}\r\n\r\n`)
    await until(() => up.count(target) === 1, { timeoutMs: 2000, intervalMs: 10, message: 'the request to reach the upstream' })
    await sleep(50)
    expect(up.aborted).not.toContain(target) // the upstream is still working on it
    client.destroy()
    const destroyed = Date.now()
    await until(() => up.aborted.includes(target), { timeoutMs: 1000, intervalMs: 10, message: 'the upstream request to be cancelled' })
    expect(Date.now() - destroyed).toBeLessThan(1000) // cancelled now, not when the route's 2 s timeout ends
    expect(got).toHaveLength(0) // the client got nothing: no answer had come yet
    // counted as an unknown outcome (the request had reached the upstream)
    await until(async () => {
      expect(metric(await metrics(gw.adminUrl), 'fencegate_unknown_outcomes_total', { route: 'plain', reason: 'client_abort' })).toBe(unknownBefore + 1)
      return true
    }, { timeoutMs: 1000, intervalMs: 10, message: 'the client abort to be counted' })
    // counted under 499, as nginx does, not as a success
    expect(metric(await metrics(gw.adminUrl), 'fencegate_requests_total', { route: 'plain', code: '499', outcome: 'outcome_unknown' })).toBeGreaterThanOrEqual(1)
  })

  it('forwards a 2 MiB upload sent with Expect: 100-continue, every byte', async () => {
    const pattern = Buffer.from('abcdefghijklmnopqrstuvwxyz0123456789')
    const payload = Buffer.alloc(2 * 1024 * 1024)
    for (let i = 0; i < payload.length; i += pattern.length) pattern.copy(payload, i)
    const r = await nodeRequest(gw.url, '/upload-continue', {
      method: 'PUT',
      headers: { expect: '100-continue', 'content-type': 'application/octet-stream', 'content-length': payload.length },
      body: payload,
    })
    expect(r.continued).toBe(true)
    expect(r.status).toBe(201)
    const echo = JSON.parse(r.body.toString()) as { method: string; body: string }
    expect(echo.method).toBe('PUT')
    expect(echo.body.length).toBe(payload.length)
    const got = seenAt(up, '/upload-continue')
    expect(got).toHaveLength(1)
    expect(got[0].body.length).toBe(payload.length)
    expect(got[0].body.equals(payload)).toBe(true)
  })

  it('answers Expect: 100-continue with 413 before the upload when no route takes a body that large', async () => {
    const before = up.seen.length
    const r = await nodeRequest(gw.url, '/upload-continue', {
      method: 'PUT',
      headers: { expect: '100-continue', 'content-type': 'application/octet-stream', 'content-length': 64 * 1024 * 1024 },
      body: Buffer.alloc(16),
    })
    expect(r.continued).toBe(false)
    expectProblem(r, { status: 413, type: 'body-too-large' })
    expect(up.seen.length).toBe(before)
  })

  it('refuses a body larger than maxRequestBytes with 413, declared or chunked', async () => {
    // declared: refused on the Content-Length alone, nothing forwarded
    const declared = await send(`${edge.url}/small/declared`, { method: 'POST', body: Buffer.alloc(2048, 'a'), headers: { 'content-type': 'application/octet-stream' } })
    expectProblem(declared, { status: 413, type: 'body-too-large' })
    await sleep(100)
    expect(up.count('/small/declared')).toBe(0)

    // chunked: no Content-Length, so the limit is found while streaming
    async function* chunks() {
      for (let i = 0; i < 6; i++) { yield Buffer.alloc(512, 'b'); await sleep(20) }
    }
    const r = await request(`${edge.url}/small/chunked`, { method: 'POST', body: Readable.from(chunks()), dispatcher: fresh, headers: { 'content-type': 'application/octet-stream' } })
    const body = Buffer.from(await r.body.arrayBuffer())
    expectProblem({ status: r.statusCode, headers: r.headers, body }, { status: 413, type: 'body-too-large' })
    await sleep(100)
    // the upstream never got a complete request with the oversized body
    expect(up.count('/small/chunked')).toBe(0)

    // within the limit, both kinds pass
    const ok = await send(`${edge.url}/small/ok`, { method: 'POST', body: Buffer.alloc(1024, 'c') })
    expect(ok.status).toBe(201)
    expect(seenAt(up, '/small/ok')[0].body.length).toBe(1024)
  })

  it('refuses a request with both Content-Length and Transfer-Encoding, and the request smuggled in it', async () => {
    const u = new URL(gw.url)
    const smuggled = `GET /smuggled HTTP/1.1\r\nHost: ${u.host}\r\n\r\n`
    for (const [first, second] of [['Content-Length: 4', 'Transfer-Encoding: chunked'], ['Transfer-Encoding: chunked', 'Content-Length: 4']]) {
      const r = await rawExchange(gw.url, `POST /smuggle-carrier HTTP/1.1\r\nHost: ${u.host}\r\n${first}\r\n${second}\r\n\r\n0\r\n\r\n${smuggled}`)
      // a 400 (Node's parser) or a closed connection; never a forwarded response
      if (r.status !== undefined) expect(r.status).toBe(400)
      expect(r.closedByServer).toBe(true)
      expect(r.text).not.toMatch(/HTTP\/1\.1 20\d/)
    }
    await sleep(100)
    expect(up.count('/smuggle-carrier')).toBe(0)
    expect(up.count('/smuggled')).toBe(0)
  })

  it('refuses dot segments, raw or percent-encoded, with 400 bad-path', async () => {
    const before = up.seen.length
    for (const path of ['/api/%2E%2E/admin', '/api/%2e%2e/admin', '/api/.%2e/admin', '/api/%2e/admin', '/api/x/%2E%2E']) {
      const r = await nodeRequest(edge.url, path)
      expectProblem(r, { status: 400, type: 'bad-path' })
    }
    // clients normalise "../" away, so it goes over raw TCP
    const u = new URL(edge.url)
    for (const path of ['/api/../admin', '/api/./admin', '/api/x/..?y=1']) {
      const r = await rawExchange(edge.url, `GET ${path} HTTP/1.1\r\nHost: ${u.host}\r\nConnection: close\r\n\r\n`)
      expectProblem({ ...r, status: r.status ?? 0 }, { status: 400, type: 'bad-path' })
    }
    // a dot inside a segment is an ordinary name
    const fine = await send(`${edge.url}/api/v1.2/..x`)
    expect(fine.status).toBe(201)
    await sleep(50)
    expect(up.seen.slice(before).map((s) => s.url)).toEqual(['/api/v1.2/..x'])
  })

  it('aborts the client connection when the upstream resets after the headers', async () => {
    const before = metric(await metrics(gw.adminUrl), 'fencegate_unknown_outcomes_total', { route: 'plain', reason: 'reset' })
    // with a Content-Length (1000, 10 sent) and chunked (where a clean end would look complete)
    for (const path of ['/reset-mid-body', '/reset-mid-chunked']) {
      let outcome: 'rejected' | 'body-error' | 'clean' = 'clean'
      let status: number | undefined
      let length = -1
      try {
        const r = await request(`${gw.url}${path}`, { dispatcher: fresh })
        status = r.statusCode
        try { length = (await r.body.arrayBuffer()).byteLength } catch { outcome = 'body-error' }
      } catch { outcome = 'rejected' }
      // never a clean response with a truncated body
      expect(outcome, `${path}: status ${status}, ${length} bytes read cleanly`).not.toBe('clean')
      if (status !== undefined) expect(status).toBe(200)
      expect(up.count(path)).toBe(1)
    }
    const after = metric(await metrics(gw.adminUrl), 'fencegate_unknown_outcomes_total', { route: 'plain', reason: 'reset' })
    expect(after).toBe(before + 2)
  })

  it('forwards method, path, query and body unchanged, a GET with a body included', async () => {
    const target = '/a/b%20c/d%2Fe?x=1&y=%2F&z=a+b'
    const r = await send(`${gw.url}${target}`, { method: 'PATCH', body: 'patch-body', headers: { 'content-type': 'text/plain' } })
    expect(r.status).toBe(201)
    expect(r.json()).toMatchObject({ method: 'PATCH', url: target, body: 'patch-body' })
    const [s] = up.seen.filter((x) => x.url === target)
    expect(s.method).toBe('PATCH')
    expect(s.body.toString()).toBe('patch-body')

    const g = await nodeRequest(gw.url, '/get-with-body?q=1', { method: 'GET', headers: { 'content-type': 'text/plain', 'content-length': 5 }, body: 'hello' })
    expect(g.status).toBe(201)
    expect(JSON.parse(g.body.toString())).toMatchObject({ method: 'GET', url: '/get-with-body?q=1', body: 'hello' })
    const [sg] = seenAt(up, '/get-with-body')
    expect(sg.method).toBe('GET')
    expect(sg.body.toString()).toBe('hello')

    for (const method of ['PUT', 'DELETE', 'OPTIONS']) {
      const m = await send(`${gw.url}/method-check/${method}`, { method })
      expect(m.status).toBe(201)
      expect(seenAt(up, `/method-check/${method}`).map((x) => x.method)).toEqual([method])
    }
  })

  it('answers HEAD with the GET\'s head and no body, and keeps the connection: a request pipelined behind it is answered too', async () => {
    const host = new URL(gw.url).host
    const r = await rawExchange(gw.url, `HEAD /head/1 HTTP/1.1\r\nHost: ${host}\r\n\r\nGET /head/2 HTTP/1.1\r\nHost: ${host}\r\nConnection: close\r\n\r\n`)
    const answers = r.text.split(/(?=HTTP\/1\.1 )/)
    expect(answers.map((a) => Number(a.slice(9, 12)))).toEqual([201, 201])
    expect(answers[0].endsWith('\r\n\r\n')).toBe(true) // the HEAD's answer ends with its head
    expect(answers[0]).toMatch(/^via: 1\.1 fencegate$/im)
    expect(r.closedByServer).toBe(true) // after the GET that asked for it, not after the HEAD
    expect(seenAt(up, '/head/').map((s) => [s.method, s.url])).toEqual([['HEAD', '/head/1'], ['GET', '/head/2']])
  })

  it('answers an unrouted path itself: 404 no-route as application/problem+json', async () => {
    const before = up.seen.length
    for (const [method, path] of [['GET', '/nowhere'], ['POST', '/nowhere/else?x=1'], ['DELETE', '/apix']]) {
      const r = await send(`${edge.url}${path}`, { method, body: method === 'POST' ? '{}' : undefined })
      expectProblem(r, { status: 404, type: 'no-route', title: 'No route' })
    }
    await sleep(50)
    expect(up.seen.length).toBe(before)
  })

  it('counts a connect failure as upstream_error and a timeout as an unknown outcome', async () => {
    const m0 = await metrics(edge.adminUrl)
    const errors0 = metric(m0, 'fencegate_requests_total', { route: 'down', outcome: 'upstream_error' })
    const timeouts0 = metric(m0, 'fencegate_unknown_outcomes_total', { route: 'short', reason: 'timeout' })
    const down = await send(`${edge.url}/down/x`)
    expectProblem(down, { status: 502, type: 'upstream-unavailable' })
    const m1 = await metrics(edge.adminUrl)
    expect(metric(m1, 'fencegate_requests_total', { route: 'down', method: 'GET', code: '502', outcome: 'upstream_error' })).toBeGreaterThanOrEqual(1)
    expect(metric(m1, 'fencegate_requests_total', { route: 'down', outcome: 'upstream_error' })).toBe(errors0 + 1)
    expect(metric(m1, 'fencegate_unknown_outcomes_total', { route: 'short', reason: 'timeout' })).toBe(timeouts0)

    const hangsBefore = up.count('/hang')
    const slow = await send(`${edge.url}/hang`)
    expectProblem(slow, { status: 504, type: 'upstream-timeout' })
    expect(up.count('/hang')).toBe(hangsBefore + 1)
    const m2 = await metrics(edge.adminUrl)
    expect(metric(m2, 'fencegate_unknown_outcomes_total', { route: 'short', reason: 'timeout' })).toBe(timeouts0 + 1)
    expect(metric(m2, 'fencegate_requests_total', { route: 'short', code: '504', outcome: 'outcome_unknown' })).toBeGreaterThanOrEqual(1)
  })

  it('passes a client traceparent to the upstream unchanged and once (tracing off)', async () => {
    const traceparent = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01'
    const r = await send(`${gw.url}/traced`, { headers: { traceparent, tracestate: 'vendor=1' } })
    expect(r.status).toBe(201)
    const [s] = seenAt(up, '/traced')
    expect(headerValues(s, 'traceparent')).toEqual([traceparent])
    expect(headerValues(s, 'tracestate')).toEqual(['vendor=1'])
  })
})
