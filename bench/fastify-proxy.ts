/**
 * An anchor beside the floor: @fastify/http-proxy, a widely used Node reverse proxy, in front of
 * the same upstream, with its undici pool configured like the floor's and fencegate's (128
 * connections, keep-alive 4 s, no pipelining). It shows where a common framework proxy lands
 * against the floor on the same machine, so fencegate's ratio has a familiar point beside it.
 *
 *   node dist/bench/fastify-proxy.js UPSTREAM_URL [PORT]
 *
 * PORT 0 or absent: a free port. How the answer is streamed back is @fastify/reply-from's own
 * choice, so it takes no streaming mode (the floor's third argument).
 *
 * Prints `listening http://127.0.0.1:PORT` once ready; exits when its stdin closes (the harness
 * died) or on SIGTERM/SIGINT.
 */
import Fastify from 'fastify'
import httpProxy from '@fastify/http-proxy'

const upstreamUrl = process.argv[2]
if (!upstreamUrl) {
  process.stderr.write('usage: fastify-proxy UPSTREAM_URL [PORT]\n')
  process.exit(2)
}
const upstream = new URL(upstreamUrl)

// no logger: the floor logs nothing either, and pino per request would be a cost of the setup
const app = Fastify({ logger: false, keepAliveTimeout: 10_000 })
await app.register(httpProxy, {
  upstream: upstream.origin,
  undici: { connections: 128, pipelining: 1, keepAliveTimeout: 4_000 },
})

const address = await app.listen({ port: Number(process.argv[3] ?? 0), host: '127.0.0.1' })
process.stdout.write(`listening ${address}\n`)

const stop = () => {
  app.server.closeAllConnections()
  app.close().finally(() => process.exit(0))
}
process.once('SIGTERM', stop)
process.once('SIGINT', stop)
process.stdin.on('end', stop).on('error', stop).resume()
