/**
 * `fencegate doctor` and the start-up check: reads the store's real durability settings — not
 * what the config hopes for — and says what each means for fencegate's guarantees, one finding
 * each, `ok` or `risk` (or `unknown` when the setting cannot be read), with the consequence in one
 * sentence:
 *   redis     appendonly / appendfsync / save, maxmemory-policy, role and replication (against
 *             store.replicas), cluster mode — on every master of a cluster;
 *   postgres  synchronous_commit, fsync, synchronous standbys, whether it is a standby;
 *   sqlite    journal_mode and synchronous of the gateway's own connection, and the filesystem
 *             the file is on (tmpfs, a network filesystem, a container's writable layer);
 *   memory    not durable, not shared.
 * The findings also go into the audit report's `claim.assumptions`, so the claim names the store
 * it actually runs on.
 *
 * A risk that breaks a guarantee outright while the store runs normally — an evicting Redis
 * `maxmemory-policy`, which forgets high-water marks or records when memory fills — is
 * `blocking`: the gateway refuses to start unless `store.acceptRisks` names it.
 */
import { existsSync, realpathSync, readFileSync, statfsSync } from 'node:fs'
import { dirname, resolve, sep } from 'node:path'
import { Cluster, Redis } from 'ioredis'
import pg from 'pg'
import type { Config } from '../config/schema.js'
import type { Logger } from '../log.js'
import type { Store, StoreKind } from './types.js'
import { openStore } from './index.js'

export type FindingStatus = 'ok' | 'risk' | 'unknown'

export interface Finding {
  /** what was looked at: persistence, maxmemory-policy, replication, cluster, synchronous_commit, fsync, standbys, recovery, journal_mode, synchronous, filesystem, durability */
  id: string
  status: FindingStatus
  /** the settings read and their values, e.g. `appendonly no, save ""` */
  setting: string
  /** what it means for the guarantees, in one sentence */
  consequence: string
  /** breaks a guarantee outright: start-up is refused unless `store.acceptRisks` names `id` */
  blocking?: true
  /** the node(s) it was read on (a Redis Cluster's masters) */
  nodes?: string[]
}

export interface DoctorReport {
  store: StoreKind
  /** where the settings were read: host:port, the database, the file */
  target: string
  findings: Finding[]
  /** blocking risks that `store.acceptRisks` does not name: the gateway would not start */
  refused: Finding[]
}

/** A gateway refusing to start on a blocking risk. */
export class RiskRefused extends Error {
  constructor(readonly findings: Finding[]) {
    super(findings.map((f) => `${f.setting}: ${f.consequence}`).join(' '))
    this.name = 'RiskRefused'
  }
}

/** How long reading the settings may take before they count as unknown, ms. */
const READ_TIMEOUT_MS = 5000

const withTimeout = <T>(p: Promise<T>, ms: number, what: string): Promise<T> => {
  let t: NodeJS.Timeout
  const late = new Promise<never>((_, reject) => { t = setTimeout(() => reject(new Error(`${what} did not answer within ${ms} ms`)), ms) })
  return Promise.race([p, late]).finally(() => clearTimeout(t))
}

/**
 * Reads the settings of the configured store and what they mean.
 * @param store the opened store, when there is one (sqlite: its own connection's pragmas)
 * @throws Error when the store cannot be reached at all
 */
export async function inspectStore(config: Config['store'], store?: Store): Promise<DoctorReport> {
  let target: string
  let findings: Finding[]
  switch (config.kind) {
    case 'memory':
      target = 'this process'
      findings = [{ id: 'durability', status: 'risk', setting: 'store.kind memory', consequence: 'Marks and records live in this process only: a restart forgets them all without anyone being told (a new process starts empty), and a second gateway process would keep its own.' }]
      break
    case 'sqlite':
      target = config.path
      findings = sqliteFindings(config, store)
      break
    case 'redis':
      target = config.url!.split(',').map((u) => { try { return new URL(u.trim()).host } catch { return u } }).join(',')
      findings = await withTimeout(redisFindings(config), READ_TIMEOUT_MS * 2, 'Redis')
      break
    case 'postgres': {
      const u = new URL(config.url!)
      target = `${u.host}${u.pathname}`
      findings = await withTimeout(postgresFindings(config), READ_TIMEOUT_MS, 'PostgreSQL')
      break
    }
  }
  const accepted = new Set<string>(config.acceptRisks ?? [])
  return { store: config.kind, target, findings, refused: findings.filter((f) => f.blocking && !accepted.has(f.id)) }
}

// ------------------------------------------------------------------ redis

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
  if (cluster) {
    // the cluster finding is made once, over every master (redisFindings)
  } else if (n.info.get('cluster_enabled') === '1') {
    out.push({ id: 'cluster', status: 'risk', setting: 'cluster_enabled 1, store.cluster false', consequence: 'This node is part of a Redis Cluster but the store is configured as one server: most keys would answer MOVED. Set store.cluster: true.' })
  }
  return out
}

async function redisFindings(config: Config['store']): Promise<Finding[]> {
  const urls = config.url!.split(',').map((u) => u.trim()).filter(Boolean)
  if (!config.cluster) {
    const conn = new Redis(urls[0], { lazyConnect: true, enableOfflineQueue: false, maxRetriesPerRequest: 0, connectTimeout: Math.max(config.timeout, 1000), retryStrategy: () => null })
    conn.on('error', () => {})
    try {
      await conn.connect()
      const u = new URL(urls[0])
      return nodeFindings(await readNode(conn, `${u.hostname}:${u.port || 6379}`), config.replicas, false)
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
      tls: first.protocol === 'rediss:' ? {} : undefined,
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
    const out = [...merged.values()]
    out.push({
      id: 'cluster', status: state === 'ok' ? 'ok' : 'risk', setting: `Redis Cluster, ${masters.length} master${masters.length === 1 ? '' : 's'}, cluster_state ${state}`,
      consequence: state === 'ok'
        ? 'Each slot\'s marks and records live on one master: a master that fails over loses what its replica had not received, and one that comes back empty shows through the copies of the epoch marker in every block of slots.'
        : 'The cluster is not serving every slot: requests whose keys are in an unserved slot fail closed (503).',
      nodes: masters.map((m) => `${m.options.host}:${m.options.port}`),
    })
    return out
  } finally {
    cluster.disconnect()
  }
}

// ------------------------------------------------------------------ postgres

async function postgresFindings(config: Config['store']): Promise<Finding[]> {
  const client = new pg.Client({ connectionString: config.url, connectionTimeoutMillis: Math.max(config.timeout, 1000), fallback_application_name: 'fencegate doctor' })
  client.on('error', () => {})
  await client.connect()
  try {
    const show = async (name: string) => String((await client.query(`SHOW ${name}`)).rows[0][name])
    const syncCommit = await show('synchronous_commit')
    const fsync = await show('fsync')
    const standbyNames = await show('synchronous_standby_names')
    const inRecovery = (await client.query('SELECT pg_is_in_recovery() AS r')).rows[0].r === true
    // rows are visible without privileges; a role without pg_monitor sees them with empty details
    const streaming = inRecovery ? 0 : Number((await client.query('SELECT count(*)::int AS n FROM pg_stat_replication').catch(() => ({ rows: [{ n: NaN }] }))).rows[0].n)
    const out: Finding[] = []
    out.push(inRecovery
      ? { id: 'recovery', status: 'risk', setting: 'pg_is_in_recovery() true', consequence: 'This PostgreSQL is a standby (read-only): every write fails, so fenced and idempotent requests fail closed (503). Point store.url at the primary.' }
      : { id: 'recovery', status: 'ok', setting: 'pg_is_in_recovery() false', consequence: 'A primary: it takes the writes.' })
    out.push(fsync === 'on'
      ? { id: 'fsync', status: 'ok', setting: 'fsync on', consequence: 'Committed data reaches the disk: a crash of the PostgreSQL host keeps every mark and record it acknowledged.' }
      : { id: 'fsync', status: 'risk', setting: `fsync ${fsync}`, consequence: 'PostgreSQL does not force its writes to disk: a crash or power loss of its host can lose or corrupt committed marks and records (a stale write can then pass, a retry be forwarded again).' })
    out.push(syncCommit === 'off'
      ? { id: 'synchronous_commit', status: 'risk', setting: 'synchronous_commit off', consequence: 'PostgreSQL answers a commit before it is on disk: a crash can lose the last moments of acknowledged marks and records (up to three times wal_writer_delay), and the loss is not detected.' }
      : { id: 'synchronous_commit', status: 'ok', setting: `synchronous_commit ${syncCommit}`, consequence: 'A commit is on disk (in the WAL) before PostgreSQL answers: a crash keeps every acknowledged mark and record.' })
    const waits = standbyNames !== '' && (syncCommit === 'on' || syncCommit === 'remote_write' || syncCommit === 'remote_apply')
    if (inRecovery) {
      // a standby's own standbys say nothing about where the writes go
    } else if (waits) {
      out.push({ id: 'standbys', status: 'ok', setting: `synchronous_standby_names '${standbyNames}', synchronous_commit ${syncCommit}`, consequence: `Commits wait for the synchronous standby${syncCommit === 'remote_write' ? ' to have them in memory (remote_write: not yet on its disk)' : ''}: a failover to it keeps every acknowledged mark and record.` })
    } else if (standbyNames !== '') {
      out.push({ id: 'standbys', status: 'risk', setting: `synchronous_standby_names '${standbyNames}', synchronous_commit ${syncCommit}`, consequence: `synchronous_commit ${syncCommit} does not wait for the standbys: a failover can lose the last commits, and a mark that falls back lets a stale write pass.` })
    } else if (streaming > 0) {
      out.push({ id: 'standbys', status: 'risk', setting: `synchronous_standby_names '', ${streaming} standby${streaming === 1 ? '' : 's'} streaming`, consequence: 'The standbys replicate asynchronously: a failover to one can lose the last commits — marks fall back (a stale write can pass), records vanish (a retry is forwarded again) — and fencegate cannot tell.' })
    } else {
      out.push({ id: 'standbys', status: 'ok', setting: `synchronous_standby_names '', ${Number.isNaN(streaming) ? 'standbys not visible' : 'no standby streaming'}`, consequence: 'No standby to fail over to (none seen): nothing is lost to a failover; while PostgreSQL is down, fenced routes answer 503. If a standby is added later, make it synchronous.' })
    }
    return out
  } finally {
    await client.end().catch(() => {})
  }
}

// ------------------------------------------------------------------ sqlite

/** statfs f_type magic numbers (linux/magic.h) of filesystems the file should not be on. */
const FS_MAGIC: Record<number, string> = {
  0x01021994: 'tmpfs', 0x858458f6: 'ramfs', 0x6969: 'nfs', 0x517b: 'smb', 0xff534d42: 'cifs', 0xfe534d42: 'smb2',
  0x65735546: 'fuse', 0x00c36400: 'ceph', 0x01021997: '9p', 0x794c7630: 'overlay', 0x0bd00bd0: 'lustre', 0x47504653: 'gpfs',
}
const IN_MEMORY = new Set(['tmpfs', 'ramfs'])
const NETWORK = new Set(['nfs', 'nfs4', 'smb', 'smb2', 'smbfs', 'cifs', 'ceph', '9p', 'lustre', 'gpfs', 'glusterfs', 'fuse.sshfs', 'fuse.glusterfs', 'fuse.s3fs', 'fuse.gcsfuse', 'fuse.rclone', 'afs', 'ocfs2', 'gfs2'])

/** The filesystem of `path`'s folder: /proc/mounts' type of its mount point, else statfs's magic. */
export function filesystemOf(path: string): { type: string; mount?: string } {
  let dir = dirname(resolve(path))
  try { dir = realpathSync(dir) } catch { /* not created yet: the path as given */ }
  let best: { type: string; mount: string } | undefined
  try {
    for (const line of readFileSync('/proc/mounts', 'utf8').split('\n')) {
      const [, mountRaw, type] = line.split(' ')
      if (!mountRaw || !type) continue
      const mount = mountRaw.replace(/\\([0-7]{3})/g, (_, o: string) => String.fromCharCode(parseInt(o, 8)))
      const under = mount === '/' || dir === mount || dir.startsWith(mount.endsWith(sep) ? mount : mount + sep)
      if (under && (!best || mount.length >= best.mount.length)) best = { type, mount }
    }
  } catch { /* not Linux */ }
  if (best) return best
  try {
    const t = Number(statfsSync(dir).type)
    return { type: FS_MAGIC[t] ?? `0x${t.toString(16)}` }
  } catch {
    return { type: 'unknown' }
  }
}

function sqliteFindings(config: Config['store'], store?: Store): Finding[] {
  const out: Finding[] = []
  const own = store as (Store & { settings?: () => { journalMode: string; synchronous: number } }) | undefined
  const real = typeof own?.settings === 'function' ? own.settings() : undefined
  const journal = real?.journalMode ?? 'wal'
  const sync = real ? (['off', 'normal', 'full', 'extra'][real.synchronous] ?? String(real.synchronous)) : config.synchronous
  const src = real ? '' : ' (as configured; the store was not opened)'
  if (journal === 'wal') out.push({ id: 'journal_mode', status: 'ok', setting: `journal_mode wal${src}`, consequence: 'Write-ahead log: a process killed mid-write leaves the file consistent, and the other gateway processes on this host keep reading while one writes.' })
  else if (journal === 'memory' || journal === 'off') out.push({ id: 'journal_mode', status: 'risk', setting: `journal_mode ${journal}`, consequence: 'No journal on disk: a process killed mid-transaction can leave the file corrupt, marks and records with it.' })
  else out.push({ id: 'journal_mode', status: 'ok', setting: `journal_mode ${journal}`, consequence: 'A rollback journal: a crash leaves the file consistent (fencegate sets WAL itself; this file is in another mode).' })
  if (sync === 'full' || sync === 'extra') out.push({ id: 'synchronous', status: 'ok', setting: `synchronous ${sync}${src}`, consequence: 'Every commit is on disk before the request is forwarded: a process crash, a kernel crash or a power loss keeps every mark and record.' })
  else if (sync === 'normal') out.push({ id: 'synchronous', status: 'risk', setting: `synchronous normal${src}`, consequence: 'A process crash loses nothing, but a power loss or kernel crash can lose the last commits — a mark falls back (a stale write can pass), a record vanishes — unnoticed. Set store.synchronous: full where the host may lose power.' })
  else out.push({ id: 'synchronous', status: 'risk', setting: `synchronous ${sync}`, consequence: 'SQLite does not wait for the disk: an operating-system crash or power loss can lose commits or corrupt the file.' })
  if (config.path === ':memory:') {
    out.push({ id: 'filesystem', status: 'risk', setting: 'path :memory:', consequence: 'The database lives in this process\'s memory: a restart forgets every mark and record, unnoticed.' })
    return out
  }
  const fs = filesystemOf(config.path)
  const where = `${fs.type}${fs.mount ? ` on ${fs.mount}` : ''}`
  if (IN_MEMORY.has(fs.type)) out.push({ id: 'filesystem', status: 'risk', setting: `file on ${where}`, consequence: 'The file lives in memory (tmpfs): a reboot empties it, and the gateway starting afterwards creates a new, empty file — every high-water mark and record forgotten, and no one told. Put store.path on a disk.' })
  else if (NETWORK.has(fs.type) || fs.type.startsWith('nfs')) out.push({ id: 'filesystem', status: 'risk', setting: `file on ${where}`, consequence: 'A network filesystem: SQLite\'s locks are not reliable there, so two gateway processes can both take the write lock and interleave a check-and-set (two writers accepted, one key claimed twice), and the file can be corrupted. Keep store.path on a local disk.' })
  else if (fs.type === 'overlay') out.push({ id: 'filesystem', status: 'risk', setting: `file on ${where}`, consequence: 'The file is in a container\'s writable layer: removing or replacing the container loses it, and the next gateway starts with an empty file, unnoticed. Mount a volume at store.path\'s folder.' })
  else out.push({ id: 'filesystem', status: 'ok', setting: `file on ${where}`, consequence: 'A local filesystem: the file outlives the process and, with its locks, serves several gateway processes of this host.' })
  return out
}

// ------------------------------------------------------------------ start-up and output

/**
 * At start-up: reads the settings, logs one line, and refuses to start on a blocking risk that
 * `store.acceptRisks` does not name. A store that cannot be read (down: the gateway starts
 * without it) is logged and left for `fencegate doctor`.
 * @returns the report, or undefined when the settings could not be read
 * @throws RiskRefused
 */
export async function checkAtStart(config: Config, log: Logger, store?: Store): Promise<DoctorReport | undefined> {
  let report: DoctorReport
  try {
    report = await inspectStore(config.store, store)
  } catch (e) {
    log.warn('store settings could not be read; run `fencegate doctor` once the store answers', { store: config.store.kind, error: (e as Error).message })
    return undefined
  }
  logReport(report, log)
  if (report.refused.length) throw new RiskRefused(report.refused)
  return report
}

/** The start-up line: every finding, risks first; warn when there is a risk. */
export function logReport(report: DoctorReport, log: Logger): void {
  const risks = report.findings.filter((f) => f.status !== 'ok')
  const fields = {
    store: report.store, target: report.target,
    risks: risks.map((f) => `${f.status} ${f.id} (${f.setting}): ${f.consequence}`).join(' | ') || undefined,
    ok: report.findings.filter((f) => f.status === 'ok').map((f) => `${f.id} (${f.setting})`).join('; ') || undefined,
    refused: report.refused.map((f) => f.id).join(', ') || undefined,
  }
  if (risks.length) log.warn(`store settings: ${risks.length} risk${risks.length === 1 ? '' : 's'} to the guarantees (fencegate doctor explains)`, fields)
  else log.info('store settings: ok', fields)
}

/** The report for people. */
export function formatDoctor(r: DoctorReport): string {
  const out = [`fencegate doctor: ${r.store} store at ${r.target}`, '']
  for (const f of [...r.findings].sort((a, b) => rank(a) - rank(b))) {
    out.push(`  ${f.status.toUpperCase().padEnd(7)} ${f.id}: ${f.setting}${f.nodes && f.nodes.length > 1 ? `  (${f.nodes.length} nodes)` : f.nodes ? `  (${f.nodes[0]})` : ''}`)
    out.push(`          ${f.consequence}`)
  }
  out.push('')
  const risks = r.findings.filter((f) => f.status === 'risk').length
  out.push(r.refused.length
    ? `The gateway refuses to start with this store: ${r.refused.map((f) => f.id).join(', ')} ${r.refused.length === 1 ? 'breaks' : 'break'} a guarantee outright. Fix the setting, or name it in store.acceptRisks.`
    : risks ? `${risks} risk${risks === 1 ? '' : 's'}: the guarantees hold only as far as the sentences above allow (the audit report's claim lists them too).` : 'No risk found in the settings fencegate reads.')
  return out.join('\n')
}

const rank = (f: Finding) => (f.blocking ? 0 : f.status === 'risk' ? 1 : f.status === 'unknown' ? 2 : 3)

/** The claim's sentences from the findings (src/audit/guarantees.ts). */
export function claimSentences(r: DoctorReport): string[] {
  return r.findings.map((f) => `Measured on the live ${r.store} store (${f.status}: ${f.setting}${f.nodes && f.nodes.length > 1 ? `, on ${f.nodes.length} masters` : ''}): ${f.consequence}`)
}

/**
 * The settings as a running gateway reports them (the audit report's claim): read at most once
 * per `maxAgeMs`, starting from the start-up report; undefined while the store cannot be read.
 */
export function settingsReader(config: Config['store'], store: Store | undefined, first: DoctorReport | undefined, maxAgeMs = 60_000): () => Promise<DoctorReport | undefined> {
  let last = first
  let at = first ? Date.now() : 0
  let reading: Promise<DoctorReport | undefined> | undefined
  return () => {
    if (last && Date.now() - at < maxAgeMs) return Promise.resolve(last)
    reading ??= inspectStore(config, store).then((r) => { last = r; at = Date.now(); return r }, () => last).finally(() => { reading = undefined })
    return reading
  }
}

/**
 * `fencegate doctor --config PATH [--json]`. Exit 0: the settings were read and none refuses
 * start-up (risks are reported, not failed on); 1: the store cannot be read, or a blocking risk
 * not named in store.acceptRisks would stop the gateway from starting.
 */
export async function doctorCommand(config: Config, args: { json?: boolean }): Promise<{ code: number; stdout?: string; stderr?: string[] }> {
  let store: Store | undefined
  try {
    // sqlite: the pragmas of a connection opened as the gateway opens it (a file not made yet is not created)
    if (config.store.kind === 'sqlite' && config.store.path !== ':memory:' && existsSync(config.store.path)) store = await openStore(config.store, config.audit)
    const report = await inspectStore(config.store, store)
    const code = report.refused.length ? 1 : 0
    return { code, stdout: args.json ? `${JSON.stringify(report, null, 2)}\n` : `${formatDoctor(report)}\n`, stderr: code ? [`fencegate doctor: the gateway would refuse to start: ${report.refused.map((f) => f.id).join(', ')} (see above; store.acceptRisks)`] : undefined }
  } catch (e) {
    return { code: 1, stderr: [`fencegate doctor: cannot read the ${config.store.kind} store's settings: ${(e as Error).message}`] }
  } finally {
    await store?.close().catch(() => {})
  }
}
