/**
 * Waiting on and inspecting a local Redis Cluster (scripts/redis-cluster.ts): the handle
 * startLocalCluster() returns, which reads CLUSTER NODES / SLOTS / INFO from a live node to tell
 * the masters, a slot's master, and when the cluster is ok and its replicas in sync.
 */
import { until, onNode, type group, type LocalCluster } from './redis-nodes.js'

type SlotRange = [start: number, end: number, masterPort: number]

export function clusterHandle(g: ReturnType<typeof group>): LocalCluster {
  const live = () => g.nodes.filter((n) => n.alive)
  /** CLUSTER SLOTS from the first live node that answers */
  const slots = async (): Promise<SlotRange[]> => {
    for (const n of live()) {
      const s = await onNode(n.port, (r) => r.cluster('SLOTS'))
      if (s) return s.map(([a, b, ...m]) => [a, b, Number(m[0]?.[1])] as SlotRange)
    }
    return []
  }
  return {
    ...g.base,
    url: g.nodes.map((n) => `redis://127.0.0.1:${n.port}`).join(','),
    async masters() {
      for (const n of live()) {
        const text = await onNode(n.port, async (r) => String(await r.cluster('NODES')))
        if (text === undefined) continue
        // <id> <ip:port@bus> <flags> <master id> <ping> <pong> <epoch> <link> <slot>...; flags e.g.
        // "myself,master" or "master,fail"; a master without slots (a node not yet made a replica) serves nothing
        return text.split('\n').filter(Boolean).map((l) => l.split(' ')).filter((f) => {
          const flags = f[2].split(',')
          return flags.includes('master') && !flags.includes('fail') && !flags.includes('fail?') && f.length > 8
        }).map((f) => Number(f[1].split('@')[0].split(':').pop()))
      }
      return []
    },
    async masterOf(slot) {
      return (await slots()).find(([a, b]) => slot >= a && slot <= b)?.[2]
    },
    async waitOk(timeoutMs = 15_000) {
      await until('cluster_state:ok with every slot served by a live master', Date.now() + timeoutMs, async () => {
        const alive = new Set(live().map((n) => n.port))
        for (const n of live()) {
          const info = await onNode(n.port, async (r) => String(await r.cluster('INFO')))
          if (!info?.includes('cluster_state:ok')) return false
        }
        let covered = 0
        for (const [a, b, p] of await slots()) { if (!alive.has(p)) return false; covered += b - a + 1 }
        return covered === 16384
      })
    },
    async waitReplicasInSync(timeoutMs = 15_000) {
      await until('replicas in sync', Date.now() + timeoutMs, async () => {
        for (const n of live()) {
          const info = await onNode(n.port, (r) => r.info('replication'))
          if (!info || !(info.includes('role:master') || info.includes('master_link_status:up'))) return false
        }
        return true
      })
    },
  }
}
