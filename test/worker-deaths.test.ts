// `--workers 2` under a load of fenced, keyed requests while a worker is SIGKILLed twice: the
// primary's /metrics, read every 200 ms, never shows a counter or a histogram's count or bucket
// lower than before (Prometheus would read a drop as a reset and count the survivors' totals
// again), the sums match what the clients counted, and a real Prometheus scraping the primary
// computes increase() to match as well.
import { execFileSync } from 'node:child_process'
import { randomUUID } from 'node:crypto'
import { join } from 'node:path'
import { rmSync, writeFileSync } from 'node:fs'
import { afterAll, beforeAll, describe, expect, test } from 'vitest'
import { startUpstream, type Upstream } from './helpers/upstream.js'
import { tempDir, freePort, spawnGateway, ledgerConfig, type ChildGateway, type StoreInput } from './helpers/gateway.js'
import { request } from 'undici'
import { metric, metrics, send } from './helpers/http.js'
import { startPrometheus, type Prometheus } from './helpers/prometheus.js'
import { dropRedisPrefix, REDIS_URL } from './helpers/stores.js'
import { sleep, until } from './helpers/wait.js'
import { PUSH_MS } from '../src/telemetry/worker-metrics.js'

const dir = tempDir('fg-deaths-')
const prefix = `fgdeath-${randomUUID().slice(0, 8)}`
let up: Upstream
beforeAll(async () => { up = await startUpstream() })
afterAll(async () => {
  await up?.close()
  await dropRedisPrefix(prefix)
  rmSync(dir, { recursive: true, force: true })
})

/** Every sample of a counter or a histogram's `_count`/`_bucket`, by series. */
function counting(text: string): Map<string, number> {
  const out = new Map<string, number>()
  for (const line of text.split('\n')) {
    const m = /^((fencegate_\w+?(?:_total|_count|_bucket))(\{[^}]*\})?) (\S+)$/.exec(line)
    if (m) out.set(m[1], Number(m[4]))
  }
  return out
}

const workerPids = (primary: number): number[] =>
  execFileSync('pgrep', ['-P', String(primary)], { encoding: 'utf8' }).split('\n').filter(Boolean).map(Number)

// a series present at 0 from start-up (a forwarded answer's code is born with its first request)
const STORED = { route: 'ledger', result: 'stored' }
const SEL = 'fencegate_idempotency_total{route="ledger",result="stored"}'
const stores: [string, (n: string) => StoreInput][] = [
  ['sqlite', (n) => ({ kind: 'sqlite', path: join(dir, `${n}.db`) })],
  ['redis', () => ({ kind: 'redis', url: REDIS_URL, keyPrefix: prefix })],
]

describe.each(stores)('--workers 2 on %s, a worker SIGKILLed twice under load', (name, storeOf) => {
  let g: ChildGateway
  let prom: Prometheus
  const drops: string[] = []
  let forwarded = 0
  let replayed = 0
  let failed = 0
  /** 503 store-unavailable: a store call slower than store.timeout on a loaded machine, not a death */
  let storeSlow = 0
  let scrapes = 0
  let loadMs = 0
  const readyWhileOneServes: number[] = []

  beforeAll(async () => {
    const port = await freePort(), admin = await freePort()
    const file = join(dir, `${name}.yaml`)
    writeFileSync(file, ledgerConfig({ port, admin, store: storeOf(name), upstream: up.url }))
    g = await spawnGateway(file, port, admin, join(dir, `${name}.log`), ['--workers', '2'])
    prom = await startPrometheus({ targets: [`127.0.0.1:${admin}`] })
    await until(async () => (await prom.api('/api/v1/query', { query: SEL })).data?.result?.length === 1, { timeoutMs: 20_000, message: () => 'Prometheus to scrape the primary once' })

    let running = true
    const seen = new Map<string, number>()
    const scraper = (async () => {
      while (running) {
        for (const [series, v] of counting(await metrics(g.adminUrl))) {
          const before = seen.get(series)
          if (before !== undefined && v < before) drops.push(`${series}: ${before} -> ${v}`)
          seen.set(series, v)
        }
        scrapes++
        await sleep(200)
      }
    })()
    const client = async (c: number) => {
      for (let i = 0; running; i++) {
        const key = `${name}-${c}-${i}`
        try {
          const r = await request(`${g.url}/ledger/r${c}/charge`, { method: 'POST', headers: { 'content-type': 'application/json', 'fencing-token': '1', 'idempotency-key': key }, body: JSON.stringify({ i }), headersTimeout: 5000, bodyTimeout: 5000 })
          await r.body.dump()
          const status = r.statusCode
          if (status === 201 && r.headers['idempotent-replayed'] === 'true') replayed++
          else if (status === 201) forwarded++
          else if (status === 503 && r.headers['retry-after'] !== undefined) storeSlow++
          else failed++
        } catch {
          failed++ // the worker holding the connection was killed
        }
      }
    }
    const began = Date.now()
    const clients = Promise.all(Array.from({ length: 6 }, (_, c) => client(c)))
    for (let kill = 1; kill <= 2; kill++) {
      await sleep(1500)
      process.kill(workerPids(g.child.pid!)[0], 'SIGKILL')
      await until(async () => metric(await metrics(g.adminUrl), 'fencegate_worker_restarts_total', { reason: 'signal' }) === kill, { timeoutMs: 5000 })
      readyWhileOneServes.push((await send(`${g.adminUrl}/readyz`)).status)
      await until(() => workerPids(g.child.pid!).length === 2, { timeoutMs: 10_000 })
    }
    await sleep(1500)
    running = false
    await clients
    loadMs = Date.now() - began
    await scraper
  }, 60_000)
  afterAll(async () => {
    await prom?.close()
    if (g) expect(await g.stop()).toBe(0)
  })

  test('no counter, histogram count or bucket ever went down across the deaths', () => {
    expect(scrapes).toBeGreaterThan(10)
    expect(drops).toEqual([])
  })

  test('every key was forwarded once; only the requests on a killed worker\'s connections failed; /readyz stayed 200', () => {
    expect(replayed).toBe(0)
    // per kill, each client's request on the killed worker fails, and its next connection can be
    // handed to that worker before the primary has seen it exit: at most two per client per kill
    expect(failed, `${storeSlow} answered 503 store-unavailable besides`).toBeLessThanOrEqual(2 * 2 * 6)
    expect(readyWhileOneServes).toEqual([200, 200])
  })

  test('the sum holds what the clients counted, less at most what a killed worker counted after its last snapshot', async () => {
    const text = await metrics(g.adminUrl)
    expect(metric(text, 'fencegate_worker_restarts_total', { reason: 'signal' })).toBe(2)
    const counted = metric(text, 'fencegate_idempotency_total', STORED)
    expect(forwarded).toBeGreaterThan(100)
    expect(counted).toBeLessThanOrEqual(forwarded)
    // two kills, each losing at most PUSH_MS of one worker's requests (about half the load)
    const perMs = forwarded / loadMs
    // a push due every PUSH_MS fires when the worker's event loop gets to it: late under load,
    // so allow each kill twice that
    expect(forwarded - counted, `${forwarded} forwarded, ${counted} counted`).toBeLessThanOrEqual(Math.ceil(2 * 2 * PUSH_MS * perMs))
    expect(g.log()).toMatch(/worker exited; starting a new one.*"signal":"SIGKILL"/)
  })

  test("Prometheus's increase() over the run agrees with the primary's sum, with no reset read into it", async () => {
    const sel = SEL
    const counted = metric(await metrics(g.adminUrl), 'fencegate_idempotency_total', STORED)
    // the last sample Prometheus holds equals the primary's sum now (no request since)
    await until(async () => Number((await prom.api('/api/v1/query', { query: sel })).data.result[0]?.value[1]) === counted, { timeoutMs: 5000 })
    const at = (await prom.api('/api/v1/query', { query: `timestamp(${sel})` })).data.result[0].value[1] as number
    const resets = await prom.api('/api/v1/query', { query: `resets(${sel}[1m])`, time: String(at) })
    expect(Number(resets.data.result[0].value[1])).toBe(0)
    // at the last sample's time, from the first one (0): increase() needs no extrapolation
    const inc = await prom.api('/api/v1/query', { query: `increase(${sel}[1m])`, time: String(at) })
    expect(Math.abs(Number(inc.data.result[0].value[1]) - counted)).toBeLessThanOrEqual(1)
  })
})

// A scrape that asks a worker killed a moment ago, before the primary has seen its exit, writes
// to a closed channel: the primary keeps running and answers with the others' counts.
test('scrapes racing the deaths of both workers leave the primary serving /metrics', async () => {
  const port = await freePort(), admin = await freePort()
  const file = join(dir, 'race.yaml')
  writeFileSync(file, ledgerConfig({ port, admin, store: { kind: 'redis', url: REDIS_URL, keyPrefix: prefix }, upstream: up.url }))
  const g = await spawnGateway(file, port, admin, join(dir, 'race.log'), ['--workers', '2'])
  let running = true
  let answered = 0
  const scrapers = Array.from({ length: 4 }, async () => {
    while (running) if ((await send(`${g.adminUrl}/metrics`).catch(() => ({ status: 0 }))).status === 200) answered++
  })
  try {
    for (let kill = 1; kill <= 3; kill++) {
      await until(() => workerPids(g.child.pid!).length === 2, { timeoutMs: 10_000 })
      await sleep(200)
      for (const pid of workerPids(g.child.pid!)) process.kill(pid, 'SIGKILL')
      await sleep(100)
    }
    await until(() => workerPids(g.child.pid!).length === 2, { timeoutMs: 10_000 })
  } finally {
    running = false
    await Promise.all(scrapers)
  }
  expect(g.child.exitCode, g.log()).toBe(null)
  expect(answered).toBeGreaterThan(10)
  expect(metric(await metrics(g.adminUrl), 'fencegate_worker_restarts_total', { reason: 'signal' })).toBe(6)
  expect(await g.stop()).toBe(0)
}, 40_000)
