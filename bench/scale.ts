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
import {
  BASE_HEADERS, BODY, BenchError, CLI, POSTGRES_URL, REDIS_URL, type Gateway, type StoreKind, cpuSeconds, deleteRedisPrefix, dropSchema,
  envNumber, foreignMeter, freePort, isStoreKind, machine, metricSum, migrate, onCleanup, requestProblems, runMain, runTag,
  scrape, settingErrors, startGateway, startUpstream, stopChild, table, tmp, today, uniqueRequests, writeGatewayConfig, writeResult, postLoad, resultHeader,
} from './lib.js'

// ---------------------------------------------------------------------------------- settings

const SECONDS = envNumber('SCALE_SECONDS', 5, 1)
const WARMUP = envNumber('SCALE_WARMUP', 1, 0)
const CONNECTIONS = Math.floor(envNumber('SCALE_CONNECTIONS', 50, 1))

const STORES: StoreKind[] = (() => {
  const raw = process.env.SCALE_STORES || 'sqlite,postgres,redis'
  const list = raw.split(',').map((s) => s.trim()).filter(Boolean)
  const bad = list.filter((s) => !isStoreKind(s))
  if (bad.length || !list.length) settingErrors.push(`SCALE_STORES must be a comma list of sqlite, postgres, redis, memory; got "${raw}"`)
  return [...new Set(list.filter(isStoreKind))]
})()

const SIZES: number[] = (() => {
  const raw = process.env.SCALE_SIZES || '1000,100000,1000000'
  const list = raw.split(',').map((s) => s.trim()).filter(Boolean).map((s) => {
    const m = /^(\d+(?:\.\d+)?)([kKmM]?)$/.exec(s)
    const n = m ? Math.round(Number(m[1]) * (m[2] === '' ? 1 : /k/i.test(m[2]) ? 1e3 : 1e6)) : NaN
    return Number.isSafeInteger(n) && n >= 1 ? n : NaN
  })
  if (!list.length || list.some(Number.isNaN)) settingErrors.push(`SCALE_SIZES must be a comma list of positive counts (1000, 100k, 1M); got "${raw}"`)
  return [...new Set(list.filter((n) => !Number.isNaN(n)))].sort((a, b) => a - b)
})()

/** the high-water mark of every prefilled resource; probes send 1 and expect 412 */
const PREFILL_TOKEN = '1000'
/** records (and resources) the memory store may hold beyond the prefill */
const MEMORY_HEADROOM = 1_000_000
/** one key prefix / schema per run, per store and size: runs never see each other's data */
const RUN_ID = `scale_${process.pid}_${Date.now().toString(36)}`
const TEMPLATE = { account: `tpl-${runTag}`, key: `tpl-${runTag}` }
const TEMPLATE_PATH = `/accounts/${TEMPLATE.account}/transfers`
const preKey = (i: number) => `pre-${runTag}-${i}`
const prePath = (i: number) => `/accounts/pre-${runTag}-${i}/transfers`
/** the fencing resource of prefilled account i (the route's template: account:{param.account}) */
const PRE_RESOURCE_PREFIX = `account:pre-${runTag}-`

const fmtCount = (n: number) => (n >= 1e6 && n % 1e6 === 0 ? `${n / 1e6}M` : n >= 1e3 && n % 1e3 === 0 ? `${n / 1e3}k` : String(n))

// ------------------------------------------------------------------------------- prefill

/** Where one store instance (one store and size) keeps its data. */
interface Instance {
  kind: StoreKind
  size: number
  /** the redis key prefix and postgres schema */
  id: string
  /** the sqlite file */
  file: string
}

function storeBlock(s: Instance): string {
  switch (s.kind) {
    case 'sqlite': return `  kind: sqlite\n  path: ${s.file}`
    case 'postgres': return `  kind: postgres\n  url: ${POSTGRES_URL}\n  schema: ${s.id}\n  pool: 20`
    case 'redis': return `  kind: redis\n  url: ${REDIS_URL}\n  keyPrefix: ${s.id}`
    case 'memory': return `  kind: memory\n  maxRecords: ${s.size + MEMORY_HEADROOM}\n  maxResources: ${s.size + MEMORY_HEADROOM}`
  }
}

async function post(url: string, path: string, key: string, token: string): Promise<{ status: number; replayed: boolean; body: string }> {
  const r = await fetch(url + path, { method: 'POST', headers: { ...BASE_HEADERS, 'idempotency-key': key, 'fencing-token': token }, body: BODY })
  return { status: r.status, replayed: r.headers.get('idempotent-replayed') === 'true', body: await r.text() }
}

/** sqlite: the template row copied N times in one INSERT … SELECT, one transaction. */
async function prefillSqlite(s: Instance): Promise<void> {
  const { default: Database } = await import('better-sqlite3')
  const db = new Database(s.file, { timeout: 5000 })
  try {
    db.pragma('cache_size = -262144') // 256 MiB for this bulk insert (this connection only)
    const columns = (table: string) => (db.prepare(`PRAGMA table_info(${table})`).all() as { name: string }[]).map((c) => c.name)
    // the store's record id (src/store/memory.ts recordId): route \n scope \n key; the route has no scope
    const idOf = (key: string) => `bench\n\n${key}`
    if (!db.prepare('SELECT 1 FROM fg_records_v1 WHERE id = ?').get(idOf(TEMPLATE.key))) {
      throw new BenchError(`sqlite: the template record is not at id "bench\\n\\n${TEMPLATE.key}" in fg_records_v1: the store's layout changed, update bench/scale.ts`)
    }
    const mark = db.prepare('SELECT CAST(highest AS TEXT) AS h FROM fg_fences_v1 WHERE resource = ?').get(`account:${TEMPLATE.account}`) as { h: string } | undefined
    if (mark?.h !== PREFILL_TOKEN) throw new BenchError(`sqlite: the template's mark is not ${PREFILL_TOKEN} in fg_fences_v1 (found ${mark?.h}): the store's layout changed`)
    const copy = (table: string, keyColumn: string, where: string) => db.prepare(`INSERT INTO ${table} (${columns(table).join(', ')})
      WITH RECURSIVE s(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM s WHERE g < @n)
      SELECT ${columns(table).map((c) => (c === keyColumn ? '@prefix || g' : `t.${c}`)).join(', ')} FROM s, ${table} t WHERE t.${where} = @template`)
    const records = copy('fg_records_v1', 'id', 'id')
    const fences = copy('fg_fences_v1', 'resource', 'resource')
    const changes = db.transaction(() => [
      records.run({ n: s.size, prefix: idOf(`pre-${runTag}-`), template: idOf(TEMPLATE.key) }).changes,
      fences.run({ n: s.size, prefix: PRE_RESOURCE_PREFIX, template: `account:${TEMPLATE.account}` }).changes,
    ])()
    if (changes[0] !== s.size || changes[1] !== s.size) throw new Error(`sqlite: prefill wrote ${changes.join(' + ')} rows, expected ${s.size} + ${s.size}`)
    db.pragma('wal_checkpoint(TRUNCATE)')
  } finally {
    db.close()
  }
}

/** postgres: one INSERT … SELECT FROM generate_series per table, then VACUUM ANALYZE. */
async function prefillPostgres(s: Instance): Promise<void> {
  const { default: pg } = await import('pg')
  const client = new pg.Client({ connectionString: POSTGRES_URL })
  client.on('error', () => {})
  await client.connect()
  try {
    await client.query("SET statement_timeout = 0")
    const schema = `"${s.id}"`
    const columns = async (table: string) => (await client.query<{ column_name: string }>(
      'SELECT column_name FROM information_schema.columns WHERE table_schema = $1 AND table_name = $2 ORDER BY ordinal_position', [s.id, table])).rows.map((r) => r.column_name)
    const tpl = await client.query(`SELECT 1 FROM ${schema}.fg_records_v1 WHERE route = 'bench' AND scope = '' AND key = $1`, [TEMPLATE.key])
    if (!tpl.rowCount) throw new BenchError(`postgres: the template record (bench, '', ${TEMPLATE.key}) is not in ${s.id}.fg_records_v1: the store's layout changed, update bench/scale.ts`)
    const mark = await client.query(`SELECT highest::text AS h FROM ${schema}.fg_fences_v1 WHERE resource = $1`, [`account:${TEMPLATE.account}`])
    if (mark.rows[0]?.h !== PREFILL_TOKEN) throw new BenchError(`postgres: the template's mark is not ${PREFILL_TOKEN} in ${s.id}.fg_fences_v1 (found ${mark.rows[0]?.h})`)
    const rc = await columns('fg_records_v1'), fc = await columns('fg_fences_v1')
    const r = await client.query(`INSERT INTO ${schema}.fg_records_v1 (${rc.join(', ')})
      SELECT ${rc.map((c) => (c === 'key' ? '$2::text || g::text' : `t.${c}`)).join(', ')}
      FROM ${schema}.fg_records_v1 t CROSS JOIN generate_series(1, $3::int) g
      WHERE t.route = 'bench' AND t.scope = '' AND t.key = $1`, [TEMPLATE.key, `pre-${runTag}-`, s.size])
    const f = await client.query(`INSERT INTO ${schema}.fg_fences_v1 (${fc.join(', ')})
      SELECT ${fc.map((c) => (c === 'resource' ? '$2::text || g::text' : `t.${c}`)).join(', ')}
      FROM ${schema}.fg_fences_v1 t CROSS JOIN generate_series(1, $3::int) g
      WHERE t.resource = $1`, [`account:${TEMPLATE.account}`, PRE_RESOURCE_PREFIX, s.size])
    if (r.rowCount !== s.size || f.rowCount !== s.size) throw new Error(`postgres: prefill wrote ${r.rowCount} + ${f.rowCount} rows, expected ${s.size} + ${s.size}`)
    // else autovacuum (insert threshold) would start on these tables during the measured run
    await client.query(`VACUUM ANALYZE ${schema}.fg_records_v1`)
    await client.query(`VACUUM ANALYZE ${schema}.fg_fences_v1`)
  } finally {
    await client.end().catch(() => {})
  }
}

/** src/store/redis/index.ts's `part`: percent-encodes what would end a hash tag or blur a key's parts. */
const part = (x: string): string => x.replace(/[%{}:]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`)

/** redis: the template hash copied N times with the Lua scripts' key names, pipelined. */
async function prefillRedis(s: Instance): Promise<void> {
  const { Redis } = await import('ioredis')
  const redis = new Redis(REDIS_URL, { lazyConnect: true, maxRetriesPerRequest: 1 })
  redis.on('error', () => {})
  await redis.connect()
  try {
    // {fg:<prefix>:r:<route>:<scope>:<key>} and {fg:<prefix>:f:<resource>}, each part encoded
    const recordKey = (key: string) => `{fg:${part(s.id)}:r:bench::${part(key)}}`
    const fenceKey = (resource: string) => `{fg:${part(s.id)}:f:${part(resource)}}`
    const tpl = await redis.hgetallBuffer(recordKey(TEMPLATE.key))
    if (!tpl.state || tpl.state.toString() !== 'completed' || !tpl.exp) {
      throw new BenchError(`redis: the template record is not a completed hash at ${recordKey(TEMPLATE.key)}: the store's layout changed, update bench/scale.ts`)
    }
    const expireAt = Number(tpl.exp.toString()) // the record's own expiry: PEXPIRE ttl from the same now
    if (!(expireAt > Date.now() + 3_600_000)) throw new BenchError(`redis: the template record expires at ${expireAt}, less than an hour away: raise the route's idempotency.ttl`)
    const mark = await redis.get(fenceKey(`account:${TEMPLATE.account}`))
    if (mark !== PREFILL_TOKEN) throw new BenchError(`redis: the template's mark is not ${PREFILL_TOKEN} at ${fenceKey(`account:${TEMPLATE.account}`)} (found ${mark})`)
    const BATCH = 5000
    const batch = async (from: number, to: number) => {
      const p = redis.pipeline()
      for (let i = from; i <= to; i++) {
        const k = recordKey(preKey(i))
        p.hset(k, tpl)
        p.pexpireat(k, expireAt)
        p.set(fenceKey(`${PRE_RESOURCE_PREFIX}${i}`), mark)
      }
      const res = await p.exec()
      const failed = res?.find(([err]) => err)
      if (failed) throw new Error(`redis: prefill failed: ${failed[0]!.message}`)
    }
    // two batches in flight: one being written while redis answers the other
    const inFlight = new Set<Promise<void>>()
    for (let from = 1; from <= s.size; from += BATCH) {
      const b = batch(from, Math.min(s.size, from + BATCH - 1))
      inFlight.add(b)
      b.finally(() => inFlight.delete(b)).catch(() => {})
      if (inFlight.size >= 2) await Promise.race(inFlight)
    }
    await Promise.all(inFlight)
  } finally {
    redis.disconnect()
  }
}

/** memory: the gateway is the store, so it is filled through it: N requests, each its own key and account. */
async function prefillMemory(s: Instance, g: Gateway): Promise<void> {
  let i = 0
  const result = await autocannon({
    ...postLoad(g.url, CONNECTIONS),
    amount: s.size,
    requests: [{
      setupRequest: (req) => {
        const n = ++i
        return { ...req, method: 'POST', path: prePath(n), headers: { ...BASE_HEADERS, 'idempotency-key': preKey(n), 'fencing-token': PREFILL_TOKEN } }
      },
    }],
  })
  const problems = requestProblems(result)
  if (problems.length || result['2xx'] !== s.size) throw new Error(`memory: prefill through the gateway: ${result['2xx']} of ${s.size} stored; ${problems.join('; ')}`)
}

/** The first, middle and last prefilled key replays; their marks refuse token 1. */
async function probe(s: Instance, g: Gateway): Promise<void> {
  for (const i of [...new Set([1, Math.ceil(s.size / 2), s.size])]) {
    // direct prefills copy the template's record, fingerprint included: replayed on the template's path
    const replay = await post(g.url, s.kind === 'memory' ? prePath(i) : TEMPLATE_PATH, preKey(i), PREFILL_TOKEN)
    if (replay.status !== 201 || !replay.replayed) throw new Error(`${s.kind}: prefilled key ${preKey(i)} answered ${replay.status} (replayed: ${replay.replayed}), expected a replayed 201: ${replay.body}`)
    const stale = await post(g.url, prePath(i), `probe-${runTag}-${s.size}-${i}`, '1')
    if (stale.status !== 412) throw new Error(`${s.kind}: prefilled account ${preKey(i)} answered ${stale.status} to token 1, expected 412 (its mark is ${PREFILL_TOKEN}): ${stale.body}`)
  }
}

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
