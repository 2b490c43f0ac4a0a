/**
 * Starting the nodes of a throwaway local Redis deployment (scripts/redis-cluster.ts): the types
 * every deployment shares, free ports, one short-lived connection to a node, the group that spawns
 * the redis-server processes, watches them with a watchdog and kills them, and the redis-server
 * arguments every node gets.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process'
import { appendFileSync, existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
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

export async function until(what: string, deadline: number, check: () => boolean | Promise<boolean>, every = 100): Promise<void> {
  for (;;) {
    if (await check()) return
    if (Date.now() > deadline) throw new Error(`local redis: ${what} did not happen in time`)
    await sleep(every)
  }
}

/** One short-lived connection to a node: `fn` runs on it; undefined when the node does not answer. */
export async function onNode<T>(port: number, fn: (r: Redis) => Promise<T>): Promise<T | undefined> {
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
export function group(dir: string) {
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
export const common = (dir: string, port: number) => [
  '--port', String(port), '--bind', '127.0.0.1', '--protected-mode', 'no',
  '--dir', dir, '--save', '', '--appendonly', 'no', '--daemonize', 'no',
  // replicas sync at once instead of after Redis 7's 5 s diskless-sync delay
  '--repl-diskless-sync', 'yes', '--repl-diskless-sync-delay', '0',
  '--logfile', join(dir, `redis-${port}.log`),
]

export function logTail(dir: string, port: number): string {
  const f = join(dir, `redis-${port}.log`)
  return existsSync(f) ? readFileSync(f, 'utf8').split('\n').slice(-5).join('\n') : '(no log)'
}
