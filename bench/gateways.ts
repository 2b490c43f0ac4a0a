/**
 * The processes a bench measures and the stores behind them (re-exported by bench/lib.ts): the
 * node upstream, a fencegate gateway from a temp YAML config, `fencegate migrate`, and removing
 * what a run left in postgres and redis.
 */
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { HERE, CLI, EXIT_WITH_PARENT, REDIS_URL, POSTGRES_URL } from './basics.js'
import { type Child, tmp, start, waitLine, runToEnd, waitHttp } from './children.js'

// ------------------------------------------------------------------------------ processes

/** The node upstream (bench/upstream.ts): 201 with a small JSON body. */
export async function startUpstream(): Promise<{ url: string; child: Child }> {
  const child = start('upstream-node', process.execPath, [join(HERE, 'upstream.js'), '0'])
  return { url: await waitLine(child, /^listening (\S+)/), child }
}

export interface Gateway { url: string; adminUrl: string; child: Child; config: string }

/**
 * The `settle` block (contract §4a) of a bench route's `idempotency`, as YAML lines indented by
 * `indent`: probe `GET /accounts/{param.account}/charges?idempotencyKey={key}` (the sample
 * upstream's lookup), 200 applied, 404 not applied, the first probe 2 s after an outcome became
 * unknown. Under the bench's load no outcome becomes unknown, so no probe is sent: what it costs
 * is the settle work on every request (keeping the filled probe request with the claim).
 */
export function settleBlock(indent: string): string {
  return [
    'settle:',
    '  probe:',
    '    path: "/accounts/{param.account}/charges?idempotencyKey={key}"',
    '    applied: [200]',
    '    notApplied: [404]',
    '  after: 2s',
  ].map((l) => `${indent}${l}\n`).join('')
}

/**
 * One route of a bench gateway's config: `POST /<prefix>/:account/*` to `upstream`, fenced on
 * `account:{param.account}` and/or with idempotency required (both by default); `settle` adds
 * settleBlock() to the idempotency block.
 */
export function benchRoute(name: string, prefix: string, upstream: string, checks: { fencing?: boolean; idempotency?: boolean; settle?: boolean } = { fencing: true, idempotency: true }): string {
  return `  - name: ${name}
    match:
      path: /${prefix}/:account/*
      methods: [POST]
    upstream:
      url: ${upstream}
${checks.fencing ? '    fencing:\n      resource: "account:{param.account}"\n' : ''}${checks.idempotency ? `    idempotency:\n      required: true\n${checks.settle ? settleBlock('      ') : ''}` : ''}`
}

/**
 * Writes a gateway config to the temp folder; returns its path. `store` is the YAML block under
 * `store:`, indented by two spaces; `routes` are `benchRoute()`s, by default the one `bench`
 * route (POST /accounts/:account/*, fencing and idempotency).
 */
export function writeGatewayConfig(name: string, store: string, upstream: string, ports: { port: number; adminPort: number }, routes = benchRoute('bench', 'accounts', upstream)): string {
  const config = join(tmp(), `${name}.yaml`)
  writeFileSync(config, `# written by bench/lib.ts
listen: 127.0.0.1:${ports.port}
admin:
  listen: 127.0.0.1:${ports.adminPort}
store:
${store}
routes:
${routes}`)
  return config
}

/** `fencegate migrate --config …`: creates the postgres schema; for the other stores it opens (and so lays out) the store. */
export function migrate(config: string): string {
  return runToEnd(process.execPath, [CLI, 'migrate', '--config', config]).trim()
}

/** Starts `fencegate --config …` (exits with the harness: exit-with-parent.ts) and waits for /readyz. */
export async function startGateway(name: string, config: string, adminPort: number): Promise<Gateway> {
  const child = start(name, process.execPath, ['--import', EXIT_WITH_PARENT, CLI, '--config', config])
  const url = await waitLine(child, / on (http:\/\/\S+) \(admin/)
  const adminUrl = `http://127.0.0.1:${adminPort}`
  await waitHttp(`${adminUrl}/readyz`, child, 200)
  return { url, adminUrl, child, config }
}

// ---------------------------------------------------------------------------- the stores

/** Drops a postgres schema (CASCADE). */
export async function dropSchema(schema: string): Promise<void> {
  const { default: pg } = await import('pg')
  const client = new pg.Client({ connectionString: POSTGRES_URL })
  client.on('error', () => {})
  await client.connect()
  try {
    await client.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`)
  } finally {
    await client.end().catch(() => {})
  }
}

/** Deletes every redis key of the fencegate key prefix `prefix` ({fg:<prefix>:…}); returns how many. */
export async function deleteRedisPrefix(prefix: string): Promise<number> {
  const { Redis } = await import('ioredis')
  const redis = new Redis(REDIS_URL, { lazyConnect: true, maxRetriesPerRequest: 1 })
  redis.on('error', () => {})
  await redis.connect()
  let n = 0
  try {
    let cursor = '0'
    do {
      const [next, keys] = await redis.scan(cursor, 'MATCH', `{fg:${prefix}:*`, 'COUNT', 10_000)
      if (keys.length) n += await redis.unlink(...keys)
      cursor = next
    } while (cursor !== '0')
  } finally {
    redis.disconnect()
  }
  return n
}

/** Deletes every key of the fencegate key prefix `prefix` from every master of the Redis Cluster whose seed nodes `url` lists. */
export async function deleteRedisClusterPrefix(url: string, prefix: string): Promise<number> {
  const { Cluster } = await import('ioredis')
  const cluster = new Cluster(url.split(',').map((u) => { const x = new URL(u.trim()); return { host: x.hostname, port: Number(x.port || 6379) } }), { lazyConnect: true })
  cluster.on('error', () => {})
  await cluster.connect()
  let n = 0
  try {
    for (const node of cluster.nodes('master')) {
      let cursor = '0'
      do {
        const [next, keys] = await node.scan(cursor, 'MATCH', `{fg:${prefix}:*`, 'COUNT', 10_000)
        // every key is its own slot: one UNLINK each, pipelined by the cluster client
        n += (await Promise.all(keys.map((k) => cluster.unlink(k)))).reduce((a, b) => a + b, 0)
        cursor = next
      } while (cursor !== '0')
    }
  } finally {
    cluster.disconnect()
  }
  return n
}
