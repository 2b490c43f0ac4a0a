/**
 * The floor's work inside Hono: the same forwarding as `floor-proxy.ts` (one undici Pool, 128
 * connections, hop-by-hop fields removed, the answer piped back), written as one Hono handler on
 * @hono/node-server, the framework fencegate's admin listener is built on and whose router its
 * proxy listener uses. Between the floor and this sits the cost of the framework alone.
 *
 *   node dist/bench/hono-floor.js UPSTREAM_URL [PORT]
 *
 * Prints `listening http://127.0.0.1:PORT` once ready; exits when its stdin closes (the harness
 * died) or on SIGTERM/SIGINT.
 */
import type { Server } from 'node:http'
import { Hono } from 'hono'
import { createAdaptorServer, type HttpBindings } from '@hono/node-server'
import { RESPONSE_ALREADY_SENT } from '@hono/node-server/utils/response'
import { Pool, type Dispatcher } from 'undici'
import { requestHeaders, responseHeaders, serve } from './anchor.js'

const upstreamUrl = process.argv[2]
if (!upstreamUrl) {
  process.stderr.write('usage: hono-floor UPSTREAM_URL [PORT]\n')
  process.exit(2)
}
const upstream = new URL(upstreamUrl)
const pool = new Pool(upstream.origin, { connections: 128, pipelining: 1, keepAliveTimeout: 4_000 })

const app = new Hono<{ Bindings: HttpBindings }>()
app.all('*', async (c) => {
  const { incoming: req, outgoing: res } = c.env
  const hasBody = req.headers['content-length'] !== undefined || req.headers['transfer-encoding'] !== undefined
  let up: Dispatcher.ResponseData
  try {
    up = await pool.request({ path: req.url ?? '/', method: req.method as Dispatcher.HttpMethod, headers: requestHeaders(req.rawHeaders, upstream.host), body: hasBody ? req : null })
  } catch (e) {
    return c.text(`hono-floor: upstream failed: ${(e as Error).message}\n`, 502)
  }
  res.writeHead(up.statusCode, responseHeaders(up.headers))
  up.body.once('error', () => res.destroy())
  res.once('close', () => { if (!res.writableFinished) up.body.destroy() })
  up.body.pipe(res)
  return RESPONSE_ALREADY_SENT
})

serve(createAdaptorServer({ fetch: app.fetch, autoCleanupIncoming: false }) as Server, pool, Number(process.argv[3] ?? 0))
