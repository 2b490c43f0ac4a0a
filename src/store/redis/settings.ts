/**
 * The Redis settings probe of `fencegate doctor` (../doctor/inspect.ts): appendonly / appendfsync / save,
 * maxmemory-policy, role and replication (against store.replicas), cluster mode — read on the
 * server, or on every master of a cluster (one finding per setting naming the masters it holds
 * for; replication as one `shard` finding per master, ./shards.ts) — and the prefix's loss note, when a gateway left one (../state-loss/note.ts). `CONFIG GET`, else `INFO` where a managed Redis refuses `CONFIG`.
 */
import { redisTls, storeTlsOptions } from '../shared/tls.js'
import { Cluster, Redis } from 'ioredis'
import type { Config } from '../../config/schema.js'
import type { Finding } from '../doctor/findings.js'
import { lossFinding } from '../doctor/loss.js'
import { KeyNames } from './keys.js'
import { readNote } from './markers.js'
import { readMasters, settleHoldMs } from './cluster-history.js'
import { shardFindings } from './shards.js'
import { commandTimeoutFor } from './options.js'

const EVICTING = /^(allkeys|volatile)-(lru|lfu|random)$|^volatile-ttl$/

interface RedisNode { name: string; config: Map<string, string>; info: Map<string, string>; configError?: string }

/** CONFIG GET one parameter at a time (a managed Redis may refuse CONFIG; INFO still answers). */
async function readNode(conn: Redis, name: string): Promise<RedisNode> {
  const config = new Map<string, string>()
  let configError: string | undefined
  for (const p of ['appendonly', 'appendfsync', 'save', 'maxmemory-policy', 'maxmemory']) {
    try {
      const r = (await conn.config('GET', p)) as string[]
      if (r.length >= 2) config.set(p, String(r[1]))
    } catch (e) {
      configError = (e as Error).message
      break
    }
  }
  const info = new Map<string, string>()
  for (const section of ['persistence', 'memory', 'replication', 'cluster', 'server']) {
    const text = await conn.info(section)
    for (const line of text.split(/\r?\n/)) {
      const i = line.indexOf(':')
      if (i > 0 && !line.startsWith('#')) info.set(line.slice(0, i), line.slice(i + 1).trim())
    }
  }
  return { name, config, info, configError }
}

function nodeFindings(n: RedisNode, replicasWanted: number, cluster: boolean): Finding[] {
  const out: Finding[] = []
  const aof = n.config.get('appendonly') ?? (n.info.get('aof_enabled') === '1' ? 'yes' : n.info.get('aof_enabled') === '0' ? 'no' : undefined)
  const fsync = n.config.get('appendfsync')
  const save = n.config.get('save')
  if (aof === undefined) {
    out.push({ id: 'persistence', status: 'unknown', setting: 'appendonly ?', consequence: `Cannot read Redis's persistence settings (${n.configError ?? 'not in INFO'}): check appendonly yes and appendfsync always (or everysec) yourself; without persistence a restart forgets every high-water mark and record.` })
  } else if (aof === 'yes') {
    if (fsync === 'always') out.push({ id: 'persistence', status: 'ok', setting: 'appendonly yes, appendfsync always', consequence: 'Every write is in the append-only file, on disk, before Redis answers: a restart or a crash of the host keeps every high-water mark and record.' })
    else if (fsync === 'everysec') out.push({ id: 'persistence', status: 'risk', setting: 'appendonly yes, appendfsync everysec', consequence: 'Redis writes its append-only file to disk once a second: a crash of the Redis process loses nothing, but a crash or power loss of its host can lose about the last second of writes — a raised mark falls back (a stale write can then pass) or a record vanishes (a retry is forwarded again) — and the epoch marker survives, so the loss goes unnoticed.' })
    else out.push({ id: 'persistence', status: 'risk', setting: `appendonly yes, appendfsync ${fsync ?? '?'}`, consequence: 'Redis leaves writing its append-only file to disk to the operating system (about every 30 s): a crash or power loss of its host can lose that much of the writes — marks fall back, records vanish — and the epoch marker survives, so the loss goes unnoticed.' })
  } else if (save === '') {
    out.push({ id: 'persistence', status: 'risk', setting: 'appendonly no, save ""', consequence: 'Redis runs without persistence: a restart forgets every high-water mark and record; the epoch marker will report it and fenced routes will answer 503 until accept-loss.' })
  } else if (save === undefined) {
    out.push({ id: 'persistence', status: 'risk', setting: 'appendonly no, save ?', consequence: `Redis keeps no append-only file and its snapshot settings cannot be read (${n.configError ?? 'CONFIG GET save answered nothing'}): a restart brings back at best the last RDB snapshot, losing what came after it unnoticed, and without snapshots forgets everything. Turn on appendonly.` })
  } else {
    out.push({ id: 'persistence', status: 'risk', setting: `appendonly no, save "${save ?? '?'}"`, consequence: 'Redis keeps only RDB snapshots: a restart brings back the last snapshot and loses every mark and record written after it, and since the epoch marker is in the snapshot the loss goes unnoticed — a stale write can pass, a retry be forwarded again. Turn on appendonly.' })
  }

  const policy = n.config.get('maxmemory-policy') ?? n.info.get('maxmemory_policy')
  const maxmemory = Number(n.config.get('maxmemory') ?? n.info.get('maxmemory') ?? '0')
  const limit = maxmemory > 0 ? `maxmemory ${maxmemory} bytes` : 'maxmemory 0: no limit yet, but CONFIG SET maxmemory starts evicting at once'
  if (policy === undefined) {
    out.push({ id: 'maxmemory-policy', status: 'unknown', setting: 'maxmemory-policy ?', consequence: 'Cannot read maxmemory-policy: check it is noeviction yourself; an evicting policy forgets high-water marks or records when memory fills.' })
  } else if (policy === 'noeviction') {
    out.push({ id: 'maxmemory-policy', status: 'ok', setting: `maxmemory-policy noeviction (${limit})`, consequence: 'A full Redis refuses writes (fenced routes answer 503) and never forgets a high-water mark or a record.' })
  } else if (EVICTING.test(policy)) {
    const what = policy.startsWith('allkeys')
      ? 'any key, high-water marks included: an evicted mark lets a stale write through, an evicted record lets a retry apply its effect again'
      : 'keys with a TTL, which idempotency records have: an evicted record lets a retry apply its effect again (marks have no TTL and stay)'
    out.push({ id: 'maxmemory-policy', status: 'risk', blocking: true, setting: `maxmemory-policy ${policy} (${limit})`, consequence: `When memory fills, Redis evicts ${what}. Set maxmemory-policy noeviction, or start anyway with store.acceptRisks: [maxmemory-policy].` })
  } else {
    out.push({ id: 'maxmemory-policy', status: 'unknown', setting: `maxmemory-policy ${policy}`, consequence: 'An eviction policy fencegate does not know: if it evicts keys, high-water marks or records can be forgotten.' })
  }

  // a cluster's replication is reported per shard (./shards.ts)
  if (cluster) return out
  const role = n.info.get('role')
  const replicas = Number(n.info.get('connected_slaves') ?? '0')
  if (role === 'slave' || role === 'replica') {
    out.push({ id: 'replication', status: 'risk', setting: `role replica of ${n.info.get('master_host') ?? '?'}:${n.info.get('master_port') ?? '?'}`, consequence: 'This Redis is a replica: it refuses writes, so every fenced or idempotent request fails closed (503). Point store.url at the primary.' })
  } else if (replicasWanted > replicas) {
    out.push({ id: 'replication', status: 'risk', setting: `role master, ${replicas} replica${replicas === 1 ? '' : 's'} connected, store.replicas ${replicasWanted}`, consequence: `store.replicas asks for ${replicasWanted} acknowledgements but only ${replicas} replica${replicas === 1 ? ' is' : 's are'} connected: every write the gateway relies on fails closed (503).` })
  } else if (replicasWanted > 0) {
    out.push({ id: 'replication', status: 'ok', setting: `role master, ${replicas} replicas connected, store.replicas ${replicasWanted}`, consequence: `Every write the gateway relies on waits until ${replicasWanted} of ${replicas} replicas have it (WAIT): a failover loses it only when the promoted replica is not among them.` })
  } else if (replicas > 0) {
    out.push({ id: 'replication', status: 'risk', setting: `role master, ${replicas} replica${replicas === 1 ? '' : 's'} connected, store.replicas 0`, consequence: `Replication is asynchronous and the gateway does not wait for it (store.replicas 0): a failover to a replica can lose the last writes — marks fall back, records vanish — without fencegate knowing. Set store.replicas to make it WAIT.` })
  } else {
    out.push({ id: 'replication', status: 'ok', setting: 'role master, no replicas', consequence: 'One Redis, no replicas: nothing is lost to a failover; while it is down, fenced routes answer 503.' })
  }
  if (n.info.get('cluster_enabled') === '1') {
    out.push({ id: 'cluster', status: 'risk', setting: 'cluster_enabled 1, store.cluster false', consequence: 'This node is part of a Redis Cluster but the store is configured as one server: most keys would answer MOVED. Set store.cluster: true.' })
  }
  return out
}

/** @throws Error when the server (or cluster) cannot be reached */
export async function redisFindings(config: Config['store']): Promise<Finding[]> {
  const urls = (config.url ?? 'redis://sentinel').split(',').map((u) => u.trim()).filter(Boolean)
  if (!config.cluster) {
    const once = { lazyConnect: true, enableOfflineQueue: false, maxRetriesPerRequest: 0, connectTimeout: Math.max(config.timeout, 1000), retryStrategy: () => null }
    const u = new URL(urls[0])
    // through Sentinel: the primary the Sentinels name now
    const conn = config.sentinels
      ? new Redis({
        ...once, sentinels: config.sentinels.map((a) => ({ host: a.slice(0, a.lastIndexOf(':')), port: Number(a.slice(a.lastIndexOf(':') + 1)) })), name: config.sentinelName,
        ...redisTls(config.url, storeTlsOptions(config), { sentinels: true }),
        sentinelRetryStrategy: () => null, username: u.username ? decodeURIComponent(u.username) : undefined, password: u.password ? decodeURIComponent(u.password) : undefined,
      })
      : new Redis(urls[0], { ...once, ...redisTls(urls[0], storeTlsOptions(config), { sentinels: false }) })
    conn.on('error', () => {})
    try {
      await conn.connect()
      const node = config.sentinels ? `${(conn.stream as { remoteAddress?: string } | undefined)?.remoteAddress ?? '?'}:${(conn.stream as { remotePort?: number } | undefined)?.remotePort ?? '?'} (primary ${config.sentinelName} by Sentinel)` : `${u.hostname}:${u.port || 6379}`
      const out = nodeFindings(await readNode(conn, node), config.replicas, false)
      const note = await readNote(conn, new KeyNames(config.keyPrefix, false))
      if (note) out.push(lossFinding(note))
      return out
    } finally {
      conn.disconnect()
    }
  }
  const first = new URL(urls[0])
  const cluster = new Cluster(urls.map((u) => { const x = new URL(u); return { host: x.hostname, port: Number(x.port || 6379) } }), {
    lazyConnect: true,
    enableOfflineQueue: false,
    clusterRetryStrategy: () => null,
    redisOptions: {
      connectTimeout: Math.max(config.timeout, 1000), maxRetriesPerRequest: 0,
      username: first.username ? decodeURIComponent(first.username) : undefined,
      password: first.password ? decodeURIComponent(first.password) : undefined,
      ...redisTls(urls[0], storeTlsOptions(config), { sentinels: false }),
    },
  })
  cluster.on('error', () => {})
  try {
    await cluster.connect()
    const masters = cluster.nodes('master')
    const per = await Promise.all(masters.map(async (m) => nodeFindings(await readNode(m, `${m.options.host}:${m.options.port}`), config.replicas, true)))
    // one finding per kind and wording, naming the masters it holds for
    const merged = new Map<string, Finding>()
    per.forEach((fs, i) => {
      const node = `${masters[i].options.host}:${masters[i].options.port}`
      for (const f of fs) {
        const k = `${f.id}\n${f.status}\n${f.setting}`
        const m = merged.get(k)
        if (m) m.nodes!.push(node)
        else merged.set(k, { ...f, nodes: [node] })
      }
    })
    const state = (await cluster.cluster('INFO') as string).match(/cluster_state:(\w+)/)?.[1] ?? '?'
    const out = [...merged.values(), ...shardFindings(await readMasters(cluster), config.replicas, settleHoldMs(commandTimeoutFor(config.timeout)))]
    out.push({
      id: 'cluster', status: state === 'ok' ? 'ok' : 'risk', setting: `Redis Cluster, ${masters.length} master${masters.length === 1 ? '' : 's'}, cluster_state ${state}`,
      consequence: state === 'ok'
        ? 'Each slot\'s marks and records live on one master (the `shard` findings: its replicas, and what a failover of it would cost); a master that comes back empty shows through the copies of the epoch marker in every block of slots.'
        : 'The cluster is not serving every slot: requests whose keys are in an unserved slot fail closed (503).',
      nodes: masters.map((m) => `${m.options.host}:${m.options.port}`),
    })
    const note = await readNote(cluster, new KeyNames(config.keyPrefix, true))
    if (note) out.push(lossFinding(note))
    return out
  } finally {
    cluster.disconnect()
  }
}
