// The history checker (./history.ts) across a Redis Cluster failover that loses writes: one private
// cluster of 6 nodes (3 masters, a replica each, cluster-node-timeout 1.5 s, scripts/redis-cluster.ts),
// two gateways on it (fencing.serialize: store, unknownOutcome: reject), workers writing through
// both. Under load, the replication stream from one master to its replica is cut (the replica
// stopped, its link dropped: what the master answers from then on the replica never gets), the
// master is killed (SIGKILL), the replica resumes and is promoted, and the old master is started
// again (it rejoins as the new master's replica). With store.replicas 0 the writes the master
// alone had are gone: the gateways see it as state loss and answer 503 store-state-lost; with
// store.replicas 1 none of them was acknowledged (503 while the replica could not acknowledge,
// and while the promoted shard has no replica), and the shard is served again once it has one.
// 503s are allowed; the checker forbids a stale write applied, a key applied twice, a replay that
// differs, an answer without its effect.
// Reproduce a failure with the seed it prints: HOSTILE_SEED=<seed> npx vitest run test/hostile/cluster-failover-history.test.ts
// (HOSTILE_DEBUG=1 also prints the attempts, effects and gateway log lines of every key in a violation).
import { randomUUID } from 'node:crypto'
import { afterAll, beforeAll, describe, expect, onTestFailed, test } from 'vitest'
import { Agent } from 'undici'
import { startLocalCluster, type LocalCluster } from '../../scripts/redis-cluster.js'
import { keySlot } from '../../src/store/redis/index.js'
import { startTestGateway, type GatewaySpec, type TestGateway } from '../helpers/gateway.js'
import { metric, metrics } from '../helpers/http.js'
import { sleep, until } from '../helpers/wait.js'
import { Rng, Leases, hostileSeed, startLedger, runWorkload, sendAttempt, checkHistory, formatReport, type Attempt, type Effect, type FaultSpec, type Ledger, type WorkloadOptions } from './history.js'

const run = randomUUID().replaceAll('-', '').slice(0, 8)
const seed = hostileSeed()
const root = new Rng(seed)
const RESOURCES = 6

// the ledger applies every write as soon as it has read it; `slow` holds the answer back after
const FAULTS: FaultSpec[] = [
  { name: 'none', weight: 70 },
  { name: 'slow', weight: 15, ms: [5, 80] },
  { name: 'reset-after', weight: 4 },
  { name: 'reset-before', weight: 4 },
  { name: 'busy', weight: 5 },
  { name: 'fail', weight: 2 },
]

let c: LocalCluster
const agents: Agent[] = []
beforeAll(async () => { c = await startLocalCluster({ masters: 3, replicasPerMaster: 1, nodeTimeoutMs: 1500 }) }, 40_000)
afterAll(async () => {
  await Promise.all(agents.map((a) => a.close()))
  await c?.stop()
})

const spec = (prefix: string, replicas: number, ledger: string): GatewaySpec => ({
  store: { kind: 'redis', cluster: true, url: c.url, keyPrefix: prefix, timeout: '1s', replicas, replicasTimeout: '400ms' },
  routes: [{
    name: 'ledger', path: '/ledger/:res/*', upstream: { url: ledger, timeout: '1s' },
    fencing: { resource: '{param.res}', serialize: 'store' },
    idempotency: { required: true, scope: '', lease: '1s', unknownOutcome: 'reject' },
  }],
})
const signal = (port: number, s: NodeJS.Signals) => c.nodes.find((n) => n.port === port)!.child.kill(s)
/** The replica of `master` (its port), from INFO replication. */
async function replicaOf(master: number): Promise<number> {
  return Number(/^slave0:.*port=(\d+)/m.exec(String(await c.command(master, 'INFO', 'replication')))![1])
}
/** The master holding the high-water marks of the most workload resources, and those marks' slots. */
async function busiestMaster(prefix: string): Promise<{ master: number; slots: number[] }> {
  const by = new Map<number, number[]>()
  for (let i = 1; i <= RESOURCES; i++) {
    const slot = keySlot(`{fg:${prefix}:f:r${i}}`)
    const m = (await c.masterOf(slot))!
    by.set(m, [...by.get(m) ?? [], slot])
  }
  const [master, slots] = [...by].sort((a, b) => b[1].length - a[1].length)[0]
  return { master, slots }
}
const counter = async (g: TestGateway, name: string) => metric(await metrics(g.adminUrl), name, { store: 'redis' })

/**
 * While the workload runs: the cut, 1.5 s of writes, the kill (`onKill`: the workload takes no
 * new key from then on, its workers finish theirs), and the promotion.
 */
async function failover(ledger: Ledger, { master, slots }: { master: number; slots: number[] }, onKill: () => void): Promise<{ replica: number; beforeCut: number }> {
  await until(() => ledger.effects.length >= 40, { timeoutMs: 15_000, intervalMs: 20, message: 'the workload to reach the upstream' })
  const replica = await replicaOf(master)
  const beforeCut = ledger.effects.length
  signal(replica, 'SIGSTOP')
  await c.command(master, 'CLIENT', 'KILL', 'TYPE', 'replica')
  // writes answered by the master alone (replicas 0), or refused for want of an acknowledgement (replicas 1)
  await sleep(1500)
  await c.kill(master)
  onKill()
  signal(replica, 'SIGCONT')
  await until(async () => (await c.masterOf(slots[0])) === replica, { timeoutMs: 20_000, intervalMs: 200, message: 'the replica to be promoted' })
  return { replica, beforeCut }
}

describe('the history across a Redis Cluster failover that loses writes, two gateways', () => {
  for (const replicas of [0, 1]) test(`store.replicas ${replicas}: no stale write applied, no key applied twice, replays identical, one effect per 2xx`, { timeout: 60_000 }, async () => {
    onTestFailed(() => console.error(`HOSTILE_SEED=${seed} (store.replicas ${replicas})`))
    const prefix = `fgfh-${run}-${replicas}`
    const ledger = await startLedger()
    const gws = [await startTestGateway(spec(prefix, replicas, ledger.url)), await startTestGateway(spec(prefix, replicas, ledger.url))]
    const agent = new Agent({ connections: 16, headersTimeout: 15_000, bodyTimeout: 15_000 })
    agents.push(agent)
    try {
      const rng = root.fork(replicas)
      const leases = new Leases(800)
      const workload = (keyPrefix: string, r: Rng, until: () => boolean): WorkloadOptions => ({
        url: gws.map((g) => g.url), routes: ['ledger'], resources: RESOURCES, workers: 6, ops: 30, until, rng: r, leases, faults: FAULTS,
        pAbort: 0.03, pPause: 0.04, pLostAck: 0.1, pRelease: 0.8, pDouble: 0.05, maxAttempts: 10, keyDeadlineMs: 4000, keyPrefix, dispatcher: agent,
      })
      const target = await busiestMaster(prefix)
      const markSlot = (resource: string) => keySlot(`{fg:${prefix}:f:${resource.slice('ledger:'.length)}}`)
      let killed = false
      const failing = failover(ledger, target, () => { killed = true }).finally(() => { killed = true })
      const history = await runWorkload(workload(`${replicas}-${run}`, rng, () => killed))
      const f = await failing

      // the clients come back once the replica took over: each key the upstream applied since the
      // cut is sent again as it was (a retry after a lost answer), and each resource written since
      // gets the highest token it had before the cut, when that is below its highest now
      const since = ledger.effects.slice(f.beforeCut)
      const again: Attempt[] = []
      for (const [n, e] of [...new Map(since.map((e) => [e.key, e])).values()].entries()) {
        const attempt = Math.max(0, ...history.filter((a) => a.key === e.key).map((a) => a.attempt)) + 1
        again.push(await sendAttempt(gws[n % 2].url, { worker: -1, route: 'ledger', res: e.resource.slice('ledger:'.length), token: e.token, key: e.key, body: e.body, attempt, fault: 'none' }, agent))
      }
      const top = (effects: Effect[], resource: string) => effects.filter((e) => e.resource === resource).reduce((h, e) => (BigInt(e.token) > h ? BigInt(e.token) : h), -1n)
      const stale: Attempt[] = []
      for (const resource of new Set(since.map((e) => e.resource))) {
        const before = top(ledger.effects.slice(0, f.beforeCut), resource)
        if (before < 0n || before >= top(ledger.effects, resource)) continue
        stale.push(await sendAttempt(gws[1].url, { worker: -1, route: 'ledger', res: resource.slice('ledger:'.length), token: String(before), key: `stale-${resource}-${run}`, body: '{}', attempt: 1, fault: 'none' }, agent))
      }
      history.push(...again, ...stale)

      // the old master back, as the new one's replica (the way out for replicas 1); with replicas 1
      // the workload goes on until a resource on the promoted master is written again
      await c.restart(target.master)
      await c.waitOk(15_000)
      await c.waitReplicasInSync(15_000)
      const atRestart = ledger.effects.length
      const servedAgain = () => ledger.effects.slice(atRestart).some((e) => target.slots.includes(markSlot(e.resource)))
      if (replicas > 0) {
        const deadline = Date.now() + 15_000
        history.push(...await runWorkload(workload(`${replicas}-${run}-b`, rng.fork(7), () => servedAgain() || Date.now() > deadline)))
      }
      await ledger.idle()
      const duplicateForwards = { ledger: 0 }
      for (const g of gws) duplicateForwards.ledger += metric(await metrics(g.adminUrl), 'fencegate_duplicate_forwards_total', { route: 'ledger' })
      const report = checkHistory(history, ledger.effects, { policies: { ledger: 'reject' }, duplicateForwards })
      const lost = history.filter((a) => a.problem === 'store-state-lost').length
      const unavailable = history.filter((a) => a.problem === 'store-unavailable').length
      console.log(formatReport(report, seed, `store.replicas ${replicas}: master ${target.master} killed, replica ${f.replica} promoted; effects ${f.beforeCut} before the cut, ${atRestart} when the old master was back; ${again.length} keys sent again, ${stale.length} stale tokens; 503 store-state-lost ${lost}, store-unavailable ${unavailable}`, 0))
      if (process.env.HOSTILE_DEBUG) {
        for (const k of new Set(report.violations.map((x) => /key (\S+)/.exec(x.detail)?.[1]).filter(Boolean))) {
          console.log(k, 'record slot', keySlot(`{fg:${prefix}:r:ledger::${k}}`), 'mark slot', markSlot(history.find((a) => a.key === k)!.resource), 'target', target)
          console.log(history.filter((a) => a.key === k).map((a) => `${a.start}-${a.end} w${a.worker} #${a.attempt} ${a.fault} ${a.token} -> ${a.status || a.error?.slice(0, 30)} ${a.problem ?? ''} ${a.reason ?? ''} ${a.replayed ? 'R' : ''}`).join('\n'))
          console.log(ledger.effects.filter((e) => e.key === k).map((e) => `#${e.seq}@${e.at} ${e.fault}`).join(', '))
          gws.forEach((g, n) => console.log(`gateway ${n}:`, g.logs.filter((l) => l.includes(k!)).join('')))
        }
        console.log('failover', f, gws.map((g) => g.logs.filter((l) => /state|went back|lost|settl|failover|took over/i.test(l) && !l.includes('"msg":"request')).slice(0, 6).join('')).join('\n---\n'))
      }
      expect(report.violations, formatReport(report, seed, `store.replicas ${replicas}`)).toEqual([])
      expect(report.stats.effects).toBeGreaterThanOrEqual(40)
      if (replicas === 0) {
        expect(again.length).toBeGreaterThan(0)
        expect(stale.length).toBeGreaterThan(0)
        // nothing is served where writes were lost: not the retries, not the stale tokens (the rest
        // is served until a gateway sees the loss, then nothing is)
        const onTarget = [...again, ...stale].filter((a) => target.slots.includes(markSlot(a.resource)))
        expect(onTarget.length).toBeGreaterThan(0)
        for (const a of onTarget) expect([a.status, a.problem]).toEqual([503, 'store-state-lost'])
        // the writes the master alone had are lost: state loss on both gateways, nothing forwarded meanwhile
        for (const g of gws) await until(async () => await counter(g, 'fencegate_store_state_lost') === 1, { timeoutMs: 5000, intervalMs: 100, message: 'both gateways to report the state loss' })
        expect(lost).toBeGreaterThan(0)
      } else {
        // nothing acknowledged was lost: no alarm, and the promoted shard was written again once it had a replica
        for (const g of gws) expect(await counter(g, 'fencegate_store_state_losses_total')).toBe(0)
        expect(lost).toBe(0)
        // the marks held through the failover
        for (const a of stale) expect([a.status, a.problem]).toEqual([412, 'stale-fencing-token'])
        expect(unavailable).toBeGreaterThan(0)
        expect(servedAgain()).toBe(true)
        expect(metric(await metrics(gws[0].adminUrl), 'fencegate_store_writes_refused_total', { store: 'redis', reason: 'replica_shortfall' }) + metric(await metrics(gws[1].adminUrl), 'fencegate_store_writes_refused_total', { store: 'redis', reason: 'replica_shortfall' })).toBeGreaterThan(0)
      }
    } finally {
      for (const g of gws) await g.close().catch(() => {})
      await ledger.close()
    }
  })
})
