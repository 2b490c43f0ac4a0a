/**
 * Throwaway local Redis deployments for the tests and the bench, in a temp folder, without
 * persistence, on free ports; nothing to install beyond the `redis-server` and `redis-cli`
 * binaries:
 *
 * - `startLocalCluster()`: a Redis Cluster, `masters` masters with `replicasPerMaster` replicas
 *   each (`redis-server --cluster-enabled yes`, joined with `redis-cli --cluster create`);
 * - `startLocalReplicated()`: one primary with `replicas` replicas (`--replicaof`), no cluster.
 *
 *   const c = await startLocalCluster()          // 3 masters + 3 replicas
 *   store: { kind: redis, cluster: true, url: c.url }
 *   await c.kill(port)                           // SIGKILL one node (a master, to see a failover)
 *   await c.stop()                               // kills every node, removes the folder
 *
 * Every node started is killed by `stop()`, by this process's `exit`, and — should this process
 * die without running either (SIGKILL, a test worker torn down) — by a small detached watchdog
 * (`sh`) that kills the pids listed in the folder, and removes it, once this process is gone.
 */
import { spawnSync } from 'node:child_process'
import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { common, freePort, group, onNode, until, type LocalCluster, type LocalClusterOptions, type LocalReplicated } from './redis-nodes.js'
import { clusterHandle } from './redis-cluster-inspect.js'

// starting the nodes: scripts/redis-nodes.ts; waiting on and inspecting a cluster: scripts/redis-cluster-inspect.ts
export { freePort, redisToolsAvailable, type LocalClusterOptions, type RedisNode, type LocalRedis, type LocalCluster, type LocalReplicated } from './redis-nodes.js'

/**
 * Starts the cluster and resolves once it is usable: cluster_state:ok everywhere, every slot
 * served, every replica's link to its master up (so WAIT can be acknowledged and a killed
 * master's replica can take over).
 */
export async function startLocalCluster(options: LocalClusterOptions = {}): Promise<LocalCluster> {
  const { masters = 3, replicasPerMaster = 1, nodeTimeoutMs = 1000, requireFullCoverage = true, startTimeoutMs = 30_000 } = options
  const deadline = Date.now() + startTimeoutMs
  const dir = mkdtempSync(join(tmpdir(), 'fg-redis-cluster-'))
  const g = group(dir)
  try {
    // two distinct free ports per node (client, cluster bus: port + 10000 may be taken or past 65535)
    const count = masters * (1 + replicasPerMaster)
    const ports = new Set<number>()
    while (ports.size < count * 2) ports.add(await freePort())
    const list = [...ports]
    for (let i = 0; i < count; i++) {
      const port = list[2 * i], busPort = list[2 * i + 1]
      g.start({
        port,
        args: [
          ...common(dir, port),
          '--cluster-enabled', 'yes', '--cluster-config-file', `nodes-${port}.conf`, '--cluster-port', String(busPort),
          '--cluster-node-timeout', String(nodeTimeoutMs),
          '--cluster-require-full-coverage', requireFullCoverage ? 'yes' : 'no',
          // a replica may take over however long its link was down (the tests kill masters)
          '--cluster-replica-validity-factor', '0',
        ],
      })
    }
    for (const n of g.nodes) await g.waitPing(n, deadline)
    const create = spawnSync('redis-cli', ['--cluster', 'create', ...g.nodes.map((n) => `127.0.0.1:${n.port}`), '--cluster-replicas', String(replicasPerMaster), '--cluster-yes'], {
      encoding: 'utf8', timeout: Math.max(1000, deadline - Date.now()),
    })
    if (create.error || create.status !== 0) throw new Error(`redis-cli --cluster create failed: ${create.error?.message ?? ''}${create.stdout}${create.stderr}`)
    const cluster = clusterHandle(g)
    await cluster.waitOk(Math.max(1000, deadline - Date.now()))
    await cluster.waitReplicasInSync(Math.max(1000, deadline - Date.now()))
    return cluster
  } catch (e) {
    await g.base.stop()
    throw e
  }
}

/** Starts one primary with `replicas` replicas (no cluster); resolves once every replica is in sync. */
export async function startLocalReplicated(options: { replicas?: number; startTimeoutMs?: number } = {}): Promise<LocalReplicated> {
  const { replicas = 1, startTimeoutMs = 20_000 } = options
  const deadline = Date.now() + startTimeoutMs
  const dir = mkdtempSync(join(tmpdir(), 'fg-redis-repl-'))
  const g = group(dir)
  try {
    const ports = new Set<number>()
    while (ports.size < 1 + replicas) ports.add(await freePort())
    const [p, ...r] = [...ports]
    const primary = g.start({ port: p, args: common(dir, p) })
    await g.waitPing(primary, deadline)
    const reps = r.map((port) => g.start({ port, args: [...common(dir, port), '--replicaof', '127.0.0.1', String(p)] }))
    for (const n of reps) await g.waitPing(n, deadline)
    await until('replicas in sync', deadline, async () => {
      const info = await onNode(p, (c) => c.info('replication'))
      return (info?.match(/^slave\d+:.*state=online/gm) ?? []).length === replicas
    })
    return { ...g.base, url: `redis://127.0.0.1:${p}`, primary, replicas: reps }
  } catch (e) {
    await g.base.stop()
    throw e
  }
}
