// `fencegate doctor` on a Redis Cluster (run as the CLI, dist/: npm run build first): one `shard`
// finding per master — its address and slots, its replicas and how far behind they are, whether
// store.replicas covers them, and what a failover would cost. A private cluster of 6 nodes (3
// masters, a replica each, cluster-node-timeout 1.5 s, scripts/redis-cluster.ts), one gateway
// beside it writing through the same store; with store.replicas 1, one master is killed (SIGKILL)
// and its replica promoted without a replica of its own.
import { randomUUID } from 'node:crypto'
import { rmSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, test } from 'vitest'
import { startLocalCluster, type LocalCluster } from '../scripts/redis-cluster.js'
import { keySlot } from '../src/store/redis/index.js'
import { gatewayConfig, startTestGateway, tempDir, type GatewaySpec, type TestGateway } from './helpers/gateway.js'
import { startUpstream, type Upstream } from './helpers/upstream.js'
import { post, send } from './helpers/http.js'
import { runCli } from './helpers/run.js'
import { until } from './helpers/wait.js'

const run = `fgd-${randomUUID().slice(0, 8)}`
const dir = tempDir('fg-doctor-cluster-')
let c: LocalCluster
let up: Upstream
const gateways: TestGateway[] = []

beforeAll(async () => {
  c = await startLocalCluster({ masters: 3, replicasPerMaster: 1, nodeTimeoutMs: 1500 })
  up = await startUpstream()
}, 40_000)
afterAll(async () => {
  for (const g of gateways) await g.close().catch(() => {})
  await up?.close()
  await c?.stop()
  rmSync(dir, { recursive: true, force: true })
})

interface Shard { master: string; slots: [number, number][]; offset: number; wanted: number; covered: boolean; replicas: { node: string; state: string; offset: number; behindBytes: number; lagSeconds: number }[] }
interface Finding { id: string; status: string; setting: string; consequence: string; nodes?: string[]; shard?: Shard }

const spec = (prefix: string, replicas: number): GatewaySpec => ({
  store: { kind: 'redis', cluster: true, url: c.url, keyPrefix: prefix, timeout: '1s', replicas, replicasTimeout: '400ms' },
  routes: [{ name: 'ledger', path: '/ledger/:res/*', upstream: up.url, fencing: { resource: '{param.res}' }, idempotency: { required: true, scope: '' } }],
})
/** A gateway on the cluster and the config file `fencegate doctor` reads. */
async function setup(name: string, replicas: number): Promise<{ g: TestGateway; file: string; prefix: string }> {
  const prefix = `${run}-${name}`
  const file = join(dir, `${name}.yaml`)
  writeFileSync(file, gatewayConfig(spec(prefix, replicas)))
  const g = await startTestGateway(spec(prefix, replicas))
  gateways.push(g)
  return { g, file, prefix }
}
const cli = (...args: string[]) => runCli(args, { timeout: 20_000, env: { ...process.env, OTEL_SDK_DISABLED: 'true' } })
/** `fencegate doctor --json`: exit code and its shard findings. */
async function doctorJson(file: string): Promise<{ status: number | null; shards: Finding[]; stderr: string }> {
  const r = await cli('doctor', '--config', file, '--json')
  const findings: Finding[] = r.stdout ? JSON.parse(r.stdout).findings : []
  return { status: r.status, shards: findings.filter((f) => f.id === 'shard'), stderr: r.stderr }
}
const addr = (port: number) => `127.0.0.1:${port}`
const slotCount = (shards: Finding[]) => shards.flatMap((f) => f.shard!.slots).reduce((n, [a, b]) => n + b - a + 1, 0)
/** The replica of `master` (its port), from INFO replication. */
async function replicaOf(master: number): Promise<number> {
  return Number(/^slave0:.*port=(\d+)/m.exec(String(await c.command(master, 'INFO', 'replication')))![1])
}
const signal = (port: number, s: NodeJS.Signals) => c.nodes.find((n) => n.port === port)!.child.kill(s)
/** A resource whose high-water mark lives on `master`. */
async function resourceOn(master: number, prefix: string): Promise<string> {
  for (let i = 0; ; i++) if (await c.masterOf(keySlot(`{fg:${prefix}:f:F${i}}`)) === master) return `F${i}`
}
const write = (g: TestGateway, res: string, token: number, k: string) =>
  post(`${g.url}/ledger/${res}/charge`, { res }, { 'fencing-token': String(token), 'idempotency-key': k })

describe('fencegate doctor on a Redis Cluster', () => {
  test('store.replicas 0: every master is a shard at risk, named with its slots and its replica; a replica cut off shows the bytes a failover would lose, and what that costs (state loss until accept-loss)', async () => {
    const { g, file, prefix } = await setup('r0', 0)
    const masters = (await c.masters()).sort((a, b) => a - b)
    const first = await doctorJson(file)
    // risks are reported, not failed on
    expect(first.status, first.stderr).toBe(0)
    expect(first.shards.map((f) => f.nodes![0]).sort()).toEqual(masters.map(addr))
    expect(slotCount(first.shards)).toBe(16384)
    for (const f of first.shards) {
      expect(f.status).toBe('risk')
      expect(f.shard).toMatchObject({ wanted: 0, covered: true })
      expect(f.shard!.replicas).toHaveLength(1)
      expect(f.shard!.replicas[0].state).toBe('online')
      expect(f.setting).toMatch(new RegExp(`^master ${f.shard!.master}, slots [0-9-, ]+: 1 replica connected \\(127\\.0\\.0\\.1:\\d+ online, \\d+ bytes behind, lag \\d+ s\\), store\\.replicas 0$`))
      expect(f.consequence).toMatch(/a failover of this shard loses the writes its master acknowledged that the promoted replica had not received/)
      expect(f.consequence).toContain('503 store-state-lost on fenced and idempotent routes until `fencegate store accept-loss`')
    }

    // the replica of one master stops taking the stream; writes acknowledged there are what a failover would lose now
    const m = masters[0]
    const replica = await replicaOf(m)
    const res = await resourceOn(m, prefix)
    signal(replica, 'SIGSTOP')
    try {
      for (let t = 1; t <= 5; t++) expect((await write(g, res, t, `k-${t}`)).status).toBe(201)
      const behind = await doctorJson(file)
      const shard = behind.shards.find((f) => f.nodes![0] === addr(m))!
      expect(shard.shard!.replicas[0]).toMatchObject({ node: addr(replica) })
      const bytes = shard.shard!.replicas[0].behindBytes
      expect(bytes).toBeGreaterThan(0)
      expect(shard.consequence).toContain(`(${bytes} bytes at this reading)`)
      // the text form: the shard's line, with its slots, its replica and the cost
      const text = await cli('doctor', '--config', file)
      expect(text.status, text.stderr).toBe(0)
      expect(text.stdout).toMatch(new RegExp(`RISK +shard: master 127\\.0\\.0\\.1:${m}, slots [0-9-, ]+: 1 replica connected \\(127\\.0\\.0\\.1:${replica} online, [1-9]\\d* bytes behind, lag \\d+ s\\), store\\.replicas 0  \\(127\\.0\\.0\\.1:${m}\\)\\n +Replication is asynchronous`))
    } finally {
      signal(replica, 'SIGCONT')
    }
    await until(async () => (await doctorJson(file)).shards.every((f) => f.shard!.replicas.every((r) => r.behindBytes === 0)), { timeoutMs: 15_000, intervalMs: 300, message: 'the replica to catch up' })
  }, 60_000)

  test('store.replicas 1 and a replica each: every shard covered, nothing acknowledged lost to a failover; after a master is killed, the promoted shard without a replica is named as /readyz names it, until the old master rejoins as its replica', async () => {
    const { g, file } = await setup('r1', 1)
    const covered = await doctorJson(file)
    expect(covered.status, covered.stderr).toBe(0)
    expect(covered.shards).toHaveLength(3)
    for (const f of covered.shards) {
      expect(f).toMatchObject({ status: 'ok', shard: { wanted: 1, covered: true } })
      expect(f.setting).toMatch(/: 1 replica connected \(.*\), store\.replicas 1$/)
      expect(f.consequence).toMatch(/^Every write the gateway relies on waits until 1 replica of this shard has it \(WAIT\): an asynchronous failover to its replica loses nothing acknowledged\.$/)
    }

    const m = (await c.masters()).sort((a, b) => a - b)[1]
    const replica = await replicaOf(m)
    const slot = covered.shards.find((f) => f.nodes![0] === addr(m))!.shard!.slots[0][0]
    await c.kill(m)
    await until(async () => (await c.masterOf(slot)) === replica, { timeoutMs: 20_000, intervalMs: 200, message: 'the replica to be promoted' })
    await c.waitOk(15_000)
    const ready = await until(async () => { const r = await send(`${g.adminUrl}/readyz`); return r.json().replicas && r }, { timeoutMs: 10_000, intervalMs: 200, message: '/readyz to name the shard' })
    const named: string[] = ready.json().replicas
    expect(named).toHaveLength(1)
    const short = await doctorJson(file)
    expect(short.status, short.stderr).toBe(0)
    const lone = short.shards.find((f) => f.nodes![0] === addr(replica))!
    expect(lone).toMatchObject({ status: 'risk', shard: { wanted: 1, covered: false, replicas: [] } })
    expect(lone.setting).toMatch(new RegExp(`^master 127\\.0\\.0\\.1:${replica}, slots [0-9-, ]+: no replica, store\\.replicas 1$`))
    // the same words as /readyz, then what it costs
    expect(lone.consequence.startsWith(`${named[0]}. Every fenced or idempotent request whose mark or record lives on these slots answers 503 store-unavailable`)).toBe(true)
    expect(short.shards.filter((f) => f !== lone).map((f) => f.status)).toEqual(['ok', 'ok'])

    // the way out (docs/runbook.md): the old master back, as the new one's replica
    await c.restart(m)
    await c.waitReplicasInSync(15_000)
    const back = await until(async () => { const r = await doctorJson(file); return r.shards.every((f) => f.status === 'ok') && r }, { timeoutMs: 15_000, intervalMs: 300, message: 'every shard to be covered again' })
    expect(back.shards.find((f) => f.nodes![0] === addr(replica))!.shard!.replicas.map((r) => r.node)).toEqual([addr(m)])
  }, 90_000)
})
