/**
 * `fencegate doctor`, the start-up check and the claim that names the live store (issue 12 §3),
 * against real stores: a private `redis-server --save "" --appendonly no --maxmemory-policy
 * allkeys-lru` started here (and killed after), a primary with a replica, a Redis Cluster, the
 * test PostgreSQL, and SQLite files. The CLI cases run dist/ (npm run build first).
 */
import { spawn, type ChildProcess } from 'node:child_process'
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, test } from 'vitest'
import { Redis } from 'ioredis'
import { parseConfig } from '../src/config/load.js'
import { inspectStore, SqliteStore } from '../src/store/index.js'
import { claimSentences } from '../src/audit/guarantees.js'
import { filesystemOf } from '../src/store/sqlite/settings.js'
import { startLocalCluster, startLocalReplicated, type LocalCluster, type LocalReplicated } from '../scripts/redis-cluster.js'
import { freePort, gatewayConfig, startTestGateway, type RouteSpec, type StoreInput } from './helpers/gateway.js'
import { send } from './helpers/http.js'
import { until } from './helpers/wait.js'
import { runCli } from './helpers/run.js'

const PG_URL = process.env.PG_URL ?? 'postgres://postgres@127.0.0.1:5432/test'
const dir = mkdtempSync(join(tmpdir(), 'fg-doctor-'))
let redis: ChildProcess
let port = 0

/** The private Redis of the issue: no persistence, an evicting policy. */
beforeAll(async () => {
  port = await freePort()
  redis = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--maxmemory-policy', 'allkeys-lru', '--dir', dir, '--daemonize', 'no'], { stdio: 'ignore' })
  const state = await until(async () => {
    if (redis.exitCode !== null) return 'exited'
    const c = new Redis({ port, lazyConnect: true, retryStrategy: () => null, maxRetriesPerRequest: 0 })
    c.on('error', () => {})
    const up = await c.connect().then(() => c.ping()).then((p) => p === 'PONG', () => false)
    c.disconnect()
    return up && 'up'
  }, { timeoutMs: 10_000, intervalMs: 50, message: 'redis-server to answer PING' })
  if (state === 'exited') throw new Error(`redis-server did not start (exit ${redis.exitCode})`)
}, 20_000)
afterAll(async () => {
  if (redis && redis.exitCode === null) {
    const exited = new Promise((r) => redis.once('exit', r))
    redis.kill('SIGKILL')
    await exited
  }
  rmSync(dir, { recursive: true, force: true })
})

/** one fenced, idempotent route; nothing is forwarded in these tests */
const PAY: RouteSpec = { name: 'pay', path: '/pay/:a/*', upstream: 'http://127.0.0.1:9', fencing: { resource: 'acct:{param.a}' }, idempotency: {} }
/** The store config as the gateway reads it (validated, defaults filled in). */
const storeOf = (store: StoreInput) => parseConfig(gatewayConfig({ store, routes: [PAY] }), join(dir, 'x.yaml')).store
const find = (r: Awaited<ReturnType<typeof inspectStore>>, id: string) => r.findings.find((f) => f.id === id)!

/** Writes a config for the CLI. */
function configFile(name: string, store: StoreInput): string {
  const path = join(dir, `${name}.yaml`)
  writeFileSync(path, gatewayConfig({ store, routes: [PAY] }))
  return path
}
const cli = (...args: string[]) => runCli(args, { timeout: 20_000, env: { ...process.env, OTEL_SDK_DISABLED: 'true' } })

describe('redis without persistence and with an evicting policy', () => {
  test('inspectStore names every risk: no persistence (restart forgets every mark), the evicting policy (blocking), and the lone master is ok', async () => {
    const r = await inspectStore(storeOf({ kind: 'redis', url: `redis://127.0.0.1:${port}` }))
    expect(r.store).toBe('redis')
    expect(find(r, 'persistence')).toMatchObject({
      status: 'risk', setting: 'appendonly no, save ""',
      consequence: 'Redis runs without persistence: a restart forgets every high-water mark and record; the epoch marker will report it and fenced routes will answer 503 until accept-loss.',
    })
    expect(find(r, 'maxmemory-policy')).toMatchObject({ status: 'risk', blocking: true })
    expect(find(r, 'maxmemory-policy').setting).toMatch(/^maxmemory-policy allkeys-lru/)
    expect(find(r, 'maxmemory-policy').consequence).toMatch(/evicted mark lets a stale write through/)
    expect(find(r, 'replication')).toMatchObject({ status: 'ok', setting: 'role master, no replicas' })
    expect(r.refused.map((f) => f.id)).toEqual(['maxmemory-policy'])
    // accepted: still a risk, no longer refused
    const accepted = await inspectStore(storeOf({ kind: 'redis', url: `redis://127.0.0.1:${port}`, acceptRisks: ['maxmemory-policy'] }))
    expect(accepted.refused).toEqual([])
    expect(find(accepted, 'maxmemory-policy').status).toBe('risk')
  })

  test('fencegate doctor prints each finding with its consequence and exits 1 (the gateway would not start); --json is the same report', async () => {
    const file = configFile('evicting', { kind: 'redis', url: `redis://127.0.0.1:${port}` })
    const text = await cli('doctor', '--config', file)
    expect(text.status, text.stderr).toBe(1)
    expect(text.stdout).toMatch(/RISK +maxmemory-policy: maxmemory-policy allkeys-lru/)
    expect(text.stdout).toMatch(/RISK +persistence: appendonly no, save ""\n +Redis runs without persistence: a restart forgets every high-water mark and record/)
    expect(text.stdout).toMatch(/OK +replication: role master, no replicas/)
    expect(text.stdout).toContain('The gateway refuses to start with this store: maxmemory-policy')
    expect(text.stderr).toContain('store.acceptRisks')
    const json = await cli('doctor', '--config', file, '--json')
    expect(json.status).toBe(1)
    const r = JSON.parse(json.stdout)
    expect(r.findings.map((f: { id: string; status: string }) => `${f.id} ${f.status}`).sort()).toEqual(['clock ok', 'maxmemory-policy risk', 'persistence risk', 'replication ok'])
    expect(r.refused.map((f: { id: string }) => f.id)).toEqual(['maxmemory-policy'])
  })

  test('start-up is refused (exit 2, naming store.acceptRisks); with acceptRisks the gateway starts and logs one line naming the risks', async () => {
    const refused = await cli('--config', configFile('start-refused', { kind: 'redis', url: `redis://127.0.0.1:${port}` }))
    expect(refused.status).toBe(2)
    expect(refused.stderr).toMatch(/store: the redis store's own settings break a guarantee outright, so the gateway does not start: maxmemory-policy allkeys-lru/)
    expect(refused.stderr).toContain('store.acceptRisks: [maxmemory-policy]')

    const gw = await startTestGateway({ store: { kind: 'redis', url: `redis://127.0.0.1:${port}`, keyPrefix: `doctor-${port}`, acceptRisks: ['maxmemory-policy'] }, routes: [PAY] })
    try {
      const lines = gw.logs.map((l) => JSON.parse(l)).filter((l) => String(l.msg).startsWith('store settings'))
      expect(lines).toHaveLength(1)
      expect(lines[0]).toMatchObject({ level: 'warn', msg: 'store settings: 2 risks to the guarantees (fencegate doctor explains)', store: 'redis' })
      expect(lines[0].risks).toContain('Redis runs without persistence')
      expect(lines[0].risks).toContain('maxmemory-policy allkeys-lru')
      expect(lines[0].refused).toBeUndefined()
      // the claim of GET /audit names the store it runs on
      const audit = (await send(`${gw.adminUrl}/audit`)).json()
      const assumptions: string[] = audit.routes[0].claim.assumptions
      expect(assumptions.some((a) => a.startsWith('Measured on the live redis store (risk: appendonly no, save ""): Redis runs without persistence'))).toBe(true)
      expect(assumptions.some((a) => a.includes('maxmemory-policy allkeys-lru'))).toBe(true)
    } finally {
      await gw.close()
    }
  })

  test('fencegate audit (CLI, on the store) puts the findings in claim.assumptions', async () => {
    const file = configFile('audit', { kind: 'redis', url: `redis://127.0.0.1:${port}`, keyPrefix: `doctor-audit-${port}`, acceptRisks: ['maxmemory-policy'] })
    const r = await cli('audit', '--config', file, '--json')
    expect(r.status, r.stderr).toBe(0)
    const assumptions: string[] = JSON.parse(r.stdout).routes[0].claim.assumptions
    expect(assumptions.filter((a) => a.startsWith('Measured on the live redis store'))).toHaveLength(4)
  })

  test('with the setting fixed at run time (CONFIG SET), doctor sees it: noeviction is ok and nothing refuses', async () => {
    const c = new Redis({ port, lazyConnect: true })
    await c.connect()
    try {
      await c.config('SET', 'maxmemory-policy', 'noeviction')
      const r = await inspectStore(storeOf({ kind: 'redis', url: `redis://127.0.0.1:${port}` }))
      expect(find(r, 'maxmemory-policy')).toMatchObject({ status: 'ok' })
      expect(find(r, 'maxmemory-policy').consequence).toMatch(/never forgets/)
      expect(r.refused).toEqual([])
    } finally {
      await c.config('SET', 'maxmemory-policy', 'allkeys-lru')
      c.disconnect()
    }
  })
})

describe('redis with a replica, and a cluster', () => {
  let repl: LocalReplicated
  beforeAll(async () => { repl = await startLocalReplicated({ replicas: 1 }) }, 30_000)
  afterAll(async () => { await repl?.stop() })

  test('a primary with an asynchronous replica and store.replicas 0 is a risk; with store.replicas 1 ok; more than connected fails closed; the replica itself refuses writes', async () => {
    const url = repl.url
    const risky = await inspectStore(storeOf({ kind: 'redis', url }))
    expect(find(risky, 'replication')).toMatchObject({ status: 'risk', setting: 'role master, 1 replica connected, store.replicas 0' })
    expect(find(risky, 'replication').consequence).toMatch(/failover to a replica can lose the last writes/)
    expect(find(await inspectStore(storeOf({ kind: 'redis', url, replicas: 1 })), 'replication')).toMatchObject({ status: 'ok' })
    expect(find(await inspectStore(storeOf({ kind: 'redis', url, replicas: 2 })), 'replication').consequence).toMatch(/only 1 replica is connected: every write the gateway relies on fails closed/)
    const onReplica = await inspectStore(storeOf({ kind: 'redis', url: `redis://127.0.0.1:${repl.replicas[0].port}` }))
    expect(find(onReplica, 'replication')).toMatchObject({ status: 'risk' })
    expect(find(onReplica, 'replication').setting).toMatch(/^role replica of 127\.0\.0\.1:\d+$/)
  })

  test('a Redis Cluster: one finding per setting over every master, and the cluster\'s own state', async () => {
    let c: LocalCluster | undefined
    try {
      c = await startLocalCluster({ masters: 3, replicasPerMaster: 0 })
      const r = await inspectStore(storeOf({ kind: 'redis', cluster: true, url: c.url }))
      expect(find(r, 'cluster')).toMatchObject({ status: 'ok', setting: 'Redis Cluster, 3 masters, cluster_state ok' })
      expect(find(r, 'cluster').nodes).toHaveLength(3)
      expect(find(r, 'persistence')).toMatchObject({ status: 'risk', setting: 'appendonly no, save ""' })
      expect(find(r, 'persistence').nodes).toHaveLength(3)
      expect(claimSentences(r).find((s) => s.includes('appendonly no'))).toMatch(/, on 3 masters\): Redis runs without persistence/)
    } finally {
      await c?.stop()
    }
  }, 40_000)
})

describe('postgres and sqlite', () => {
  test('postgres: a primary with synchronous_commit on, fsync on, no standby: every finding ok', async () => {
    const r = await inspectStore(storeOf({ kind: 'postgres', url: PG_URL }))
    expect(r.findings.map((f) => f.id).sort()).toEqual(['clock', 'fsync', 'recovery', 'standbys', 'synchronous_commit'])
    expect(find(r, 'recovery')).toMatchObject({ status: 'ok', setting: 'pg_is_in_recovery() false' })
    expect(find(r, 'fsync').status).toBe('ok')
    expect(find(r, 'synchronous_commit').setting).toMatch(/^synchronous_commit (on|local|remote_write|remote_apply)$/)
    expect(r.refused).toEqual([])
  })

  test('postgres: synchronous_commit off for the connection (a role or database setting) is a risk', async () => {
    const r = await inspectStore(storeOf({ kind: 'postgres', url: `${PG_URL}?options=-c%20synchronous_commit%3Doff` }))
    expect(find(r, 'synchronous_commit')).toMatchObject({ status: 'risk', setting: 'synchronous_commit off' })
    expect(find(r, 'synchronous_commit').consequence).toMatch(/answers a commit before it is on disk/)
  })

  test('sqlite: the opened store\'s own pragmas (WAL, synchronous full: ok), and the filesystem', async () => {
    const path = join(dir, 'fg.db')
    const s = new SqliteStore({ path, synchronous: 'full', reapIntervalMs: 0 })
    try {
      const r = await inspectStore(storeOf({ kind: 'sqlite', path, synchronous: 'full' }), s)
      expect(find(r, 'journal_mode')).toMatchObject({ status: 'ok', setting: 'journal_mode wal' })
      expect(find(r, 'synchronous')).toMatchObject({ status: 'ok', setting: 'synchronous full' })
      expect(find(r, 'filesystem').setting).toBe(`file on ${filesystemOf(path).type}${filesystemOf(path).mount ? ` on ${filesystemOf(path).mount}` : ''}`)
    } finally {
      await s.close()
    }
    // full by default; normal only where store.acceptRisks names it, and still a risk then
    expect(find(await inspectStore(storeOf({ kind: 'sqlite', path })), 'synchronous')).toMatchObject({ status: 'ok', setting: 'synchronous full (as configured; the store was not opened)' })
    const normal = await inspectStore(storeOf({ kind: 'sqlite', path, synchronous: 'normal', acceptRisks: ['synchronous'] }))
    expect(find(normal, 'synchronous')).toMatchObject({ status: 'risk', setting: 'synchronous normal (as configured; the store was not opened)' })
    expect(find(normal, 'synchronous').consequence).toMatch(/power loss/)
  })

  test.runIf(existsSync('/dev/shm') && filesystemOf('/dev/shm/x').type === 'tmpfs')('sqlite: a file on tmpfs is a risk: a reboot forgets every mark, unnoticed', async () => {
    const r = await inspectStore(storeOf({ kind: 'sqlite', path: '/dev/shm/fencegate-doctor-test/fg.db' }))
    expect(find(r, 'filesystem')).toMatchObject({ status: 'risk', setting: 'file on tmpfs on /dev/shm' })
    expect(find(r, 'filesystem').consequence).toMatch(/reboot empties it/)
  })

  test('memory: not durable, not shared, bounded by maxRecords; each accepted risk only on the store kind it belongs to', async () => {
    const r = await inspectStore(storeOf({ kind: 'memory', maxRecords: 500 }))
    expect(r.findings).toEqual([
      expect.objectContaining({ id: 'durability', status: 'risk' }),
      expect.objectContaining({ id: 'maxRecords', status: 'unknown', setting: 'store.maxRecords 500' }),
      expect.objectContaining({ id: 'clock', status: 'ok', setting: 'this process\'s clock' }),
    ])
    expect(find(r, 'maxRecords').consequence).toMatch(/a request with a new key is refused with 503/)
    expect(() => storeOf({ kind: 'sqlite', acceptRisks: ['maxmemory-policy'] })).toThrow(/store\.acceptRisks\[0\]: maxmemory-policy is a Redis setting/)
    expect(() => storeOf({ kind: 'redis', url: `redis://127.0.0.1:${port}`, acceptRisks: ['maxRecords'] })).toThrow(/store\.acceptRisks\[0\]: maxRecords is a memory store limit: only with store\.kind memory, not redis/)
    expect(() => storeOf({ kind: 'redis', url: `redis://127.0.0.1:${port}`, acceptRisks: ['persistence' as 'maxmemory-policy'] })).toThrow(/store\.acceptRisks\[0\]: must be one of maxmemory-policy, maxRecords, maxAttempts, synchronous, not "persistence"/)
  })
})
