/**
 * How bench/scale.ts fills a store before it is measured (see its docstring): the store block of a
 * store instance's config, the direct prefills of sqlite, postgres and redis in each store's own
 * layout, the memory store's prefill through the gateway, and the probes of the prefilled keys.
 */
import autocannon from 'autocannon'
import { BASE_HEADERS, BODY, BenchError, POSTGRES_URL, REDIS_URL, type Gateway, type StoreKind, requestProblems, runTag, postLoad } from './lib.js'
import { CONNECTIONS, PREFILL_TOKEN, MEMORY_HEADROOM, TEMPLATE, TEMPLATE_PATH, preKey, prePath, PRE_RESOURCE_PREFIX } from './scale-settings.js'

/** Where one store instance (one store and size) keeps its data. */
export interface Instance {
  kind: StoreKind
  size: number
  /** the redis key prefix and postgres schema */
  id: string
  /** the sqlite file */
  file: string
}

export function storeBlock(s: Instance): string {
  switch (s.kind) {
    case 'sqlite': return `  kind: sqlite\n  path: ${s.file}`
    case 'postgres': return `  kind: postgres\n  url: ${POSTGRES_URL}\n  schema: ${s.id}\n  pool: 20`
    case 'redis': return `  kind: redis\n  url: ${REDIS_URL}\n  keyPrefix: ${s.id}`
    case 'memory': return `  kind: memory\n  maxRecords: ${s.size + MEMORY_HEADROOM}\n  maxResources: ${s.size + MEMORY_HEADROOM}`
  }
}

export async function post(url: string, path: string, key: string, token: string): Promise<{ status: number; replayed: boolean; body: string }> {
  const r = await fetch(url + path, { method: 'POST', headers: { ...BASE_HEADERS, 'idempotency-key': key, 'fencing-token': token }, body: BODY })
  return { status: r.status, replayed: r.headers.get('idempotent-replayed') === 'true', body: await r.text() }
}

/** sqlite: the template row copied N times in one INSERT … SELECT, one transaction. */
export async function prefillSqlite(s: Instance): Promise<void> {
  const { default: Database } = await import('better-sqlite3')
  const db = new Database(s.file, { timeout: 5000 })
  try {
    db.pragma('cache_size = -262144') // 256 MiB for this bulk insert (this connection only)
    const columns = (table: string) => (db.prepare(`PRAGMA table_info(${table})`).all() as { name: string }[]).map((c) => c.name)
    // the store's record id (src/store/memory/index.ts recordId): route \n scope \n key; the route has no scope
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
export async function prefillPostgres(s: Instance): Promise<void> {
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
export const part = (x: string): string => x.replace(/[%{}:]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`)

/** redis: the template hash copied N times with the Lua scripts' key names, pipelined. */
export async function prefillRedis(s: Instance): Promise<void> {
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
export async function prefillMemory(s: Instance, g: Gateway): Promise<void> {
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
export async function probe(s: Instance, g: Gateway): Promise<void> {
  for (const i of [...new Set([1, Math.ceil(s.size / 2), s.size])]) {
    // direct prefills copy the template's record, fingerprint included: replayed on the template's path
    const replay = await post(g.url, s.kind === 'memory' ? prePath(i) : TEMPLATE_PATH, preKey(i), PREFILL_TOKEN)
    if (replay.status !== 201 || !replay.replayed) throw new Error(`${s.kind}: prefilled key ${preKey(i)} answered ${replay.status} (replayed: ${replay.replayed}), expected a replayed 201: ${replay.body}`)
    const stale = await post(g.url, prePath(i), `probe-${runTag}-${s.size}-${i}`, '1')
    if (stale.status !== 412) throw new Error(`${s.kind}: prefilled account ${preKey(i)} answered ${stale.status} to token 1, expected 412 (its mark is ${PREFILL_TOKEN}): ${stale.body}`)
  }
}
