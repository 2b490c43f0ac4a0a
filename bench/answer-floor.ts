/**
 * The answer floor: what a node:http server costs that reads each request whole and answers it
 * with the upstream's own 201 (the benchmark's nginx answer, byte for byte in its body) after
 * WORK_US µs of its own work on the CPU, and does nothing else: no upstream, no store, no
 * hashing. It stands for a replay with its work reduced to a number: a replay answers from the
 * store, so its cost is what answering costs plus the contract's work on it.
 *
 * Answering is not a fixed cost: a server faster than its client (wrk) finds many requests
 * waiting at each wake-up and answers them in one turn, a slower one is woken for each and pays
 * the kernel's wake-ups on both sides of the loopback. So the figure is read as a curve over
 * WORK_US, beside the floor and fencegate under the same load (./cpu-pairs.ts `answer:N`).
 *
 *   node dist/bench/answer-floor.js WORK_US [PORT]
 *
 * Prints `listening http://127.0.0.1:PORT` once ready; exits when its stdin closes or on SIGTERM.
 */
import http from 'node:http'

const work = Number(process.argv[2])
if (!Number.isFinite(work) || work < 0) {
  process.stderr.write('usage: answer-floor WORK_US [PORT]\n')
  process.exit(2)
}
const body = Buffer.from('{"id":"ch_1","amount":100,"currency":"eur"}')
const headers = { server: 'nginx/1.22.1', date: new Date().toUTCString(), 'content-type': 'application/json', 'content-length': String(body.length) }

const server = http.createServer((req, res) => {
  req.on('data', () => {})
  req.on('end', () => {
    // the request's own work, on the CPU and nothing else: a loop on the clock
    const until = performance.now() + work / 1000
    while (performance.now() < until) { /* spin */ }
    res.writeHead(201, headers)
    res.end(body)
  })
})
server.listen(Number(process.argv[3] ?? 0), '127.0.0.1', () => {
  const a = server.address()
  process.stdout.write(`listening http://127.0.0.1:${typeof a === 'object' && a ? a.port : 0}\n`)
})
process.stdin.on('end', () => process.exit(0)).resume()
process.on('SIGTERM', () => process.exit(0))
