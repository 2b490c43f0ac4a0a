/**
 * A Redis Cluster's shards as `fencegate doctor` reports them (finding `shard`, one per master):
 * the master's address and slots, its replicas (state, acknowledged offset, how far behind),
 * whether `store.replicas` is covered, and what an asynchronous failover of that shard would cost
 * with the current setting. Read with `readMasters` (./cluster-history.ts), the view the store's
 * own failover detection takes; a shard short of `store.replicas` is named in the words of
 * `/readyz` (`shortfalls`).
 */
import type { Finding, ShardView } from '../doctor/findings.js'
import { shortfalls, slotRanges, type MasterView } from './cluster-history.js'

const plural = (n: number, one: string, many = `${one}s`) => `${n} ${n === 1 ? one : many}`

/** The shard's structured view (the finding's `shard`, for --json). */
function shardView(v: MasterView, wanted: number): ShardView {
  return {
    master: v.node, slots: v.slots, offset: v.offset, wanted, covered: v.replicas >= wanted,
    replicas: v.links.map((l) => ({ node: l.node, state: l.state, offset: l.offset, behindBytes: Math.max(0, v.offset - l.offset), lagSeconds: l.lag })),
  }
}

/**
 * One `shard` finding per master, ordered by first slot.
 * @param wanted store.replicas
 * @param holdMs how long a promoted master's slots refuse writes with store.replicas 0, ms (./cluster-history.ts `settleHoldMs`)
 */
export function shardFindings(views: MasterView[], wanted: number, holdMs: number): Finding[] {
  return [...views].sort((a, b) => (a.slots[0]?.[0] ?? 0) - (b.slots[0]?.[0] ?? 0)).map((v) => shardFinding(v, wanted, holdMs))
}

function shardFinding(v: MasterView, wanted: number, holdMs: number): Finding {
  const shard = shardView(v, wanted)
  const links = shard.replicas.map((r) => `${r.node} ${r.state}, ${r.behindBytes} bytes behind, lag ${r.lagSeconds} s`).join('; ')
  const setting = `master ${v.node}, slots ${slotRanges(v.slots)}: ${v.replicas ? `${plural(v.replicas, 'replica')} connected (${links})` : 'no replica'}, store.replicas ${wanted}`
  const base = { id: 'shard', setting, nodes: [v.node], shard }
  if (wanted > 0 && !shard.covered) {
    return {
      ...base, status: 'risk',
      consequence: `${shortfalls([v], wanted)[0]}. Every fenced or idempotent request whose mark or record lives on these slots answers 503 store-unavailable (fencegate_store_writes_refused_total{reason="replica_shortfall"}) until the master has ${plural(wanted, 'replica')} in sync again; nothing is acknowledged there meanwhile, so a failover loses nothing acknowledged.`,
    }
  }
  if (wanted > 0) {
    const extra = v.replicas > wanted
      ? ` With more replicas than store.replicas, a failover to one that had not acknowledged a write can lose it; a gateway that saw the write still finds the slot's write sequence behind, which is state loss (503 store-state-lost until accept-loss).`
      : ''
    return {
      ...base, status: 'ok',
      consequence: `Every write the gateway relies on waits until ${plural(wanted, 'replica')} of this shard ${wanted === 1 ? 'has' : 'have'} it (WAIT): an asynchronous failover to ${wanted === 1 && v.replicas === 1 ? 'its replica' : 'a replica that acknowledged'} loses nothing acknowledged.${extra}`,
    }
  }
  if (!v.replicas) {
    return {
      ...base, status: 'ok',
      consequence: `No replica, so no failover can lose this shard's writes; while its master is down, every request whose mark or record lives on these slots answers 503 (with cluster-require-full-coverage yes, every fenced or idempotent request), and a master that comes back empty is seen by the epoch's copies (state loss).`,
    }
  }
  const behind = Math.max(0, ...shard.replicas.map((r) => r.behindBytes))
  return {
    ...base, status: 'risk',
    consequence: `Replication is asynchronous and the gateway does not wait for it (store.replicas 0): a failover of this shard loses the writes its master acknowledged that the promoted replica had not received (${behind} bytes at this reading). fencegate detects that as state loss (the replication offsets, the slots' write sequences): every gateway answers 503 store-state-lost on fenced and idempotent routes until \`fencegate store accept-loss\`. A failover that lost nothing costs ${holdMs / 1000} s of 503 on these slots (failover_settling). With store.replicas 1 nothing acknowledged is lost.`,
  }
}
