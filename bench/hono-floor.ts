/**
 * The floor's work inside Hono: the same forwarding as `floor-proxy.ts` (one undici Pool, 128
 * connections, hop-by-hop fields removed, the answer piped back), written as one Hono handler on
 * @hono/node-server — what fencegate is built on. Between the floor and this sits the cost of the
 * framework alone; between this and fencegate, the cost of fencegate's checks.
 *
 *   node dist/bench/hono-floor.js UPSTREAM_URL [PORT]
 *
 * Prints `listening http://127.0.0.1:PORT` once ready; exits when its stdin closes (the harness
 * died) or on SIGTERM/SIGINT.
 */
import type { Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { Hono } from 'hono'
import { createAdaptorServer, type HttpBindings } from '@hono/node-server'
import { RESPONSE_ALREADY_SENT } from '@hono/node-server/utils/response'
import { Pool, type Dispatcher } from 'undici'

const upstreamUrl = process.argv[2]
if (!upstreamUrl) {
  process.stderr.write('usage: hono-floor UPSTREAM_URL [PORT]\n')
  process.exit(2)
}
const upstream = new URL(upstreamUrl)
const pool = new Pool(upstream.origin, { connections: 128, pipelining: 1, keepAliveTimeout: 4_000 })
const HOP_BY_HOP = new Set(['connection', 'keep-alive', 'proxy-connection', 'te', 'trailer', 'transfer-encoding', 'upgrade', 'host'])

const app = new Hono<{ Bindings: HttpBindings }>()
app.all('*', async (c) => {
  const { incoming: req, outgoing: res } = c.env
  const raw = req.rawHeaders
  const headers: string[] = []
  for (let i = 0; i < raw.length; i += 2) if (!HOP_BY_HOP.has(raw[i].toLowerCase())) headers.push(raw[i], raw[i + 1])
  headers.push('host', upstream.host)
  const hasBody = req.headers['content-length'] !== undefined || req.headers['transfer-encoding'] !== undefined
  let up: Dispatcher.ResponseData
  try {
    up = await pool.request({ path: req.url ?? '/', method: req.method as Dispatcher.HttpMethod, headers, body: hasBody ? req : null })
  } catch (e) {
    return c.text(`hono-floor: upstream failed: ${(e as Error).message}\n`, 502)
  }
  const out: Record<string, string | string[]> = {}
  for (const name in up.headers) {
    const v = up.headers[name]
    if (v !== undefined && !HOP_BY_HOP.has(name)) out[name] = v
  }
  res.writeHead(up.statusCode, out)
  up.body.once('error', () => res.destroy())
  res.once('close', () => { if (!res.writableFinished) up.body.destroy() })
  up.body.pipe(res)
  return RESPONSE_ALREADY_SENT
})

const server = createAdaptorServer({ fetch: app.fetch, autoCleanupIncoming: false }) as Server
server.keepAliveTimeout = 10_000
server.listen(Number(process.argv[3] ?? 0), '127.0.0.1', () => {
  const { port } = server.address() as AddressInfo
  process.stdout.write(`listening http://127.0.0.1:${port}\n`)
})

const stop = () => {
  server.closeAllConnections()
  server.close(() => { pool.close().finally(() => process.exit(0)) })
}
process.once('SIGTERM', stop)
process.once('SIGINT', stop)
process.stdin.on('end', stop).on('error', stop).resume()
