// A Redis Cluster failover that loses acknowledged writes is state loss (contract §3): a private
// cluster of 6 nodes (3 masters, a replica each, cluster-node-timeout 1.5 s, scripts/redis-cluster.ts),
// one gateway per case. The replication stream from a master to its replica is cut the way a
// network loses it: the replica is stopped (SIGSTOP) and the master drops its link (CLIENT KILL
// TYPE replica: the stopped replica cannot reconnect), writes are answered by the master alone,
// the master is killed (SIGKILL), and the replica resumes and is promoted without those writes.
// First a slot that went back without a failover: its write sequence key lowered by hand.
import { randomUUID } from 'node:crypto'
import { afterAll, beforeAll, describe, expect, test } from 'vitest'
import { startLocalCluster, type LocalCluster } from '../../scripts/redis-cluster.js'
import { keySlot, RedisStore } from '../../src/store/redis/index.js'
import { startTestGateway, type TestGateway } from '../helpers/gateway.js'
import { startUpstream, type Upstream } from '../helpers/upstream.js'
import { expectProblem, metric, metrics, post, send } from '../helpers/http.js'
import { until } from '../helpers/wait.js'

const run = `fgl-${randomUUID().slice(0, 8)}`
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
})

const gateway = async (prefix: string, replicas: number) => {
  const g = await startTestGateway(`store:
  kind: redis
  cluster: true
  url: ${c.url}
  keyPrefix: ${prefix}
  timeout: 1s
  replicas: ${replicas}
  replicasTimeout: 400ms
routes:
  - name: ledger
    match:
      path: /ledger/:res/*
    upstream:
      url: ${up.url}
    fencing:
      resource: "{param.res}"
    idempotency:
      required: true
      scope: ""
`)
  gateways.push(g)
  return g
}
const write = (g: TestGateway, res: string, token: bigint, k: string) =>
  post(`${g.url}/ledger/${res}/charge`, { res }, { 'fencing-token': String(token), 'idempotency-key': k })
const calls = (res: string) => up.count(`/ledger/${res}/`)
const markSlot = (prefix: string, res: string) => keySlot(`{fg:${prefix}:f:${res}}`)
const recordSlot = (prefix: string, k: string) => keySlot(`{fg:${prefix}:r:ledger::${k}}`)
/** A name `make(i)` whose slot `master` serves. */
async function onMaster(master: number, slotOf: (name: string) => number, make: (i: number) => string): Promise<string> {
  for (let i = 0; ; i++) if (await c.masterOf(slotOf(make(i))) === master) return make(i)
}
/** A master with a replica connected that `used` does not hold. */
async function masterWithReplica(used: number[]): Promise<number> {
  for (const m of await c.masters()) {
    if (!used.includes(m) && /^connected_slaves:[1-9]/m.test(String(await c.command(m, 'INFO', 'replication')))) return m
  }
  throw new Error('no master with a replica left')
}
const used: number[] = []
/** The replica of `master` (its port), from INFO replication. */
async function replicaOf(master: number): Promise<number> {
  const info = String(await c.command(master, 'INFO', 'replication'))
  return Number(/^slave0:.*port=(\d+)/m.exec(info)![1])
}
const signal = (port: number, s: NodeJS.Signals) => c.nodes.find((n) => n.port === port)!.child.kill(s)
/** Stops `replica` and cuts its link from `master`: what the master answers from now on, the replica never gets. */
async function cut(master: number, replica: number): Promise<void> {
  signal(replica, 'SIGSTOP')
  expect(Number(await c.command(master, 'CLIENT', 'KILL', 'TYPE', 'replica'))).toBeGreaterThanOrEqual(1)
}
/** Kills `master` with its replica cut off (see the top), then waits for the promotion. */
async function killCut(master: number, replica: number, slot: number): Promise<void> {
  await c.kill(master)
  signal(replica, 'SIGCONT')
  await until(async () => (await c.masterOf(slot)) === replica, { timeoutMs: 20_000, intervalMs: 200, message: 'the replica to be promoted' })
}
const lossCount = async (g: TestGateway) => metric(await metrics(g.adminUrl), 'fencegate_store_state_losses_total', { store: 'redis' })

/** The keys of `master` that match `pattern` (SCAN). */
async function keysOn(master: number, pattern: string): Promise<string[]> {
  const out: string[] = []
  let cursor = '0'
  do {
    const [next, keys] = (await c.command<[string, string[]]>(master, 'SCAN', cursor, 'MATCH', pattern, 'COUNT', 1000))!
    out.push(...keys)
    cursor = next
  } while (cursor !== '0')
  return out
}

describe('a Redis Cluster slot that went back in time (no failover)', () => {
  test('its sequence key below what the gateway saw: the next write there is refused unwritten (503 store-state-lost), the loss noted; after accept-loss writes pass again', async () => {
    const p = `${run}-seq`
    const g = await gateway(p, 0)
    const res = 'R1'
    const slot = markSlot(p, res)
    const master = (await c.masterOf(slot))!
    expect((await write(g, res, 100n, 'k-100')).status).toBe(201)
    // the slot's write sequence (`{fg:<prefix>:q:<n>}`), lowered as a failover to a lagging replica leaves it
    const seq = (await keysOn(master, `{fg:${p}:q:*`)).filter((k) => keySlot(k) === slot)
    expect(seq).toHaveLength(1)
    expect(Number(await c.command(master, 'DECR', seq[0]))).toBeGreaterThanOrEqual(0)
    const applied = calls(res)

    expectProblem(await write(g, res, 200n, 'k-200'), { status: 503, type: 'store-state-lost' })
    expect(calls(res)).toBe(applied)
    // nothing written: the mark stays, no record for the refused key
    expect(await c.command(master, 'GET', `{fg:${p}:f:${res}}`)).toBe('100')
    expect(await c.command(await c.masterOf(recordSlot(p, 'k-200')) ?? master, 'EXISTS', `{fg:${p}:r:ledger::k-200}`)).toBe(0)
    expect(g.logs.join('')).toMatch(new RegExp(`store went back in time.*sequence \\d+ after \\d+ was seen in slot ${slot} \\(master 127\\.0\\.0\\.1:${master}\\)`))
    expect(await lossCount(g)).toBe(1)
    const ready = await until(async () => { const r = await send(`${g.adminUrl}/readyz`); return r.status === 503 && r }, { timeoutMs: 5000, intervalMs: 100, message: '/readyz to report the loss' })
    expect(JSON.stringify(ready.json())).toMatch(new RegExp(`sequence \\d+ after \\d+ was seen in slot ${slot}\\b`))
    expectProblem(await write(g, res, 200n, 'k-200'), { status: 503, type: 'store-state-lost' })
    expect(calls(res)).toBe(applied)

    const operator = await RedisStore.open({ url: c.url, cluster: true, keyPrefix: p })
    try {
      await operator.acceptLoss()
    } finally {
      await operator.close()
    }
    await until(async () => (await send(`${g.adminUrl}/readyz`)).status === 200, { timeoutMs: 5000, intervalMs: 100, message: '/readyz to serve again' })
    // the slot's sequence is followed afresh: writes there pass again, the mark kept
    expect((await write(g, res, 200n, 'k-200')).status).toBe(201)
    expect((await write(g, res, 150n, 'k-150')).status).toBe(412)
    expect((await write(g, res, 300n, 'k-300')).status).toBe(201)
    expect(calls(res)).toBe(applied + 2)
    expect(await lossCount(g)).toBe(1)
  }, 60_000)
})

describe('a Redis Cluster failover', () => {
  test('replicas 0, the stream cut: the newer token and K1 the promoted replica lacks are state loss, 503 store-state-lost, nothing forwarded again', async () => {
    const p = `${run}-cut`
    const g = await gateway(p, 0)
    const m = await masterWithReplica(used)
    used.push(m)
    const res = await onMaster(m, (r) => markSlot(p, r), (i) => `F${i}`)
    const k1 = await onMaster(m, (k) => recordSlot(p, k), (i) => `K1-${i}`)
    expect((await write(g, res, 100n, 'k-100')).status).toBe(201)
    const replica = await replicaOf(m)
    await cut(m, replica)
    expect((await write(g, res, 200n, k1)).status).toBe(201)
    const applied = calls(res)
    await killCut(m, replica, markSlot(p, res))

    const stale = await write(g, res, 150n, 'k-150')
    expect([412, 503]).toContain(stale.status)
    if (stale.status === 503) expectProblem(stale, { status: 503, type: 'store-state-lost' })
    const again = await write(g, res, 200n, k1)
    if (again.status !== 201 || again.headers['idempotent-replayed'] !== 'true') expectProblem(again, { status: 503, type: 'store-state-lost' })
    expect(calls(res)).toBe(applied)
    const m1 = await metrics(g.adminUrl)
    expect(metric(m1, 'fencegate_store_state_lost', { store: 'redis' })).toBe(1)
    expect(metric(m1, 'fencegate_store_state_losses_total', { store: 'redis' })).toBe(1)
    const ready = await send(`${g.adminUrl}/readyz`)
    expect(ready.status).toBe(503)
    // the note names the node and the slot it saw go back — or, when the epoch's copy in the
    // slots' block was first written after the cut, the promoted replica lacks it: found as such
    expect(JSON.stringify(ready.json())).toMatch(new RegExp(`slot (${markSlot(p, res)}|${recordSlot(p, k1)})\\b|127\\.0\\.0\\.1:${replica}\\b|the epoch marker is missing`))
    // and it stays closed: neither is forwarded on a later try
    expect((await write(g, res, 150n, 'k-150b')).status).toBe(503)
    expect((await write(g, res, 200n, k1)).status).toBe(503)
    expect(calls(res)).toBe(applied)
    // the old master back, as the new one's replica, for the cases below
    await c.restart(m)
    await c.waitOk(15_000)
    await c.waitReplicasInSync(15_000)
  }, 60_000)

  test('replicas 0, the replica caught up before the kill: no alarm; the newer token still holds (412) and K1 replays', async () => {
    const p = `${run}-intact`
    const g = await gateway(p, 0)
    const m = await masterWithReplica(used)
    used.push(m)
    const res = await onMaster(m, (r) => markSlot(p, r), (i) => `F${i}`)
    const k1 = await onMaster(m, (k) => recordSlot(p, k), (i) => `K1-${i}`)
    expect((await write(g, res, 200n, k1)).status).toBe(201)
    const replica = await replicaOf(m)
    // caught up: the replica's offset is the master's
    await until(async () => {
      const info = String(await c.command(m, 'INFO', 'replication'))
      return Number(/^slave0:.*offset=(\d+)/m.exec(info)?.[1]) === Number(/^master_repl_offset:(\d+)/m.exec(info)?.[1])
    }, { timeoutMs: 5000, intervalMs: 50, message: 'the replica to catch up' })
    const applied = calls(res)
    await c.kill(m)
    await until(async () => (await c.masterOf(markSlot(p, res))) === replica, { timeoutMs: 20_000, intervalMs: 200, message: 'the replica to be promoted' })
    // served again once the promoted master settled (503 store-unavailable meanwhile)
    const stale = await until(async () => { const r = await write(g, res, 150n, 'k-150'); return r.status !== 503 && r }, { timeoutMs: 20_000, intervalMs: 200, message: 'the gateway to serve the promoted master (the settle hold: 1 s + 3 × 2 × store.timeout)' })
    expect(stale.status).toBe(412)
    const again = await write(g, res, 200n, k1)
    expect([again.status, again.headers['idempotent-replayed']]).toEqual([201, 'true'])
    expect(calls(res)).toBe(applied)
    expect(await lossCount(g)).toBe(0)
    expect((await send(`${g.adminUrl}/readyz`)).status).toBe(200)
    await c.restart(m)
    await c.waitOk(15_000)
    await c.waitReplicasInSync(15_000)
  }, 60_000)

  test('replicas 1, the stream cut: nothing acknowledged is lost; the promoted shard without a replica is named on /readyz and its refused writes counted', async () => {
    const p = `${run}-acked`
    const g = await gateway(p, 1)
    const m = await masterWithReplica(used)
    used.push(m)
    const res = await onMaster(m, (r) => markSlot(p, r), (i) => `F${i}`)
    const k1 = await onMaster(m, (k) => recordSlot(p, k), (i) => `K1-${i}`)
    // the previous case's old master may still be syncing as a replica: its WAIT answers once it has
    await until(async () => (await write(g, res, 100n, 'k-100')).status === 201, { timeoutMs: 15_000, intervalMs: 250, message: 'the first write to be acknowledged by a replica' })
    const replica = await replicaOf(m)
    await cut(m, replica)
    const applied = calls(res)
    // the replica cannot acknowledge: 503, nothing forwarded
    expect((await write(g, res, 200n, k1)).status).toBe(503)
    expect(calls(res)).toBe(applied)
    await killCut(m, replica, markSlot(p, res))
    // what was acknowledged (100) holds; the new master has no replica: its writes are refused
    const low = await until(async () => { const r = await write(g, res, 50n, 'k-50'); return r.status !== 503 && r }, { timeoutMs: 5000, intervalMs: 200, message: 'a stale token to be refused' }).catch(() => undefined)
    if (low) expect(low.status).toBe(412)
    expect((await write(g, res, 200n, k1)).status).toBe(503)
    expect(calls(res)).toBe(applied)
    const ready = await until(async () => { const r = await send(`${g.adminUrl}/readyz`); return r.json().replicas && r }, { timeoutMs: 5000, intervalMs: 200, message: '/readyz to name the shard' })
    expect(ready.status).toBe(200)
    expect(ready.json().replicas.join(' ')).toMatch(new RegExp(`shard 127\\.0\\.0\\.1:${replica} \\(slots [0-9-, ]+\\) has 0 of 1 replica connected`))
    const m1 = await metrics(g.adminUrl)
    expect(metric(m1, 'fencegate_store_writes_refused_total', { store: 'redis', reason: 'replica_shortfall' })).toBeGreaterThanOrEqual(2)
    expect(metric(m1, 'fencegate_store_state_losses_total', { store: 'redis' })).toBe(0)
  }, 60_000)
})
