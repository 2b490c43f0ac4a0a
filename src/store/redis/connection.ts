/**
 * The Redis store's client (ioredis): one server, or a Redis Cluster; running a script on the
 * connection of the master that serves its keys' slot; and every master's TIME and PING.
 *
 * Failure (one server): no offline queue and no command retry, so a call made while the
 * connection is down rejects at once (StoreError, 503 upstream of here) instead of queueing;
 * in-flight calls on a connection that drops reject too. The client reconnects in the
 * background with capped exponential backoff.
 *
 * Failure (cluster): ioredis follows MOVED and ASK (resharding), and retries a command every
 * 100 ms after CLUSTERDOWN, TRYAGAIN or a closed node connection (a master that died), up to
 * `maxRedirections`, refreshing the slot map meanwhile; the gateway's `store.timeout` answers
 * the request 503 first. A command resent after its connection closed may have run before:
 * every script is safe to run twice (a fence is idempotent, a claim that finds its own claim id
 * answers `claimed` again, finish and release act only on their own claim). No replica reads:
 * a replica may lag, and a replay read there could miss a completed record.
 */
import { setTimeout as sleep } from 'node:timers/promises'
import type { ConnectionOptions } from 'node:tls'
import { Cluster, Redis, type RedisOptions } from 'ioredis'
import { redisTls } from '../shared/tls.js'
import { SLOTS, keySlot } from './keys.js'
import { SCRIPTS, type Script } from './scripts.js'

/** The script the store calls as an ioredis command by name (defineCommand: EVALSHA, EVAL again on NOSCRIPT); the others go through `callScript`. */
interface ScriptCommands {
  fgAudit(key: string, minId: string, ...entries: string[]): Promise<number>
}

/** The store's client, with every script defined on it. */
export type Conn = (Redis | Cluster) & ScriptCommands

export interface ClientOptions {
  /** redis:// or rediss:// URLs: one server's, or a cluster's seed nodes (credentials and TLS from the first) */
  urls: string[]
  cluster: boolean
  /** ms */
  connectTimeoutMs: number
  /** longest pause between reconnection attempts, ms */
  maxBackoffMs: number
  /** cluster: a command not answered after this long is given up by the client, ms */
  commandTimeoutMs: number
  /** Sentinels to ask for the primary named `sentinelName` (`urls[0]` then gives only credentials, TLS and database) */
  sentinels?: { host: string; port: number }[]
  sentinelName?: string
  /** store.tls's options (the CA, the client certificate); TLS is on with them or a rediss:// URL */
  tls?: ConnectionOptions
}

/** A client not yet connected (lazyConnect), every script defined on it. */
export function createClient(o: ClientOptions): Conn {
  const retryStrategy = (times: number) => Math.min(50 * 2 ** Math.min(times, 10), o.maxBackoffMs)
  let conn: Conn
  // one server, or the primary Sentinel names: nothing queued or re-sent while disconnected
  const oneServer = {
    lazyConnect: true,
    enableOfflineQueue: false,
    maxRetriesPerRequest: 0,
    // each command written when it is made: auto-pipelining (one write per turn for the commands
    // of concurrent requests) costs more CPU than the writes it saves — a promise, a callback and
    // a Pipeline entry per command (bench/store-calls.ts; figures in bench/NOTES.md)
    enableAutoPipelining: false,
    connectTimeout: o.connectTimeoutMs,
    retryStrategy,
    // a replica that became read-only after a failover: reconnect so we reach the new primary
    reconnectOnError: (e: Error) => e.message.startsWith('READONLY'),
  }
  if (o.cluster) {
    const first = new URL(o.urls[0])
    const nodeOptions: RedisOptions = {
      connectTimeout: o.connectTimeoutMs,
      // a node's commands are retried by the cluster client (below), not by the node's connection
      maxRetriesPerRequest: 0,
      // bounds what is left running after the gateway gave up on a call (store.timeout)
      commandTimeout: o.commandTimeoutMs,
      username: first.username ? decodeURIComponent(first.username) : undefined,
      password: first.password ? decodeURIComponent(first.password) : undefined,
      // every node the cluster announces is reached with the same options: its certificate must
      // name the address it announces (an IP SAN for cluster-announce-ip, or a name that resolves)
      ...redisTls(o.urls[0], o.tls, { sentinels: false }),
    }
    conn = new Cluster(o.urls.map((u) => { const x = new URL(u); return { host: x.hostname, port: Number(x.port || 6379) } }), {
      lazyConnect: true,
      // no queue while the cluster is unreachable: a call then fails at once (503)
      enableOfflineQueue: false,
      enableReadyCheck: true,
      enableAutoPipelining: true,
      // never read from a replica: it may lag behind a write this or another gateway relies on
      scaleReads: 'master',
      // MOVED/ASK are followed at once; CLUSTERDOWN (a slot without a master), TRYAGAIN and a
      // closed node connection (a master that died) are retried every 100 ms, refreshing the
      // slot map meanwhile, until the command succeeds or `maxRedirections` tries were made.
      // 100 ms × 16 ≈ 1.6 s: longer than the default store.timeout, so a failover of ~2 s is
      // answered 503 by the gateway, while a quick MOVED after it is followed within the call.
      maxRedirections: 16,
      retryDelayOnMoved: 0,
      retryDelayOnFailover: 100,
      retryDelayOnClusterDown: 100,
      retryDelayOnTryAgain: 100,
      slotsRefreshTimeout: Math.max(o.connectTimeoutMs, 1000),
      // a failover is learnt from the first MOVED; this catches the rest
      slotsRefreshInterval: 2000,
      // every seed unreachable: reconnect with the same backoff as one server
      clusterRetryStrategy: retryStrategy,
      redisOptions: nodeOptions,
    }) as Cluster & ScriptCommands
  } else if (o.sentinels) {
    // Sentinel: the primary is asked of the Sentinels at every (re)connection, so a failover is
    // followed on the reconnection after the old primary goes (or refuses a write: READONLY);
    // failoverDetector also drops the connection as soon as a Sentinel announces +switch-master
    const u = new URL(o.urls[0])
    conn = new Redis({
      sentinels: o.sentinels,
      name: o.sentinelName,
      username: u.username ? decodeURIComponent(u.username) : undefined,
      password: u.password ? decodeURIComponent(u.password) : undefined,
      db: u.pathname.length > 1 ? Number(u.pathname.slice(1)) : undefined,
      // rediss://: the Sentinels' links and the primary's are TLS (ioredis reaches the primary a
      // Sentinel names in cleartext unless told enableTLSForSentinelMode)
      ...redisTls(o.urls[0], o.tls, { sentinels: true }),
      role: 'master',
      failoverDetector: true,
      sentinelRetryStrategy: retryStrategy,
      ...oneServer,
    }) as Redis & ScriptCommands
  } else {
    conn = new Redis(o.urls[0], { ...oneServer, ...redisTls(o.urls[0], o.tls, { sentinels: false }) }) as Redis & ScriptCommands
  }
  conn.defineCommand(SCRIPTS.fgAudit.name, { numberOfKeys: SCRIPTS.fgAudit.keys, lua: SCRIPTS.fgAudit.lua })
  return conn
}

/**
 * A script through the client's own routing: EVALSHA of `s` (the script as the server must run
 * it: on one server the sequenced one, ./scripts.ts SEQUENCED), then EVAL when the server answers
 * NOSCRIPT (restarted, or SCRIPT FLUSH). The arguments go in one array, built once: the request
 * path calls this twice for every new key.
 * @throws what Redis answered (a script's error reply, a connection error)
 */
export function callScript<T>(conn: Redis | Cluster, s: Script, keys: string[], args: (string | Buffer)[], buffer: boolean): Promise<T> {
  const a: (string | Buffer | number)[] = [s.sha, keys.length]
  for (let i = 0; i < keys.length; i++) a.push(keys[i])
  for (let i = 0; i < args.length; i++) a.push(args[i])
  // the named methods, not callBuffer: with auto-pipelining (a cluster's) ioredis drops callBuffer's command name
  const c = conn as unknown as Record<'evalsha' | 'evalshaBuffer' | 'eval' | 'evalBuffer', (a: (string | Buffer | number)[]) => Promise<T>>
  const sent = buffer ? c.evalshaBuffer(a) : c.evalsha(a)
  return sent.catch((e: Error) => {
    if (!e?.message?.startsWith('NOSCRIPT')) throw e
    a[0] = s.lua
    return buffer ? c.evalBuffer(a) : c.eval(a)
  })
}

/**
 * The connections that hold every key between them: the one server, or every master of the
 * cluster (to SCAN, to PING).
 * @throws Error when a slot has no master the client knows of: a list missing a master's records must not read as complete
 */
export function masters(conn: Conn, cluster: boolean): (Redis | Cluster)[] {
  if (!cluster) return [conn]
  const c = conn as Cluster
  const nodes = c.nodes('master')
  const known = new Set(nodes.map((n) => `${n.options.host}:${n.options.port}`))
  for (let s = 0; s < SLOTS; s++) {
    const k = c.slots[s]?.[0]
    if (k === undefined || !known.has(k)) throw new Error(`slot ${s} has no master reachable now`)
  }
  return nodes
}

/** TIME's answer (seconds, microseconds) as epoch ms. */
export const timeOf = ([sec, usec]: (number | string)[]): number => Number(sec) * 1000 + Math.floor(Number(usec) / 1000)

/**
 * The server's TIME, epoch ms; on a cluster, the master whose clock is furthest from this
 * process's (each master keeps the leases of its own slots).
 */
export async function serverTime(conn: Conn, cluster: boolean): Promise<number> {
  const readings = await Promise.all(masters(conn, cluster).map(async (n) => timeOf(await n.time())))
  const here = Date.now()
  return readings.reduce((far, t) => (Math.abs(t - here) > Math.abs(far - here) ? t : far))
}

/** `RedisStore.ping` (see there). */
export async function ping(conn: Conn, cluster: boolean): Promise<void> {
  if (!cluster) {
    await conn.ping()
    return
  }
  const info = String(await (conn as Cluster).cluster('INFO'))
  if (!info.includes('cluster_state:ok')) throw new Error(`cluster_state is not ok (${/cluster_state:(\w+)/.exec(info)?.[1] ?? '?'})`)
  await Promise.all(masters(conn, cluster).map((n) => n.ping()))
}

// ------------------------------------------------------------------ a slot's master's own connection

/** Errors after which a cluster command was not run and may be sent again (or, connection closed, may have run: every script is safe to run twice). */
const TRANSIENT = /^(TRYAGAIN|CLUSTERDOWN|LOADING|MASTERDOWN)|Connection is closed|ECONNREFUSED|ECONNRESET|EPIPE|Stream isn't writeable/

/**
 * Cluster: runs `s` on the connection of the master that serves its keys' slot, so that a WAIT
 * sent after it on that connection covers it. Follows MOVED (refreshing the slot map) and ASK
 * (ASKING on the importing master); retries every 100 ms after the transient errors of a
 * failover, up to 16 tries or `commandTimeoutMs`, like the client's own routing.
 * @returns the connection it ran on, and the script's answer
 * @throws the last error when no try succeeded
 */
export async function onMaster<T>(cluster: Cluster, s: Script, keys: string[], args: (string | Buffer)[], buffer: boolean, commandTimeoutMs: number): Promise<{ conn: Redis; result: T }> {
  const slot = keySlot(keys[0])
  const deadline = Date.now() + commandTimeoutMs
  let target: string | undefined
  let asking = false
  let last: Error = new Error(`no master known for slot ${slot}`)
  for (let attempt = 0; attempt < 16 && Date.now() < deadline; attempt++) {
    const nodeKey = target ?? cluster.slots[slot]?.[0]
    const conn = nodeKey === undefined ? undefined : cluster.nodes('master').concat(cluster.nodes('slave')).find((n) => `${n.options.host}:${n.options.port}` === nodeKey)
    if (!conn) {
      await new Promise<void>((ok) => cluster.refreshSlotsCache(() => ok()))
      if (attempt > 0) await sleep(100)
      target = undefined
      continue
    }
    try {
      return { conn, result: await evalOn<T>(conn, s, keys, args, buffer, asking) }
    } catch (e) {
      last = e as Error
      const msg = last.message
      const moved = /^(MOVED|ASK) (\d+) (\S+)/.exec(msg)
      if (moved) {
        asking = moved[1] === 'ASK'
        target = moved[3]
        if (!asking) cluster.refreshSlotsCache()
        continue
      }
      if (!TRANSIENT.test(msg)) throw last
      target = undefined
      asking = false
      cluster.refreshSlotsCache()
      await sleep(100)
    }
  }
  throw last
}

/**
 * Runs a script on one node connection: EVALSHA, EVAL after NOSCRIPT; after an ASK, as
 * `ASKING` + EVAL in one pipeline (ASKING holds for the next command only).
 */
async function evalOn<T>(conn: Redis, s: Script, keys: string[], args: (string | Buffer)[], buffer: boolean, asking: boolean): Promise<T> {
  if (!asking) return callScript<T>(conn, s, keys, args, buffer)
  const p = conn.pipeline().asking()
  const a = [s.lua, String(keys.length), ...keys, ...args]
  if (buffer) p.callBuffer('EVAL', a)
  else p.call('EVAL', a)
  const replies = (await p.exec()) ?? []
  const [err, value] = replies[1] ?? [new Error('no reply to EVAL after ASKING')]
  if (err) throw err
  return value as T
}
