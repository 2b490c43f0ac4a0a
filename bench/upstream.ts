/**
 * The benchmark's upstream when nginx is not on PATH: a node:http server that reads the request
 * body and answers 201 with a small JSON body, as fast as node:http allows. Run as a child
 * process of bench/run.ts:
 *
 *   node dist/bench/upstream.js [PORT]      (PORT 0 or absent: a free port)
 *
 * Prints `listening http://127.0.0.1:PORT` once ready; exits when its stdin closes (the harness
 * died) or on SIGTERM/SIGINT.
 */
import http from 'node:http'
import type { AddressInfo } from 'node:net'

const BODY = Buffer.from('{"ok":true}')
const HEADERS = { 'content-type': 'application/json', 'content-length': String(BODY.length) }

const server = http.createServer((req, res) => {
  req.on('end', () => {
    res.writeHead(201, HEADERS)
    res.end(BODY)
  })
  req.resume()
})
// longer than the proxies' undici keepAliveTimeout (4 s), so the pools close idle sockets first
server.keepAliveTimeout = 10_000

server.listen(Number(process.argv[2] ?? 0), '127.0.0.1', () => {
  const { port } = server.address() as AddressInfo
  process.stdout.write(`listening http://127.0.0.1:${port}\n`)
})

const stop = () => { server.closeAllConnections(); server.close(() => process.exit(0)) }
process.once('SIGTERM', stop)
process.once('SIGINT', stop)
process.stdin.on('end', stop).on('error', stop).resume()
