/**
 * What bench/run.ts measures (see its docstring): the upstream (nginx or node), the floor, hono
 * and fastify anchors, the fencegate gateways with their store blocks (and the Redis Cluster of
 * redis-cluster), removing what the gateways left in the stores, and a target's shape.
 */
import { spawnSync } from 'node:child_process'
import { mkdirSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { BenchError, HERE, CLI, REDIS_URL, POSTGRES_URL, type Child, tmp, start, waitLine, freePort, waitHttp, onCleanup, benchRoute, writeGatewayConfig, dropSchema, deleteRedisPrefix, deleteRedisClusterPrefix } from './lib.js'
import { startLocalCluster, redisToolsAvailable } from '../scripts/redis-cluster.js'
import { CPU_PROF, FLOOR_MODE, type Scenario, SCENARIOS } from './run-settings.js'
import { ROUTE_PREFIX } from './run-scenarios.js'

// ------------------------------------------------------------------------------ upstreams

export interface Upstream { kind: 'nginx' | 'node'; version: string; url: string; child: Child }

function nginxVersion(): string | undefined {
  const r = spawnSync('nginx', ['-v'], { encoding: 'utf8' })
  if (r.error || r.status !== 0) return undefined
  return (r.stderr || r.stdout).trim().replace(/^nginx version:\s*/, '')
}

export async function startUpstream(): Promise<Upstream> {
  const forced = process.env.BENCH_UPSTREAM
  if (forced && forced !== 'nginx' && forced !== 'node') throw new BenchError(`BENCH_UPSTREAM must be nginx or node, got "${forced}"`)
  const nginx = forced === 'node' ? undefined : nginxVersion()
  if (forced === 'nginx' && !nginx) throw new BenchError('BENCH_UPSTREAM=nginx but no working nginx on PATH')
  if (nginx) {
    const port = await freePort()
    const dir = join(tmp(), 'nginx')
    mkdirSync(join(dir, 'logs'), { recursive: true })
    const conf = join(dir, 'nginx.conf')
    writeFileSync(conf, `# written by bench/run.ts
daemon off;
master_process on;
worker_processes 1;
pid ${dir}/nginx.pid;
error_log ${dir}/logs/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path ${dir}/client_body;
  proxy_temp_path ${dir}/proxy;
  fastcgi_temp_path ${dir}/fastcgi;
  uwsgi_temp_path ${dir}/uwsgi;
  scgi_temp_path ${dir}/scgi;
  keepalive_requests 1000000;
  keepalive_timeout 65s;
  server {
    listen 127.0.0.1:${port};
    location / {
      default_type application/json;
      return 201 '{"ok":true}';
    }
  }
}
`)
    const child = start('upstream-nginx', 'nginx', ['-p', dir, '-e', join(dir, 'logs/error.log'), '-c', conf])
    const url = `http://127.0.0.1:${port}`
    await waitHttp(`${url}/`, child, 201)
    return { kind: 'nginx', version: nginx, url, child }
  }
  const child = start('upstream-node', process.execPath, [join(HERE, 'upstream.js'), '0'])
  const url = await waitLine(child, /^listening (\S+)/)
  return { kind: 'node', version: `node:http ${process.version}`, url, child }
}

/**
 * node flags that write a CPU profile of a proxy to BENCH_CPU_PROF when it exits. `forks`: the
 * process forks node children with the same flags (--workers), so each keeps node's default
 * name (with its pid) instead of all writing one file.
 */
function profileArgs(name: string, forks = false): string[] {
  if (!CPU_PROF) return []
  mkdirSync(CPU_PROF, { recursive: true })
  return ['--cpu-prof', '--cpu-prof-dir', CPU_PROF, ...(forks ? [] : ['--cpu-prof-name', `${name}-${Date.now()}.cpuprofile`])]
}

export async function startFloor(upstream: string): Promise<{ url: string; child: Child }> {
  const child = start('floor', process.execPath, [...profileArgs('floor'), join(HERE, 'floor-proxy.js'), upstream, '0', FLOOR_MODE])
  return { url: await waitLine(child, /^listening (\S+)/), child }
}

/** The hono anchor (hono-floor.ts): the floor's work as one Hono handler on @hono/node-server. */
export async function startHono(upstream: string): Promise<{ url: string; child: Child }> {
  const child = start('hono', process.execPath, [...profileArgs('hono'), join(HERE, 'hono-floor.js'), upstream, '0'])
  return { url: await waitLine(child, /^listening (\S+)/), child }
}

/** The fastify anchor (fastify-proxy.ts): @fastify/http-proxy, pooled like the floor. */
export async function startFastify(upstream: string): Promise<{ url: string; child: Child }> {
  const child = start('fastify', process.execPath, [...profileArgs('fastify'), join(HERE, 'fastify-proxy.js'), upstream, '0'])
  return { url: await waitLine(child, /^listening (\S+)/), child }
}

export interface Gateway { url: string; adminUrl: string; child: Child; config: string }

/**
 * The gateways measured: each store, the sqlite store with `--workers 2`, and the memory store
 * with tracing on (every span exported).
 */
export type GatewayName = 'memory' | 'sqlite' | 'sqlite-w2' | 'redis' | 'redis-cluster' | 'postgres' | 'traced'
export const GATEWAYS: GatewayName[] = ['memory', 'sqlite', 'sqlite-w2', 'redis', 'redis-cluster', 'postgres', 'traced']
/**
 * Each gateway's scenarios unless BENCH_SCENARIOS says otherwise: all five for the memory and
 * sqlite stores, unique and replay for the others, so a default run stays near 4½ minutes.
 */
export const DEFAULT_SCENARIOS: Record<GatewayName, Scenario[]> = {
  memory: SCENARIOS,
  sqlite: SCENARIOS,
  'sqlite-w2': ['unique'], // the --workers comparison: the scenario that binds
  redis: ['unique', 'replay'],
  'redis-cluster': ['unique', 'replay'],
  postgres: ['unique', 'replay'],
  traced: ['unique', 'replay'],
}
/** processes serving each gateway's port (fencegate --workers) */
export const WORKERS: Partial<Record<GatewayName, number>> = { 'sqlite-w2': 2 }
// one key prefix / schema per run, so runs never see each other's high-water marks
const RUN_ID = `bench_${process.pid}_${Date.now().toString(36)}`

function storeBlock(name: GatewayName): string {
  switch (name) {
    case 'redis': return `  kind: redis\n  url: ${REDIS_URL}\n  keyPrefix: ${RUN_ID}`
    case 'redis-cluster': return `  kind: redis\n  cluster: true\n  url: ${redisCluster!.url}\n  keyPrefix: ${RUN_ID}`
    case 'postgres': return `  kind: postgres\n  url: ${POSTGRES_URL}\n  schema: ${RUN_ID}\n  pool: 20`
    case 'sqlite': return `  kind: sqlite\n  path: ${join(tmp(), 'fencegate.db')}`
    case 'sqlite-w2': return `  kind: sqlite\n  path: ${join(tmp(), 'fencegate-w2.db')}` // its own file, grown by its runs only
    default: return '  kind: memory'
  }
}

/** The Redis Cluster of the redis-cluster gateway: BENCH_REDIS_CLUSTER_URL's, or one the bench starts. */
let redisCluster: { url: string; stop?: () => Promise<void> } | undefined

async function startRedisCluster(): Promise<void> {
  const url = process.env.BENCH_REDIS_CLUSTER_URL
  if (url) {
    redisCluster = { url }
    return
  }
  if (!redisToolsAvailable()) throw new BenchError('redis-cluster: no BENCH_REDIS_CLUSTER_URL, and no redis-server/redis-cli on PATH to start a local cluster (or leave redis-cluster out with BENCH_ONLY)')
  // 3 masters, no replicas: the store's cost on a cluster, not replication's CPU on a small box
  const c = await startLocalCluster({ masters: 3, replicasPerMaster: 0 })
  redisCluster = { url: c.url, stop: () => c.stop() }
  onCleanup(async () => { await c.stop() })
}

export async function startGateway(name: GatewayName, upstream: string): Promise<Gateway> {
  if (name === 'redis-cluster' && !redisCluster) await startRedisCluster()
  const [port, adminPort] = [await freePort(), await freePort()]
  // one route per kind of check, so one process serves every scenario
  const config = writeGatewayConfig(`fencegate-${name}`, storeBlock(name), upstream, { port, adminPort }, [
    benchRoute('bench', ROUTE_PREFIX.unique, upstream),
    benchRoute('bench-stale', ROUTE_PREFIX.stale, upstream),
    benchRoute('bench-fencing', ROUTE_PREFIX.fencing, upstream, { fencing: true }),
    benchRoute('bench-idempotency', ROUTE_PREFIX.idempotency, upstream, { idempotency: true }),
    benchRoute('bench-plain', ROUTE_PREFIX.plain, upstream, {}),
  ].join(''))
  // traced: spans go over OTLP/HTTP to the bench upstream, which answers every POST with a 2xx
  const env: Record<string, string> = name === 'traced' ? { OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: `${upstream}/v1/traces`, OTEL_SERVICE_NAME: 'fencegate-bench' } : {}
  const workers = WORKERS[name]
  const child = start(`fencegate-${name}`, process.execPath, [...profileArgs(`fencegate-${name}`, workers !== undefined), CLI, '--config', config, ...(workers ? ['--workers', String(workers)] : [])], { env })
  const url = await waitLine(child, / on (http:\/\/\S+) \(admin/)
  const adminUrl = `http://127.0.0.1:${adminPort}`
  await waitHttp(`${adminUrl}/readyz`, child, 200)
  return { url, adminUrl, child, config }
}

/** Drops what the redis and postgres gateways left behind (servers not reachable: nothing was made). */
export async function cleanStores(): Promise<void> {
  await dropSchema(RUN_ID).catch(() => {})
  await deleteRedisPrefix(RUN_ID).catch(() => {})
  // a cluster the bench started goes away whole; someone else's loses this run's keys
  if (redisCluster && !redisCluster.stop) await deleteRedisClusterPrefix(redisCluster.url, RUN_ID).catch(() => {})
}

export type TargetName = 'upstream' | 'floor' | 'hono' | 'fastify' | GatewayName

export interface Target {
  name: TargetName
  scenario: Scenario
  url: string
  /** the process that does the proxying (or answering, for the bare upstream) */
  child: Child
  gateway?: Gateway
}
