// Upstream faults from a raw TCP upstream (node:net): slow headers, never answering, a reset
// mid-body, an answer before the request body was read, garbage instead of a status line, huge
// headers. Each is mapped as CONTRACT.md §5 says (status, problem type, the reason counted in
// fencegate_unknown_outcomes_total, and on an idempotent route what a retry of the key gets).
// Then a few thousand such exchanges against one gateway process (a CLI child: `npm run build`
// first), whose open file descriptors and RSS must not grow beyond the bounds stated below.
// Reproduce a failure with the seed it prints: HOSTILE_SEED=<seed> npx vitest run test/hostile/upstream-faults.test.ts
import net from 'node:net'
import { join } from 'node:path'
import { readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { afterAll, beforeAll, describe, expect, onTestFailed, test } from 'vitest'
import { Agent, request } from 'undici'
import { tempDir, freePort, spawnGateway, gatewayConfig, type ChildGateway } from '../helpers/gateway.js'
import { metrics, metric } from '../helpers/http.js'
import { until } from '../helpers/wait.js'
import { Rng, hostileSeed } from './history.js'

const seed = hostileSeed()
const TIMEOUT_MS = 1000 // upstream.timeout: generous, so that a loaded machine does not turn answers into 504s

type Fault = 'ok' | 'slow-headers' | 'never' | 'reset-mid-body' | 'short-body' | 'chunked-cut' | 'stall-body' | 'close-delimited' | 'interim' | 'early' | 'early-reset' | 'garbage' | 'huge-headers'
const FAULTS: Fault[] = ['ok', 'slow-headers', 'never', 'reset-mid-body', 'short-body', 'chunked-cut', 'stall-body', 'close-delimited', 'interim', 'early', 'early-reset', 'garbage', 'huge-headers']

// ------------------------------------------------------------------- the raw TCP upstream

interface Raw { port: number; connections: number; open: number; close(): Promise<void> }

/** Answers by the second path segment (/ROUTE/FAULT/...), byte by byte, the way a broken server would. */
async function startRaw(): Promise<Raw> {
  const sockets = new Set<net.Socket>()
  let connections = 0
  const server = net.createServer((sock) => {
    connections++
    sockets.add(sock)
    const timers: NodeJS.Timeout[] = []
    sock.once('close', () => { sockets.delete(sock); for (const t of timers) clearTimeout(t) })
    sock.on('error', () => {})
    let buf = Buffer.alloc(0)
    let head: string | undefined
    let need = 0
    let done = false
    const act = (fault: Fault) => {
      done = true
      switch (fault) {
        case 'ok':
          sock.end('HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok')
          return
        case 'slow-headers': {
          // the status line now, then one header line every 150 ms: complete only after 1.5 s
          sock.write('HTTP/1.1 200 OK\r\n')
          let i = 0
          timers.push(setInterval(() => {
            if (++i <= 10) { sock.write(`x-drip-${i}: ${i}\r\n`); return }
            clearInterval(timers[0])
            sock.end('content-type: text/plain\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok')
          }, 150))
          return
        }
        case 'never':
          return
        case 'reset-mid-body':
          sock.write('HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 1000\r\n\r\n' + 'x'.repeat(10))
          timers.push(setTimeout(() => sock.resetAndDestroy(), 20))
          return
        case 'short-body':
          // a clean close (FIN) after 10 of the 1000 bytes announced
          sock.end('HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 1000\r\n\r\n' + 'x'.repeat(10))
          return
        case 'chunked-cut':
          // chunked, closed (FIN) before the last chunk
          sock.end('HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ntransfer-encoding: chunked\r\n\r\na\r\nxxxxxxxxxx\r\n')
          return
        case 'stall-body':
          // headers and 5 of 10 bytes, then nothing (the connection stays open)
          sock.write('HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 10\r\n\r\nxxxxx')
          return
        case 'close-delimited':
          // valid HTTP/1.1: no length, the body ends with the connection
          sock.end('HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\nconnection: close\r\n\r\n' + 'y'.repeat(3000))
          return
        case 'interim':
          // 103 Early Hints, then the answer
          sock.end('HTTP/1.1 103 Early Hints\r\nlink: </style.css>; rel=preload\r\n\r\nHTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok')
          return
        case 'early':
          // answered and closed (FIN) before the request body was read; the rest is read and dropped
          sock.end('HTTP/1.1 400 Bad Request\r\ncontent-type: text/plain\r\ncontent-length: 5\r\nconnection: close\r\n\r\nearly')
          return
        case 'early-reset':
          // answered, then reset while the request body is still coming
          sock.write('HTTP/1.1 400 Bad Request\r\ncontent-type: text/plain\r\ncontent-length: 5\r\nconnection: close\r\n\r\nearly')
          timers.push(setTimeout(() => sock.resetAndDestroy(), 5))
          return
        case 'garbage':
          sock.end('SSH-2.0-OpenSSH_9.6\r\nthis is not an HTTP response\r\n\r\n')
          return
        case 'huge-headers':
          sock.end(`HTTP/1.1 200 OK\r\nx-huge: ${'a'.repeat(256 * 1024)}\r\ncontent-type: text/plain\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok`)
          return
      }
    }
    sock.on('data', (d) => {
      if (done) return // the rest of a body answered early: dropped
      if (head === undefined) {
        buf = Buffer.concat([buf, d])
        const end = buf.indexOf('\r\n\r\n')
        if (end < 0) return
        head = buf.subarray(0, end).toString('latin1')
        need = Number(/\r\ncontent-length:\s*(\d+)/i.exec(head)?.[1] ?? 0) - (buf.length - end - 4)
      } else {
        need -= d.length
      }
      const fault = (head.split(' ')[1] ?? '').split('/')[2] as Fault
      if (fault.startsWith('early') || need <= 0) act(fault)
    })
  })
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r))
  return {
    port: (server.address() as net.AddressInfo).port,
    get connections() { return connections },
    get open() { return sockets.size },
    close: () => new Promise((r) => { for (const s of sockets) s.destroy(); server.close(() => r()) }),
  }
}

// -------------------------------------------------------------------------------- gateway

const fdCount = (pid: number) => readdirSync(`/proc/${pid}/fd`).length
const rssBytes = (pid: number) => Number(/VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))![1]) * 1024
const MiB = 1024 * 1024


let raw: Raw
let g: ChildGateway
let dir: string
/** the gateway's open descriptors right after start-up, before any exchange */
let fdStart = 0
const agent = new Agent({ pipelining: 0, headersTimeout: 20_000, bodyTimeout: 20_000 })

beforeAll(async () => {
  raw = await startRaw()
  dir = tempDir('fg-hostile-faults-')
  const port = await freePort(), admin = await freePort()
  const upstream = { url: `http://127.0.0.1:${raw.port}`, timeout: `${TIMEOUT_MS}ms` }
  writeFileSync(join(dir, 'fencegate.yaml'), gatewayConfig({
    listen: `127.0.0.1:${port}`,
    admin: { listen: `127.0.0.1:${admin}` },
    store: { kind: 'sqlite', path: './fencegate.db' },
    routes: [
      { name: 'idem', path: '/idem/*', upstream, idempotency: { lease: '30s' } },
      { name: 'plain', path: '/plain/*', upstream },
    ],
  }))
  g = await spawnGateway(join(dir, 'fencegate.yaml'), port, admin, join(dir, 'gateway.log'))
  fdStart = fdCount(g.child.pid!)
})

afterAll(async () => {
  if (g && g.child.exitCode === null) await g.stop('SIGKILL')
  await agent.close()
  await raw?.close()
  rmSync(dir, { recursive: true, force: true })
})

interface Result { status: number; type?: string; reason?: string; body?: string; error?: string }

const SMALL = JSON.stringify({ amount: 1 })
const LARGE = 'x'.repeat(256 * 1024) // the upstream answers once it has the head, before it reads this

async function exchange(route: 'idem' | 'plain', fault: Fault, key?: string): Promise<Result> {
  try {
    const r = await request(`${g.url}/${route}/${fault}/x`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...(key ? { 'idempotency-key': key } : {}) },
      body: fault.startsWith('early') ? LARGE : SMALL,
      dispatcher: agent,
    })
    let body: string
    try {
      body = await r.body.text()
    } catch (e) {
      return { status: r.statusCode, error: `body: ${(e as { code?: string }).code ?? (e as Error).message}` }
    }
    const out: Result = { status: r.statusCode, body }
    if (String(r.headers['content-type']).startsWith('application/problem+json')) {
      const p = JSON.parse(body)
      out.type = String(p.type).replace('urn:fencegate:problem:', '')
      if (p.reason !== undefined) out.reason = p.reason
    }
    return out
  } catch (e) {
    return { status: 0, error: `${(e as { code?: string }).code ?? (e as Error).message}` }
  }
}

/**
 * What CONTRACT.md §5 (and §4 for the retry of a key) says each fault must come to.
 * `unknown`: the reason counted in fencegate_unknown_outcomes_total (the request was sent and
 * no complete response came back), undefined when the outcome is known.
 */
type Reason = 'timeout' | 'reset'
interface Expected { check(r: Result): boolean; text: string; unknown?: Reason | ((r: Result) => Reason | undefined) }
const unknownOf = (e: Expected, r: Result): Reason | undefined => (typeof e.unknown === 'function' ? e.unknown(r) : e.unknown)

const problem = (status: number, type: string) => (r: Result) => r.status === status && r.type === type && r.error === undefined
const cutOff = (r: Result) => r.error !== undefined // the client's connection aborted: never a clean but truncated answer
const passedThrough = (r: Result) => r.status === 400 && r.body === 'early' && r.error === undefined

const EXPECTED: Record<Fault, Expected> = {
  'ok': { check: (r) => r.status === 200 && r.body === 'ok', text: '200 ok' },
  'slow-headers': { check: problem(504, 'upstream-timeout'), text: '504 upstream-timeout', unknown: 'timeout' },
  'never': { check: problem(504, 'upstream-timeout'), text: '504 upstream-timeout', unknown: 'timeout' },
  'reset-mid-body': { check: cutOff, text: 'connection aborted', unknown: 'reset' },
  'short-body': { check: cutOff, text: 'connection aborted', unknown: 'reset' },
  'chunked-cut': { check: cutOff, text: 'connection aborted', unknown: 'reset' },
  // headers came, the body stalled past upstream.timeout: an upstream timeout, after the headers
  'stall-body': { check: cutOff, text: 'connection aborted', unknown: 'timeout' },
  'close-delimited': { check: (r) => r.status === 200 && r.body === 'y'.repeat(3000) && r.error === undefined, text: '200 with the whole body' },
  'interim': { check: (r) => r.status === 200 && r.body === 'ok', text: '200 ok' },
  // a complete answer came back: it is the answer (nginx passes it on too)
  'early': { check: passedThrough, text: 'the upstream\'s 400 passed through' },
  // the same, but a reset 5 ms later may destroy the answer in the gateway's socket buffer
  // before it is read (TCP drops unread data on RST): then nothing came back, outcome unknown
  'early-reset': {
    check: (r) => passedThrough(r) || problem(502, 'upstream-unavailable')(r),
    text: 'the upstream\'s 400 passed through, or 502 upstream-unavailable',
    unknown: (r) => (r.status === 502 ? 'reset' : undefined),
  },
  'garbage': { check: problem(502, 'upstream-unavailable'), text: '502 upstream-unavailable', unknown: 'reset' },
  'huge-headers': { check: problem(502, 'upstream-unavailable'), text: '502 upstream-unavailable', unknown: 'reset' },
}

const unknownCounts = async (route: string) => {
  const text = await metrics(g.adminUrl)
  return { timeout: metric(text, 'fencegate_unknown_outcomes_total', { route, reason: 'timeout' }), reset: metric(text, 'fencegate_unknown_outcomes_total', { route, reason: 'reset' }), requestsUnknown: metric(text, 'fencegate_requests_total', { route, outcome: 'outcome_unknown' }) }
}

describe('each upstream fault, as CONTRACT.md §5 maps it', () => {
  const cases = FAULTS.flatMap((fault) => (['plain', 'idem'] as const).map((route) => ({ fault, route })))
  test.for(cases)('$route route, $fault', async ({ fault, route }) => {
    const before = await unknownCounts(route)
    const key = route === 'idem' ? `map-${fault}-${seed}` : undefined
    const r = await exchange(route, fault, key)
    const e = EXPECTED[fault]
    const unknown = unknownOf(e, r)
    expect(e.check(r), `${fault} on ${route}: expected ${e.text}, got ${JSON.stringify({ ...r, body: r.body?.slice(0, 200) })}`).toBe(true)
    // the counter is bumped before the answer ends; give the scrape a moment on a busy machine
    const after = await until(async () => {
      const now = await unknownCounts(route)
      expect({ timeout: now.timeout - before.timeout, reset: now.reset - before.reset }, `${fault} on ${route}: fencegate_unknown_outcomes_total`)
        .toEqual({ timeout: unknown === 'timeout' ? 1 : 0, reset: unknown === 'reset' ? 1 : 0 })
      return now
    }, { timeoutMs: 1000, intervalMs: 50, message: `${fault} on ${route}: fencegate_unknown_outcomes_total to count it` })
    expect(after.requestsUnknown - before.requestsUnknown, `${fault} on ${route}: fencegate_requests_total{outcome="outcome_unknown"}`).toBe(unknown ? 1 : 0)
    if (key) {
      // the key's retry: 409 outcome-unknown (reject) with the reason; a known answer is replayed
      const again = await exchange(route, 'ok', undefined)
      expect(again.status).toBe(200)
      const retry = await exchange(route, fault, key)
      if (unknown) {
        expect(retry, `${fault}: retry of the key`).toMatchObject({ status: 409, type: 'outcome-unknown', reason: unknown })
      } else {
        expect(retry, `${fault}: retry of the key`).toMatchObject({ status: r.status, body: r.body })
      }
    }
  })
})

describe('a few thousand faulty exchanges', () => {
  // Bounds, for one gateway process:
  // - descriptors: while the exchanges run, at most FD_SLACK + 3 per concurrent exchange over
  //   what it held at start-up (client socket, upstream socket, a spare pool connection); once
  //   they are done and idle pool connections have closed (keep-alive 4 s), at most FD_SLACK
  //   over start-up. A socket leaked per faulty exchange would be hundreds.
  // - RSS: at most RSS_TOTAL over the warm-up, and at most RSS_STEP from the first round to the
  //   last (GC makes RSS noisy; a leak of 16 KiB per exchange would be 12 MiB a round, steadily).
  const ROUNDS = 3, PER_ROUND = 800, CONCURRENCY = 32
  const FD_SLACK = 8, RSS_TOTAL = 96 * MiB, RSS_STEP = 40 * MiB

  test('map as above, and the gateway\'s fds and RSS stay bounded', { timeout: 120_000 }, async () => {
    onTestFailed(() => console.error(`HOSTILE_SEED=${seed}`))
    const rng = new Rng(seed).fork(7)
    const pid = g.child.pid!
    const wrong: string[] = []
    let n = 0
    let fdMax = 0
    const sampler = setInterval(() => { fdMax = Math.max(fdMax, fdCount(pid)) }, 100)
    const round = async (count: number) => {
      let next = 0
      await Promise.all(Array.from({ length: CONCURRENCY }, async () => {
        while (next < count) {
          next++
          // the slow faults cost a whole upstream timeout each: fewer of them
          const fault = rng.weighted<Fault>([['ok', 6], ['slow-headers', 2], ['never', 2], ['stall-body', 2], ['reset-mid-body', 10], ['short-body', 8], ['chunked-cut', 8], ['close-delimited', 6], ['interim', 6], ['early', 8], ['early-reset', 8], ['garbage', 10], ['huge-headers', 10]])
          const route = rng.pick(['idem', 'plain'] as const)
          const r = await exchange(route, fault, route === 'idem' ? `leak-${seed}-${n++}` : undefined)
          if (!EXPECTED[fault].check(r) && wrong.length < 20) wrong.push(`${fault} on ${route}: expected ${EXPECTED[fault].text}, got ${JSON.stringify({ ...r, body: r.body?.slice(0, 120) })}`)
        }
      }))
    }
    const started = Date.now()
    let fdEnd: number
    const rss: number[] = []
    try {
      await round(300) // warm-up: pools, JIT, allocator
      rss.push(rssBytes(pid))
      for (let i = 0; i < ROUNDS; i++) {
        await round(PER_ROUND)
        rss.push(rssBytes(pid))
      }
    } finally {
      clearInterval(sampler)
    }
    const took = Date.now() - started
    fdEnd = await settledFds(pid, fdStart + FD_SLACK, 10_000)
    const mib = (b: number) => (b / MiB).toFixed(1)
    console.log(`${300 + ROUNDS * PER_ROUND} faulty exchanges in ${took} ms (the raw upstream saw ${raw.connections} connections); gateway fds: ${fdStart} at start, at most ${fdMax} during, ${fdEnd} after; RSS after the warm-up ${mib(rss[0])} MiB, after each round ${rss.slice(1).map(mib).join(', ')} MiB`)
    expect(g.child.exitCode, g.log().slice(-2000)).toBe(null)
    expect(wrong, `HOSTILE_SEED=${seed}`).toEqual([])
    expect(fdMax, 'gateway fds while the exchanges ran').toBeLessThanOrEqual(fdStart + FD_SLACK + 3 * CONCURRENCY)
    expect(fdEnd, 'gateway fds once idle').toBeLessThanOrEqual(fdStart + FD_SLACK)
    expect(rss[ROUNDS] - rss[0], 'RSS growth over the warm-up').toBeLessThanOrEqual(RSS_TOTAL)
    expect(rss[ROUNDS] - rss[1], 'RSS growth from the first round to the last').toBeLessThanOrEqual(RSS_STEP)
    // and it still works
    expect((await exchange('plain', 'ok')).status).toBe(200)
    const ready = await request(`${g.adminUrl}/readyz`)
    await ready.body.dump()
    expect(ready.statusCode).toBe(200)
  })
})

/** Waits until the process's fd count is at most `bound` (connections closing), at most `ms`; returns it, settled or not (the caller asserts the bound). */
async function settledFds(pid: number, bound: number, ms: number): Promise<number> {
  await until(() => fdCount(pid) <= bound, { timeoutMs: ms, intervalMs: 200 }).catch(() => {})
  return fdCount(pid)
}
