/**
 * A real upstream for tests: a node:http server that records every request it receives (method,
 * raw url, raw header lines, body) and answers by path:
 *   /status/NNN      → that status, body "status:NNN"
 *   /slow?ms=N       → waits N ms, then 200
 *   /hang            → reads the body, never answers
 *   /apply-then-hang → records the effect, never answers (upstream timeout after the work)
 *   /large?bytes=N   → 200 with N bytes
 *   /reset-mid-body  → 200 head, 10 of 1000 bytes, then a reset
 *   /cookies         → two Set-Cookie lines
 *   /redirect        → 302 Location: /login
 *   /conn-header     → Connection: x-secret with X-Secret and X-Public
 *   /reset-mid-chunked → 200 head without Content-Length (chunked), 10 bytes, then a reset
 *   /gzip            → 200 Content-Encoding: gzip, body GZIPPED (the gzip of GZIP_TEXT)
 *   /apply?ms=N      → notes its arrival in `applied`, waits N ms (default 0), applies the
 *                      effect (noted too), then 201 JSON {n, token}: the order in which a resource
 *                      receives and applies writes
 *   anything else    → 201 JSON {n, method, url, body} (n counts effects)
 */
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { gzipSync } from 'node:zlib'
import { sleep } from './wait.js'

/** What `/gzip` answers with: the gzip of GZIP_TEXT, the same bytes on every request. */
export const GZIP_TEXT = 'fencegate passes content encodings through untouched. '.repeat(200)
export const GZIPPED = gzipSync(GZIP_TEXT)

export interface Seen {
  method: string
  url: string
  /** raw header lines in order */
  headers: [string, string][]
  body: Buffer
}

export interface Upstream {
  url: string
  port: number
  /** every request received, in order */
  seen: Seen[]
  /** requests received whose path starts with `prefix` */
  count(prefix?: string): number
  /** header values received on the last request, by lower-case name */
  last(): Seen
  /** urls of the requests whose connection closed before their response was complete (cancelled), in order */
  aborted: string[]
  /** what `/apply` did, in order: each request's arrival, then its effect after the delay */
  applied: Applied[]
  close(): Promise<void>
}

export interface Applied {
  event: 'arrived' | 'applied'
  url: string
  /** the request's Fencing-Token, as received */
  token: string | undefined
}

const pairs = (raw: string[]): [string, string][] => {
  const out: [string, string][] = []
  for (let i = 0; i < raw.length; i += 2) out.push([raw[i], raw[i + 1]])
  return out
}

export async function startUpstream(): Promise<Upstream> {
  const seen: Seen[] = []
  const applied: Applied[] = []
  let effects = 0
  const server = http.createServer(async (req, res) => {
    const chunks: Buffer[] = []
    const url = req.url ?? '/'
    // routes under a prefix (/wait/slow, /retry/hang) reach the same behaviours: match the end
    const full = url.split('?')[0]
    const path = /(\/status\/\d{3}|\/[^/]*)$/.exec(full)![1]
    const query = new URLSearchParams(url.split('?')[1] ?? '')
    if (path === '/reset-mid-body') {
      seen.push({ method: req.method!, url, headers: pairs(req.rawHeaders), body: Buffer.alloc(0) })
      res.writeHead(200, { 'content-type': 'text/plain', 'content-length': 1000 })
      res.write('x'.repeat(10))
      setTimeout(() => req.socket.destroy(), 30)
      return
    }
    if (path === '/reset-mid-chunked') {
      seen.push({ method: req.method!, url, headers: pairs(req.rawHeaders), body: Buffer.alloc(0) })
      res.writeHead(200, { 'content-type': 'text/plain' })
      res.write('x'.repeat(10))
      setTimeout(() => req.socket.destroy(), 30)
      return
    }
    try {
      for await (const c of req) chunks.push(c as Buffer)
    } catch {
      return // the request was cut off mid-body (listed in `aborted`): nothing to record or answer
    }
    const body = Buffer.concat(chunks)
    seen.push({ method: req.method!, url, headers: pairs(req.rawHeaders), body })
    let m: RegExpExecArray | null
    if ((m = /^\/status\/(\d{3})$/.exec(path))) {
      const text = `status:${m[1]}`
      res.writeHead(Number(m[1]), { 'content-type': 'text/plain', 'content-length': text.length })
      return res.end(text)
    }
    if (path === '/slow') {
      await sleep(Number(query.get('ms') ?? 100))
      effects++
      return res.end(JSON.stringify({ n: effects, slept: true }))
    }
    if (path === '/hang') return
    if (path === '/apply-then-hang') { effects++; return }
    if (path === '/large') {
      res.writeHead(200, { 'content-type': 'application/octet-stream' })
      return res.end(Buffer.alloc(Number(query.get('bytes') ?? 0), 'x'))
    }
    if (path === '/drip') {
      // the first chunk now, the rest after `ms`: a proxy that buffers delays the first byte
      res.writeHead(200, { 'content-type': 'text/plain' })
      res.write('first;')
      await sleep(Number(query.get('ms') ?? 300))
      return res.end('last')
    }
    if (path === '/cookies') {
      res.setHeader('set-cookie', ['a=1; Path=/', 'b=2; Path=/'])
      return res.end('cookies')
    }
    if (path === '/gzip') {
      res.writeHead(200, { 'content-type': 'text/plain', 'content-encoding': 'gzip', 'content-length': GZIPPED.length })
      return res.end(GZIPPED)
    }
    if (path === '/apply') {
      const token = req.headers['fencing-token'] as string | undefined
      applied.push({ event: 'arrived', url, token })
      await sleep(Number(query.get('ms') ?? 0))
      applied.push({ event: 'applied', url, token })
      effects++
      const out = JSON.stringify({ n: effects, token })
      res.writeHead(201, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(out) })
      return res.end(out)
    }
    if (path === '/redirect') { res.writeHead(302, { location: '/login' }); return res.end() }
    if (path === '/conn-header') {
      res.writeHead(200, { connection: 'x-secret', 'x-secret': '1', 'x-public': '1' })
      return res.end('ok')
    }
    effects++
    const out = JSON.stringify({ n: effects, method: req.method, url, body: body.toString('utf8') })
    res.writeHead(201, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(out), 'x-upstream': 'yes' })
    res.end(out)
  })
  // Cancellation is seen here: a response whose connection closed before it was complete.
  const aborted: string[] = []
  server.on('request', (req: http.IncomingMessage, res: http.ServerResponse) => {
    res.once('close', () => { if (!res.writableFinished) aborted.push(req.url ?? '/') })
  })
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r))
  const port = (server.address() as AddressInfo).port
  return {
    url: `http://127.0.0.1:${port}`,
    port,
    seen,
    count: (prefix = '/') => seen.filter((s) => s.url.startsWith(prefix)).length,
    last: () => seen[seen.length - 1],
    aborted,
    applied,
    close: () => new Promise((r) => { server.closeAllConnections(); server.close(() => r()) }),
  }
}

/** The values of a header in a recorded request. */
export const headerValues = (s: Seen, name: string): string[] =>
  s.headers.filter(([k]) => k.toLowerCase() === name.toLowerCase()).map(([, v]) => v)
