/**
 * The performance issue's "flat memory over a 10-minute soak": one fencegate gateway in front of
 * bench/upstream.ts takes bench/run.ts's `unique` stream (every request a new key, stored) for
 * SOAK_SECONDS while its memory is sampled every SOAK_INTERVAL seconds: RSS from
 * /proc/<pid>/status (VmRSS) and the V8 heap from its /metrics (nodejs_heap_size_used_bytes).
 * The verdict is the RSS growth from the sample at 20 % of the run to the last one, in MiB
 * and %: the first 20 % are warm-up (JIT, pools, caches filling to their bounds).
 *
 *   npx tsc -p . && node dist/bench/soak.js                      (10 minutes, the sqlite store)
 *   SOAK_SECONDS=30 node dist/bench/soak.js                      (a quick check)
 *
 * Environment:
 *   SOAK_STORE         sqlite | memory | redis | postgres (sqlite)
 *   SOAK_SECONDS       length of the load, seconds (600)
 *   SOAK_CONNECTIONS   concurrent connections (20)
 *   SOAK_RATE          requests per second over all connections, 0 for as fast as it goes (0)
 *   SOAK_INTERVAL      seconds between samples (10)
 *   SOAK_MAX_RECORDS   the memory store's store.maxRecords (10000): it keeps that many completed
 *                      records by design (an LRU), so a small bound lets it fill early in the run
 *   SOAK_TOLERANCE     RSS growth, %, up to which the verdict says "flat" (5)
 *   BENCH_REDIS_URL / BENCH_POSTGRES_URL / BENCH_KEEP   as for bench/run.ts
 */
import autocannon from 'autocannon'
import { existsSync } from 'node:fs'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import {
  BODY, BenchError, CLI, MiB, POSTGRES_URL, REDIS_URL, type StoreKind, deleteRedisPrefix, dropSchema, envNumber, freePort,
  isStoreKind, machine, metricSum, onCleanup, requestProblems, rssBytes, runMain, running, scrape, settingErrors, startGateway,
  startUpstream, table, tmp, today, uniqueRequests, writeGatewayConfig, writeResult, postLoad, resultHeader,
} from './lib.js'

const SECONDS = envNumber('SOAK_SECONDS', 600, 10)
const CONNECTIONS = Math.floor(envNumber('SOAK_CONNECTIONS', 20, 1))
const RATE = envNumber('SOAK_RATE', 0, 0)
const INTERVAL = envNumber('SOAK_INTERVAL', 10, 1)
const MAX_RECORDS = Math.floor(envNumber('SOAK_MAX_RECORDS', 10_000, 1))
const TOLERANCE = envNumber('SOAK_TOLERANCE', 5, 0)
const STORE = (process.env.SOAK_STORE || 'sqlite') as StoreKind
if (!isStoreKind(STORE)) settingErrors.push(`SOAK_STORE must be sqlite, memory, redis or postgres; got "${process.env.SOAK_STORE}"`)

/** one key prefix / schema per run, removed at the end */
const RUN_ID = `soak_${process.pid}_${Date.now().toString(36)}`

function storeBlock(): string {
  switch (STORE) {
    case 'sqlite': return `  kind: sqlite\n  path: ${join(tmp(), 'soak.db')}`
    case 'postgres': return `  kind: postgres\n  url: ${POSTGRES_URL}\n  schema: ${RUN_ID}\n  pool: 20`
    case 'redis': return `  kind: redis\n  url: ${REDIS_URL}\n  keyPrefix: ${RUN_ID}`
    case 'memory': return `  kind: memory\n  maxRecords: ${MAX_RECORDS}`
  }
}

interface Sample {
  /** seconds since the load started (0: just before it) */
  t: number
  rssMiB?: number
  heapUsedMiB?: number
  heapTotalMiB?: number
  externalMiB?: number
  /** requests the gateway answered per second since the previous sample */
  reqPerSec?: number
}

async function main(): Promise<void> {
  if (settingErrors.length) throw new BenchError(settingErrors.join('\n'))
  if (!existsSync(CLI)) throw new BenchError(`${CLI} is missing: run \`npx tsc -p .\` first`)
  const m = machine()
  const upstream = await startUpstream()
  const ports = { port: await freePort(), adminPort: await freePort() }
  const config = writeGatewayConfig('fencegate-soak', storeBlock(), upstream.url, ports)
  if (STORE === 'postgres') onCleanup(() => dropSchema(RUN_ID))
  if (STORE === 'redis') onCleanup(async () => { await deleteRedisPrefix(RUN_ID) })
  const g = await startGateway(`fencegate-soak-${STORE}`, config, ports.adminPort)
  const pid = g.child.proc.pid

  process.stdout.write(`fencegate soak: ${m.cpus} × ${m.cpuModel ?? '?'}, node ${m.node}, upstream node:http\n`)
  process.stdout.write(`store ${STORE}${STORE === 'memory' ? ` (maxRecords ${MAX_RECORDS})` : ''}, ${SECONDS}s of unique requests, ${CONNECTIONS} connections, ${RATE ? `${RATE} req/s` : 'as fast as it goes'}; a sample every ${INTERVAL}s\n`)
  if (STORE === 'memory') {
    process.stdout.write(`note: the memory store keeps up to ${MAX_RECORDS} completed records (LRU, SOAK_MAX_RECORDS) and its attempt log up to 100,000 entries (a ring): both fill, by design, before they level off\n`)
  }
  process.stdout.write('\n')

  let lastCount: number | undefined, lastAt = 0
  const sample = async (t: number): Promise<Sample> => {
    const rss = rssBytes(pid)
    let text: string | undefined
    try { text = await scrape(g.adminUrl) } catch { /* reported as missing figures */ }
    const at = performance.now()
    const count = text === undefined ? undefined : metricSum(text, 'fencegate_requests_total') ?? 0 // no line before the first request
    const s: Sample = {
      t,
      rssMiB: MiB(rss),
      heapUsedMiB: MiB(text === undefined ? undefined : metricSum(text, 'nodejs_heap_size_used_bytes')),
      heapTotalMiB: MiB(text === undefined ? undefined : metricSum(text, 'nodejs_heap_size_total_bytes')),
      externalMiB: MiB(text === undefined ? undefined : metricSum(text, 'nodejs_external_memory_bytes')),
      reqPerSec: count === undefined || lastCount === undefined || at - lastAt < 1000 ? undefined : Math.round((count - lastCount) / ((at - lastAt) / 1000)),
    }
    lastCount = count ?? lastCount
    lastAt = at
    const f = (x: number | undefined) => (x === undefined ? '?' : x.toFixed(1))
    process.stdout.write(`  t ${String(t).padStart(5)}s  rss ${f(s.rssMiB).padStart(7)} MiB  heap used ${f(s.heapUsedMiB).padStart(6)} MiB  heap total ${f(s.heapTotalMiB).padStart(6)} MiB  external ${f(s.externalMiB).padStart(5)} MiB  ${s.reqPerSec === undefined ? '' : `${s.reqPerSec} req/s`}\n`)
    return s
  }

  const samples: Sample[] = [await sample(0)]
  const options: autocannon.Options & { overallRate?: number } = {
    ...postLoad(g.url, CONNECTIONS),
    duration: SECONDS,
    ...(RATE ? { overallRate: RATE } : {}),
    ...uniqueRequests(),
  }
  const t0 = performance.now()
  let finished = false
  const load = Promise.resolve(autocannon(options)).finally(() => { finished = true })
  load.catch(() => {}) // awaited below
  for (let k = 1; ; k++) {
    const due = t0 + k * INTERVAL * 1000
    // the last sample is taken when the load ends, not on the grid after it
    while (!finished && performance.now() < due) await Promise.race([sleep(Math.min(250, due - performance.now())), load.catch(() => {})])
    if (finished) break
    samples.push(await sample(k * INTERVAL))
    if (!running(g.child)) throw new Error('the gateway exited during the soak')
  }
  const result = await load
  samples.push(await sample(Math.round((performance.now() - t0) / 100) / 10))

  // the verdict: from the first sample at or after 20 % of the run to the last one
  const during = samples.filter((s) => s.t > 0)
  const from = during.find((s) => s.t >= 0.2 * SECONDS) ?? during[0]
  const to = samples[samples.length - 1]
  const growth = from.rssMiB === undefined || to.rssMiB === undefined ? undefined : Math.round((to.rssMiB - from.rssMiB) * 10) / 10
  const growthPct = growth === undefined || !from.rssMiB ? undefined : Math.round((growth / from.rssMiB) * 1000) / 10
  const heapGrowth = from.heapUsedMiB === undefined || to.heapUsedMiB === undefined ? undefined : Math.round((to.heapUsedMiB - from.heapUsedMiB) * 10) / 10
  const flat = growthPct === undefined ? undefined : growthPct <= TOLERANCE
  const problems = requestProblems(result)

  process.stdout.write(`\nload: ${result.requests.average.toFixed(0)} req/s (mean), ${result['2xx']} answered 2xx, p50 ${result.latency.p50} ms, p99 ${result.latency.p99} ms\n`)
  for (const p of problems) process.stdout.write(`  ! ${p}\n`)
  const rssOf = samples.filter((s) => s.rssMiB !== undefined).map((s) => s.rssMiB!)
  process.stdout.write(`\n${table(['', 't s', 'rss MiB', 'heap used MiB'], [
    ['start (idle)', String(samples[0].t), String(samples[0].rssMiB ?? '?'), String(samples[0].heapUsedMiB ?? '?')],
    ['at 20 %', String(from.t), String(from.rssMiB ?? '?'), String(from.heapUsedMiB ?? '?')],
    ['end', String(to.t), String(to.rssMiB ?? '?'), String(to.heapUsedMiB ?? '?')],
    ['peak', '', String(rssOf.length ? Math.max(...rssOf) : '?'), ''],
  ], [false, true, true, true])}\n`)
  process.stdout.write(`\nverdict: RSS ${growth === undefined ? '?' : `${growth >= 0 ? '+' : ''}${growth} MiB (${growthPct! >= 0 ? '+' : ''}${growthPct} %)`} from t=${from.t}s to t=${to.t}s, heap used ${heapGrowth === undefined ? '?' : `${heapGrowth >= 0 ? '+' : ''}${heapGrowth} MiB`}: ${flat === undefined ? 'unknown' : flat ? `flat (≤ ${TOLERANCE} %)` : `GREW (> ${TOLERANCE} %)`}\n`)

  const file = writeResult(`${today()}-soak`, {
    ...resultHeader(),
    settings: {
      store: STORE,
      memoryMaxRecords: STORE === 'memory' ? MAX_RECORDS : undefined,
      seconds: SECONDS,
      connections: CONNECTIONS,
      ratePerSec: RATE || 'unlimited',
      intervalSeconds: INTERVAL,
      tolerancePct: TOLERANCE,
      method: 'POST',
      body: BODY,
      scenario: 'unique: new Idempotency-Key every request, increasing Fencing-Token per connection (one account per connection)',
      upstream: `bench/upstream.ts (node:http ${process.version})`,
      rss: '/proc/<pid>/status VmRSS of the gateway process',
      heap: "the gateway's /metrics nodejs_heap_size_used_bytes",
    },
    load: {
      reqPerSec: result.requests.average,
      total2xx: result['2xx'],
      p50ms: result.latency.p50,
      p99ms: result.latency.p99,
      non2xx: result.non2xx,
      errors: result.errors,
      timeouts: result.timeouts,
      problems,
    },
    verdict: { fromSeconds: from.t, toSeconds: to.t, rssFromMiB: from.rssMiB, rssToMiB: to.rssMiB, rssGrowthMiB: growth, rssGrowthPct: growthPct, heapUsedGrowthMiB: heapGrowth, flat },
    samples,
  })
  process.stdout.write(`\nwrote ${file}\n`)
  if (problems.length) {
    process.stdout.write('the load went wrong (marked !): the soak did not do what it says\n')
    process.exitCode = 1
  }
}

await runMain('soak', main)
