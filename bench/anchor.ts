/**
 * What the floor (floor-proxy.ts) and the hono anchor (hono-floor.ts) share, so the two differ
 * only in the framework around the handler: the header rules, and serving until the harness
 * leaves.
 */
import type { Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import type { Pool } from 'undici'

export const HOP_BY_HOP = new Set(['connection', 'keep-alive', 'proxy-connection', 'te', 'trailer', 'transfer-encoding', 'upgrade', 'host'])

/** The request's header lines less hop-by-hop ones, with the upstream's Host, flat. */
export function requestHeaders(raw: string[], host: string): string[] {
  const out: string[] = []
  for (let i = 0; i < raw.length; i += 2) {
    if (!HOP_BY_HOP.has(raw[i].toLowerCase())) out.push(raw[i], raw[i + 1])
  }
  out.push('host', host)
  return out
}

/** The upstream's response headers less hop-by-hop ones. */
export function responseHeaders(headers: Record<string, string | string[] | undefined>): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {}
  for (const name in headers) {
    const v = headers[name]
    if (v !== undefined && !HOP_BY_HOP.has(name)) out[name] = v
  }
  return out
}

/**
 * Listens on 127.0.0.1:`port` (0: a free one), prints `listening http://127.0.0.1:PORT`, and
 * exits when stdin closes (the harness died) or on SIGTERM/SIGINT, closing `pool` first.
 */
export function serve(server: Server, pool: Pool, port: number): void {
  server.keepAliveTimeout = 10_000
  server.listen(port, '127.0.0.1', () => {
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
}
