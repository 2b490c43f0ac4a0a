/**
 * The SQLite settings probe of `fencegate doctor` (../doctor/inspect.ts): journal_mode and synchronous of
 * a connection opened as the gateway opens it, and the filesystem of the file's folder
 * (/proc/mounts, else statfs): tmpfs, a network filesystem, a container's writable layer; and the
 * free space there, with a write the disk refused in the last minute.
 */
import { realpathSync, readFileSync, statfsSync } from 'node:fs'
import { dirname, resolve, sep } from 'node:path'
import type { Config } from '../../config/schema.js'
import type { Store, WriteRefusal } from '../contract/store.js'
import type { Finding } from '../doctor/findings.js'

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

export function sqliteFindings(config: Config['store'], store?: Store): Finding[] {
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
  out.push(diskFinding(config.path, store?.writeRefused?.()))
  return out
}

/** Free space below this is named a risk before the disk fills, bytes. */
const LOW_SPACE = 64 * 2 ** 20

const mib = (bytes: number): string => `${(bytes / 2 ** 20).toFixed(bytes < 10 * 2 ** 20 ? 1 : 0)} MiB`

/** The `disk` finding: the free space of the file's folder, and a write the disk refused lately. */
function diskFinding(path: string, refused?: WriteRefusal): Finding {
  let free: number | undefined
  try {
    const st = statfsSync(dirname(resolve(path)))
    free = Number(st.bavail) * Number(st.bsize)
  } catch { /* the folder is not there yet */ }
  const space = free === undefined ? 'free space unknown' : `${mib(free)} free`
  if (refused) {
    return { id: 'disk', status: 'risk', setting: `${refused.code} ${Math.round((Date.now() - refused.at) / 1000)} s ago; ${space}`, consequence: 'The disk refused the store\'s writes: requests with a new key are refused (503, nothing forwarded), replays and stale-token refusals are still answered, and attempt log entries are dropped (counted). Free space, or move store.path.' }
  }
  if (free !== undefined && free < LOW_SPACE) {
    return { id: 'disk', status: 'risk', setting: space, consequence: `Under ${mib(LOW_SPACE)} left where the file lives: once it is full, requests with a new key are refused (503) until there is room.` }
  }
  // no figure when there is room: the claim sentences that quote this must not change by the byte
  return free === undefined
    ? { id: 'disk', status: 'unknown', setting: space, consequence: 'Whether the disk has room for the store\'s writes is not known.' }
    : { id: 'disk', status: 'ok', setting: `over ${mib(LOW_SPACE)} free`, consequence: 'Room for the store\'s writes.' }
}
