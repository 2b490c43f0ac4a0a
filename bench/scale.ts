/**
 * The performance issue's "cost flat as the store grows from 1k to 1M records": for each store
 * and each size, a fresh store is prefilled with that many completed idempotency records and
 * as many fencing high-water marks (distinct resources), then one fencegate gateway in front of
 * bench/upstream.ts is measured on bench/run.ts's `unique` stream (new key, increasing token
 * per connection: fence → claim → forward → finish on every request).
 *
 *   npx tsc -p . && node dist/bench/scale.js
 *   SCALE_STORES=sqlite SCALE_SIZES=1000,20000 SCALE_SECONDS=2 node dist/bench/scale.js   (a quick check)
 *
 * Environment:
 *   SCALE_STORES       comma list of sqlite, postgres, redis, memory (sqlite,postgres,redis)
 *   SCALE_SIZES        comma list of record counts, `k` and `M` suffixes allowed (1000,100000,1000000)
 *   SCALE_SECONDS      measured seconds per run (5)
 *   SCALE_WARMUP       warm-up seconds before each measured run, 0 for none (1)
 *   SCALE_CONNECTIONS  concurrent connections (50)
 *   BENCH_REDIS_URL / BENCH_POSTGRES_URL   as for bench/run.ts; each store and size gets its own
 *                      key prefix / schema, removed after its run (and on failure or Ctrl-C)
 *   BENCH_KEEP         1: keep the temp folder (configs, logs; the sqlite files are removed anyway)
 *
 * How each store is prefilled (before the measured gateway starts):
 *   1. `fencegate migrate` lays the store out (postgres: creates the schema and its tables);
 *   2. a gateway serves one real request (the template): its record and its mark are then read
 *      back from the store, in the store's own layout, which also checks that layout;
 *   3. with the gateway stopped, the template is copied N times under keys pre-<tag>-1…N and
 *      resources account:pre-<tag>-1…N: sqlite one INSERT … SELECT over a recursive CTE in one
 *      transaction (better-sqlite3), postgres one INSERT … SELECT FROM generate_series per table
 *      then VACUUM ANALYZE (so autovacuum does not start during the run), redis pipelined HSET +
 *      PEXPIREAT (the template's own expiry) + SET with the Lua scripts' exact key names;
 *   4. the measured gateway starts on the filled store; probes check that the first, middle and
 *      last prefilled key replays and that their marks refuse a lower token (412).
 * The memory store lives in the gateway, so it is filled through the gateway itself (N requests
 * to account pre-<tag>-i with key pre-<tag>-i), with store.maxRecords and maxResources raised to
 * N + 1,000,000 so nothing is evicted during the run.
 */
import autocannon from 'autocannon'
import { existsSync, rmSync } from 'node:fs'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { BODY, BenchError, CLI, type Gateway, type StoreKind, cpuSeconds, deleteRedisPrefix, dropSchema, foreignMeter, freePort, machine, metricSum, migrate, onCleanup, requestProblems, runMain, scrape, settingErrors, startGateway, startUpstream, stopChild, table, tmp, today, uniqueRequests, writeGatewayConfig, writeResult, postLoad, resultHeader } from './lib.js'
import { SECONDS, WARMUP, CONNECTIONS, STORES, SIZES, PREFILL_TOKEN, MEMORY_HEADROOM, RUN_ID, TEMPLATE, TEMPLATE_PATH, fmtCount } from './scale-settings.js'
import { type Instance, storeBlock, post, prefillSqlite, prefillPostgres, prefillRedis, prefillMemory, probe } from './scale-prefill.js'

// settings: bench/scale-settings.ts; filling a store before it is measured: bench/scale-prefill.ts

// ------------------------------------------------------------------------------- measure

interface Row {
  store: StoreKind
  records: number
  /** seconds to lay the store out, write the template, prefill and restart the gateway */
  prefillSeconds: number
  /** of which writing the N records and marks (memory: the N requests) */
  writeSeconds: number
  reqPerSec: number
  p50ms: number
  p99ms: number
  p999ms: number
  total2xx: number
  /** mean store call time over the measured run, ms (fencegate_store_duration_seconds sum / count) */
  storeMeanMs: Record<string, number>
  /** store calls per op over the measured run */
  storeCalls: Record<string, number>
  /** seconds to drop the store instance after the run (schema, keys, file) */
  cleanupSeconds?: number
  /** % of one core: the gateway, and everything outside the harness and its children */
  cpu: { gateway?: number; other?: number }
  problems: string[]
  warnings: string[]
  ratioToFirst?: number
  p99RatioToFirst?: number
}

/**
 * The request path's store calls, in the order shown: fence and claim, or admit where a store
 * makes both in one call, then finish. Other ops (markers, ping, audit_append) are in the JSON.
 */
const PATH_OPS = ['admit', 'fence', 'claim', 'finish']

/** The `op` label values of fencegate_store_duration_seconds in an exposition. */
function storeOps(text: string): string[] {
  const ops = new Set<string>()
  for (const m of text.matchAll(/^fencegate_store_duration_seconds_count\{[^}]*\bop="([^"]+)"/gm)) ops.add(m[1])
  return [...ops]
}

/** % of one core that processes outside the bench may use during a run before it is flagged */
const FOREIGN_LIMIT = 15

async function measureOne(kind: StoreKind, size: number, upstream: string): Promise<Row> {
  const timing: { cleanupSeconds?: number } = {}
  const row = await measureOnce(kind, size, upstream, timing)
  row.cleanupSeconds = timing.cleanupSeconds
  return row
}

/** One store instance, from layout to removal; `timing.cleanupSeconds` says how long its removal took. */
async function measureOnce(kind: StoreKind, size: number, upstream: string, timing: { cleanupSeconds?: number }): Promise<Row> {
  const s: Instance = { kind, size, id: `${RUN_ID}_${kind}_${size}`, file: join(tmp(), `scale-${size}.db`) }
  const ports = { port: await freePort(), adminPort: await freePort() }
  const config = writeGatewayConfig(`fencegate-${kind}-${size}`, storeBlock(s), upstream, ports)
  const name = `fencegate-${kind}-${fmtCount(size)}`
  const drop = onCleanup(async () => {
    if (kind === 'postgres') await dropSchema(s.id)
    if (kind === 'redis') await deleteRedisPrefix(s.id)
    if (kind === 'sqlite') for (const f of [s.file, `${s.file}-wal`, `${s.file}-shm`]) rmSync(f, { force: true })
  })
  let g: Gateway | undefined
  try {
    const t0 = performance.now()
    let writeSeconds: number
    const timed = async (fn: () => Promise<void>) => {
      const w0 = performance.now()
      await fn()
      writeSeconds = Math.round((performance.now() - w0) / 100) / 10
    }
    if (kind === 'memory') {
      g = await startGateway(name, config, ports.adminPort)
      await timed(() => prefillMemory(s, g!))
    } else {
      migrate(config)
      g = await startGateway(`${name}-template`, config, ports.adminPort)
      const first = await post(g.url, TEMPLATE_PATH, TEMPLATE.key, PREFILL_TOKEN)
      if (first.status !== 201) throw new Error(`${kind}: the template request answered ${first.status}: ${first.body}`)
      await stopChild(g.child)
      g = undefined
      await timed(() => (kind === 'sqlite' ? prefillSqlite(s) : kind === 'postgres' ? prefillPostgres(s) : prefillRedis(s)))
      g = await startGateway(name, config, ports.adminPort)
    }
    const prefillSeconds = Math.round((performance.now() - t0) / 100) / 10
    await probe(s, g)

    if (WARMUP > 0) await autocannon({ ...postLoad(g.url, CONNECTIONS), duration: WARMUP, ...uniqueRequests() })
    const before = await scrape(g.adminUrl)
    const foreign = foreignMeter()
    const cpu0 = cpuSeconds(g.child.proc.pid), t1 = performance.now()
    const result = await autocannon({ ...postLoad(g.url, CONNECTIONS), duration: SECONDS, ...uniqueRequests() })
    const wall = (performance.now() - t1) / 1000
    const cpu1 = cpuSeconds(g.child.proc.pid)
    const other = foreign()
    const after = await scrape(g.adminUrl)

    const problems = requestProblems(result)
    const warnings: string[] = []
    if (other !== undefined && other > FOREIGN_LIMIT) warnings.push(`other processes used ${other}% of a core during the run: the machine was not quiet`)
    const d = (metric: string, labels: Record<string, string> = {}) => (metricSum(after, metric, labels) ?? 0) - (metricSum(before, metric, labels) ?? 0)
    // requests in flight when autocannon stops reach the gateway uncounted, hence < and not !==
    const stored = d('fencegate_idempotency_total', { result: 'stored' })
    if (stored < result['2xx']) problems.push(`only ${stored} responses stored for ${result['2xx']} answered`)
    const rejected = d('fencegate_fencing_rejections_total')
    if (rejected) problems.push(`${rejected} fencing rejections`)
    const storeMeanMs: Row['storeMeanMs'] = {}, storeCalls: Row['storeCalls'] = {}
    for (const op of storeOps(after)) {
      const count = d('fencegate_store_duration_seconds_count', { store: kind, op })
      if (!count) continue
      storeCalls[op] = count
      storeMeanMs[op] = Math.round((d('fencegate_store_duration_seconds_sum', { store: kind, op }) / count) * 1e7) / 1e4
    }
    return {
      store: kind,
      records: size,
      prefillSeconds,
      writeSeconds: writeSeconds!,
      reqPerSec: result.requests.average,
      p50ms: result.latency.p50,
      p99ms: result.latency.p99,
      p999ms: result.latency.p99_9,
      total2xx: result['2xx'],
      storeMeanMs,
      storeCalls,
      cpu: { gateway: cpu0 === undefined || cpu1 === undefined ? undefined : Math.round(((cpu1 - cpu0) / wall) * 100), other },
      problems,
      warnings,
    }
  } finally {
    if (g) await stopChild(g.child)
    const c0 = performance.now()
    await drop()
    timing.cleanupSeconds = Math.round((performance.now() - c0) / 100) / 10
  }
}

// ------------------------------------------------------------------------------------ main

async function main(): Promise<void> {
  if (settingErrors.length) throw new BenchError(settingErrors.join('\n'))
  if (!existsSync(CLI)) throw new BenchError(`${CLI} is missing: run \`npx tsc -p .\` first`)
  const m = machine()
  const upstream = await startUpstream()
  process.stdout.write(`fencegate scale: ${m.cpus} × ${m.cpuModel ?? '?'}, node ${m.node}, upstream node:http\n`)
  process.stdout.write(`stores ${STORES.join(', ')} × sizes ${SIZES.map(fmtCount).join(', ')}: each prefilled, then ${WARMUP}s warm-up + ${SECONDS}s unique, ${CONNECTIONS} connections\n\n`)

  const rows: Row[] = []
  for (const kind of STORES) {
    for (const size of SIZES) {
      process.stdout.write(`  ${kind.padEnd(8)} ${fmtCount(size).padStart(6)} records: prefill… `)
      const row = await measureOne(kind, size, upstream.url)
      rows.push(row)
      const ms = PATH_OPS.filter((op) => row.storeMeanMs[op] !== undefined).map((op) => `${op} ${row.storeMeanMs[op].toFixed(3)}`).join(' ')
      process.stdout.write(`${row.prefillSeconds}s (writes ${row.writeSeconds}s); ${row.reqPerSec.toFixed(0)} req/s  p50 ${row.p50ms} ms  p99 ${row.p99ms} ms  store mean ms: ${ms}  cpu% gateway ${row.cpu.gateway ?? '?'} other ${row.cpu.other ?? '?'}; cleanup ${row.cleanupSeconds}s\n`)
      for (const p of row.problems) process.stdout.write(`    ! ${p}\n`)
      for (const w of row.warnings) process.stdout.write(`    ~ ${w}\n`)
      await sleep(300)
    }
  }

  const first = SIZES[0]
  for (const r of rows) {
    const base = rows.find((x) => x.store === r.store && x.records === first)
    if (base?.reqPerSec) r.ratioToFirst = Math.round((r.reqPerSec / base.reqPerSec) * 100) / 100
    if (base?.p99ms) r.p99RatioToFirst = Math.round((r.p99ms / base.p99ms) * 100) / 100
  }
  const ops = PATH_OPS.filter((op) => rows.some((r) => r.storeMeanMs[op] !== undefined))
  const head = ['store', 'records', 'req/s', 'p50 ms', 'p99 ms', `× ${fmtCount(first)}`, `p99 × ${fmtCount(first)}`, ...ops.map((op) => `${op} ms`), 'prefill s']
  const body = rows.map((r) => [
    r.store,
    fmtCount(r.records),
    r.reqPerSec.toFixed(0),
    String(r.p50ms),
    String(r.p99ms),
    r.ratioToFirst?.toFixed(2) ?? '-',
    r.p99RatioToFirst?.toFixed(2) ?? '-',
    ...ops.map((op) => r.storeMeanMs[op]?.toFixed(3) ?? '-'),
    r.prefillSeconds.toFixed(1),
  ].map((c, i) => (i === 0 && (r.problems.length || r.warnings.length) ? `${c} ${r.problems.length ? '!' : '~'}` : c)))
  process.stdout.write(`\n${SECONDS}s each; × ${fmtCount(first)}: req/s (and p99) as a ratio of the same store's ${fmtCount(first)}-record row; store ms: mean per call (sum / count of fencegate_store_duration_seconds)\n`)
  process.stdout.write(`${table(head, body, head.map((_, i) => i > 0))}\n`)

  const file = writeResult(`${today()}-scale`, {
    ...resultHeader(),
    settings: {
      stores: STORES,
      sizes: SIZES,
      seconds: SECONDS,
      warmupSeconds: WARMUP,
      connections: CONNECTIONS,
      pipelining: 1,
      method: 'POST',
      body: BODY,
      upstream: `bench/upstream.ts (node:http ${process.version})`,
      scenario: 'unique: new Idempotency-Key every request, increasing Fencing-Token per connection (one account per connection)',
      prefill: 'N completed records (copies of one real request\'s record) + N high-water marks on distinct resources, written in the store\'s layout; memory: N requests through the gateway',
      memoryMaxRecords: STORES.includes('memory') ? `records + ${MEMORY_HEADROOM}` : undefined,
      loadGenerator: 'autocannon (programmatic, in the harness process)',
      reqPerSec: 'autocannon requests.average (mean of per-second samples)',
      storeMeanMs: 'fencegate_store_duration_seconds sum / count per op over the measured run (warm-up excluded)',
    },
    results: rows,
  })
  process.stdout.write(`\nwrote ${file}\n`)
  if (rows.some((r) => r.warnings.length)) process.stdout.write('the machine was not quiet during some runs (marked ~): rerun on an idle machine before quoting\n')
  if (rows.some((r) => r.problems.length)) {
    process.stdout.write('some runs went wrong (marked !): their figures mean nothing\n')
    process.exitCode = 1
  }
}

await runMain('scale', main)
