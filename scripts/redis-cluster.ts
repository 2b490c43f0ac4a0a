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
import { spawn, spawnSync, type ChildProcess } from 'node:child_process'
import { appendFileSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import net from 'node:net'
import { setTimeout as sleep } from 'node:timers/promises'
import { Redis } from 'ioredis'

export interface LocalClusterOptions {
  /** default 3 */
  masters?: number
  /** default 1 */
  replicasPerMaster?: number
  /** `cluster-node-timeout`: how long a node may be unreachable before it counts as failed, ms; default 1000 */
  nodeTimeoutMs?: number
  /** `cluster-require-full-coverage`: with yes (Redis's default) the whole cluster refuses queries while any slot has no master */
  requireFullCoverage?: boolean
  /** how long start-up may take in all, ms; default 30 000 */
  startTimeoutMs?: number
}

export interface RedisNode {
  port: number
  /** the redis-server arguments it was started with (restart() uses them again) */
  args: string[]
  child: ChildProcess
  /** false once killed or exited */
  alive: boolean
}

/** Nodes started by one of the functions below, and what every such deployment can do. */
export interface LocalRedis {
  /** cluster: every node's redis:// URL, comma-separated (the seed list for `store.url`); replicated: the primary's */
  url: string
  nodes: RedisNode[]
  dir: string
  /** sends `signal` (default SIGKILL) to the node on `port` and waits until it has exited */
  kill(port: number, signal?: NodeJS.Signals): Promise<void>
  /** starts the node on `port` again with its old arguments (a cluster node rejoins; an old master whose slots moved comes back as a replica) */
  restart(port: number): Promise<void>
  /** runs a command on the node on `port` over a short-lived connection; undefined when it does not answer */
  command<T = unknown>(port: number, ...args: (string | number)[]): Promise<T | undefined>
  /** kills every node and removes the folder */
  stop(): Promise<void>
}

export interface LocalCluster extends LocalRedis {
  /** the ports of the nodes that are masters now and not failed (CLUSTER NODES, as a live node sees it) */
  masters(): Promise<number[]>
  /** the port of the master serving `slot` now, from a live node's CLUSTER SLOTS */
  masterOf(slot: number): Promise<number | undefined>
  /** resolves once every live node reports cluster_state:ok and every slot has a live master; rejects after `timeoutMs` */
  waitOk(timeoutMs?: number): Promise<void>
  /** resolves once every live replica's link to its master is up */
  waitReplicasInSync(timeoutMs?: number): Promise<void>
}

export interface LocalReplicated extends LocalRedis {
  primary: RedisNode
  replicas: RedisNode[]
}

/** A free TCP port on 127.0.0.1 (the kernel's choice; released before it is returned). */
export const freePort = () => new Promise<number>((ok, fail) => {
  const s = net.createServer()
  s.on('error', fail)
  s.listen(0, '127.0.0.1', () => { const p = (s.address() as net.AddressInfo).port; s.close(() => ok(p)) })
})

/** True when `redis-server` and `redis-cli` are on PATH. */
export function redisToolsAvailable(): boolean {
  const ok = (cmd: string) => { const r = spawnSync(cmd, ['--version'], { encoding: 'utf8' }); return !r.error && r.status === 0 }
  return ok('redis-server') && ok('redis-cli')
}

async function until(what: string, deadline: number, check: () => boolean | Promise<boolean>, every = 100): Promise<void> {
  for (;;) {
    if (await check()) return
    if (Date.now() > deadline) throw new Error(`local redis: ${what} did not happen in time`)
    await sleep(every)
  }
}

/** One short-lived connection to a node: `fn` runs on it; undefined when the node does not answer. */
async function onNode<T>(port: number, fn: (r: Redis) => Promise<T>): Promise<T | undefined> {
  const r = new Redis({ host: '127.0.0.1', port, lazyConnect: true, enableOfflineQueue: false, maxRetriesPerRequest: 0, retryStrategy: () => null, connectTimeout: 1000, commandTimeout: 2000 })
  r.on('error', () => {})
  try {
    await r.connect()
    return await fn(r)
  } catch {
    return undefined
  } finally {
    r.disconnect()
  }
}

/**
 * The nodes of one deployment: spawns them, lists their pids in `dir/pids` for the watchdog,
 * and kills them all on stop() or this process's exit.
 */
function group(dir: string) {
  const nodes: RedisNode[] = []
  const pids = join(dir, 'pids')
  writeFileSync(pids, '')
  const killAll = () => {
    for (const n of nodes) if (n.alive) { try { n.child.kill('SIGKILL') } catch { /* gone */ } }
  }
  process.once('exit', killAll)
  // kills the nodes should this process die without stop() or its exit handler (kill -9)
  const watchdog = spawn('sh', ['-c', 'while kill -0 "$0" 2>/dev/null; do sleep 0.5; done; [ -f "$1/pids" ] && kill -9 $(cat "$1/pids") 2>/dev/null; sleep 0.5; rm -rf "$1"', String(process.pid), dir], { detached: true, stdio: 'ignore' })
  watchdog.unref()
  const start = (node: Omit<RedisNode, 'child' | 'alive'> & Partial<RedisNode>): RedisNode => {
    const child = spawn('redis-server', node.args, { stdio: 'ignore' })
    const n = node as RedisNode
    n.child = child
    n.alive = true
    child.once('exit', () => { n.alive = false })
    if (!nodes.includes(n)) nodes.push(n)
    if (child.pid) appendFileSync(pids, `${child.pid}\n`)
    return n
  }
  const waitPing = (n: RedisNode, deadline: number) => until(`node ${n.port} answering PING`, deadline, async () => {
    if (!n.alive) throw new Error(`redis-server on ${n.port} exited: ${logTail(dir, n.port)}`)
    return (await onNode(n.port, (r) => r.ping())) === 'PONG'
  }, 50)
  const base: Omit<LocalRedis, 'url'> = {
    nodes,
    dir,
    async kill(port, signal = 'SIGKILL') {
      const n = nodes.find((x) => x.port === port)
      if (!n || !n.alive) return
      const exited = new Promise((r) => n.child.once('exit', r))
      n.child.kill(signal)
      await exited
    },
    async restart(port) {
      const n = nodes.find((x) => x.port === port)
      if (!n) throw new Error(`no node on ${port}`)
      if (n.alive) await base.kill(port)
      start(n)
      await waitPing(n, Date.now() + 10_000)
    },
    command: (port, ...args) => onNode(port, (r) => r.call(String(args[0]), ...args.slice(1).map(String))) as never,
    async stop() {
      const exits = nodes.filter((n) => n.alive).map((n) => new Promise((r) => n.child.once('exit', r)))
      killAll()
      await Promise.race([Promise.all(exits), sleep(5000)])
      try { if (watchdog.pid) process.kill(watchdog.pid, 'SIGKILL') } catch { /* gone */ }
      process.removeListener('exit', killAll)
      rmSync(dir, { recursive: true, force: true })
    },
  }
  return { nodes, start, waitPing, base }
}

/** redis-server arguments shared by every node: no persistence, quick replica syncs, a log file. */
const common = (dir: string, port: number) => [
  '--port', String(port), '--bind', '127.0.0.1', '--protected-mode', 'no',
  '--dir', dir, '--save', '', '--appendonly', 'no', '--daemonize', 'no',
  // replicas sync at once instead of after Redis 7's 5 s diskless-sync delay
  '--repl-diskless-sync', 'yes', '--repl-diskless-sync-delay', '0',
  '--logfile', join(dir, `redis-${port}.log`),
]

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

function logTail(dir: string, port: number): string {
  const f = join(dir, `redis-${port}.log`)
  return existsSync(f) ? readFileSync(f, 'utf8').split('\n').slice(-5).join('\n') : '(no log)'
}

type SlotRange = [start: number, end: number, masterPort: number]

function clusterHandle(g: ReturnType<typeof group>): LocalCluster {
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
        // <id> <ip:port@bus> <flags> <master id> ...; flags e.g. "myself,master" or "master,fail"
        return text.split('\n').filter(Boolean).map((l) => l.split(' ')).filter((f) => {
          const flags = f[2].split(',')
          return flags.includes('master') && !flags.includes('fail') && !flags.includes('fail?')
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
