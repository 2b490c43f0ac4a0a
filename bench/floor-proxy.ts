/**
 * The floor: the least a Node reverse proxy can do — node:http in front of one undici Pool,
 * configured like fencegate's (128 connections, keep-alive 4 s, no pipelining). It forwards
 * method, path, headers (less hop-by-hop ones) and body, and streams the answer back. No routing,
 * no checks, no metrics: fencegate's figures are quoted as a ratio of this one's.
 *
 *   node dist/bench/floor-proxy.js UPSTREAM_URL [PORT] [pipe|pipeline]
 *
 * PORT 0 or absent: a free port. With FLOOR_TLS_CERT and FLOOR_TLS_KEY (PEM files) it serves
 * HTTPS on node:https with fencegate's listener options (HTTP/1.1 by ALPN, TLS 1.2 and up): what
 * Node's TLS costs by itself (./cpu-pairs.ts `floor-https`). The answer is streamed with `.pipe()` (default), or with
 * `stream/promises` pipeline() — much slower on Node 20, kept to compare (BENCH_FLOOR=pipeline).
 *
 * Prints `listening http://127.0.0.1:PORT` once ready; exits when its stdin closes (the harness
 * died) or on SIGTERM/SIGINT.
 */
import http from 'node:http'
import https from 'node:https'
import { readFileSync } from 'node:fs'
import { pipeline } from 'node:stream/promises'
import { Pool, type Dispatcher } from 'undici'
import { requestHeaders, responseHeaders, serve } from './anchor.js'

const upstreamUrl = process.argv[2]
if (!upstreamUrl) {
  process.stderr.write('usage: floor-proxy UPSTREAM_URL [PORT] [pipe|pipeline]\n')
  process.exit(2)
}
const mode = process.argv[4] ?? 'pipe'
if (mode !== 'pipe' && mode !== 'pipeline') {
  process.stderr.write(`floor-proxy: streaming mode must be pipe or pipeline, got "${mode}"\n`)
  process.exit(2)
}
const upstream = new URL(upstreamUrl)
const pool = new Pool(upstream.origin, { connections: 128, pipelining: 1, keepAliveTimeout: 4_000 })

const tls = process.env.FLOOR_TLS_CERT && process.env.FLOOR_TLS_KEY
  ? { cert: readFileSync(process.env.FLOOR_TLS_CERT), key: readFileSync(process.env.FLOOR_TLS_KEY), ALPNProtocols: ['http/1.1'], minVersion: 'TLSv1.2' as const, honorCipherOrder: true }
  : undefined
const handler: http.RequestListener = async (req, res) => {
  const hasBody = req.headers['content-length'] !== undefined || req.headers['transfer-encoding'] !== undefined
  let up: Dispatcher.ResponseData
  try {
    up = await pool.request({
      path: req.url ?? '/',
      method: req.method as Dispatcher.HttpMethod,
      headers: requestHeaders(req.rawHeaders, upstream.host),
      body: hasBody ? req : null,
    })
  } catch (e) {
    if (!res.headersSent) res.writeHead(502, { 'content-type': 'text/plain' })
    res.end(`floor-proxy: upstream failed: ${(e as Error).message}\n`)
    return
  }
  res.writeHead(up.statusCode, responseHeaders(up.headers))
  const body = up.body
  if (mode === 'pipeline') {
    try {
      await pipeline(body, res)
    } catch {
      body.destroy()
      res.destroy()
    }
    return
  }
  // .pipe() by default: stream/promises pipeline() allocates an AbortController per call, aborts
  // it (building a DOMException) when done and adds several listeners; on Node 20 that cut this
  // proxy's req/s by ~40 %. The floor is the least a proxy must do, with the same failure handling.
  body.once('error', () => res.destroy())
  res.once('close', () => { if (!res.writableFinished) body.destroy() })
  body.pipe(res)
}
const server = tls ? https.createServer(tls, handler) : http.createServer(handler)
serve(server, pool, Number(process.argv[3] ?? 0))
