/**
 * A Redis Cluster that went back in time, master by master (contract §3, state loss). Redis
 * Cluster replicates asynchronously: a master answers a write before its replica has it, and a
 * failover to that replica loses it (Redis Cluster specification, "Write safety").
 *
 * Two signals, as on one server (./history.ts, ../state-loss/sequence.ts), per master:
 * - a write sequence per slot, `{fg:<prefix>:q:<n>}` (./keys.ts), advanced by every write script
 *   on that slot (./scripts.ts SLOT_SEQUENCED); this gateway remembers the highest it saw answered
 *   in each slot and hands it to the next write there: a slot below it refuses before writing
 *   (FGBACK). On a failover every slot of the promoted master that this gateway wrote is read
 *   back too, so a loss shows even where it writes no more.
 * - the masters' replication ids and offsets (INFO replication), looked at on every state poll
 *   and whenever a write is answered by a master this gateway did not know for its slot (every
 *   write script answers its master's node id): a master that is a promoted replica of a master
 *   known here (its `master_replid2`) and, with `store.replicas: 0`, took over behind the offset
 *   that master had when last looked at, lost writes. A master whose connection is gone (killed,
 *   still in the slot map) keeps its last view, so the replica promoted in its place is compared
 *   with it rather than taken for a new master.
 * A failover neither shows as lossy is not trusted at once with `store.replicas: 0`: the promoted
 * master's slots refuse writes (StoreError, 503) for `settleHoldMs`, long enough for
 * every running gateway's poll to compare its own writes and leave a loss note, then the note is
 * read.
 *
 * A loss is the store's: the epoch is retired with a note naming the node and its slots, and
 * every slot fails closed until accept-loss (a resource's mark and its keys' records may be on
 * different masters; see docs/stores.md).
 * Not seen: writes answered by a gateway that then stopped before its next poll, made after this
 * gateway's last look at their master; and those of a gateway that runs but cannot look for longer
 * than the hold (cut off from the cluster, paused), made after the other gateways' last look.
 */
import type { Cluster, Redis } from 'ioredis'
import { StoreError } from '../contract/errors.js'
import type { WriteSequence } from '../state-loss/sequence.js'
import { STATE_POLL_MS } from '../state-loss/watch.js'

/** One master as a look saw it: its address and node id, its slots, its replication. */
export interface MasterView {
  /** host:port */
  node: string
  nodeId: string
  /** inclusive slot ranges */
  slots: [number, number][]
  /** master_replid, master_replid2 (all zeros unless promoted), second_repl_offset (−1 unless promoted), master_repl_offset */
  replid: string
  previous: string
  secondOffset: number
  offset: number
  /** connected_slaves */
  replicas: number
  /** the replicas' links as the master lists them (slave0, slave1, …) */
  links: ReplicaLink[]
}

/** One replica of a master, from the master's INFO replication `slaveN:ip=…,port=…,state=…,offset=…,lag=…`. */
interface ReplicaLink {
  /** host:port */
  node: string
  /** online, wait_bgsave, send_bulk */
  state: string
  /** the replication offset it acknowledged, bytes */
  offset: number
  /** seconds since its last acknowledgement */
  lag: number
}

/** The `slaveN:` lines of an INFO replication answer. */
function replicaLinks(info: string): ReplicaLink[] {
  return [...info.matchAll(/^slave\d+:(.*)$/gm)].map((m) => {
    const f = new Map(m[1].trim().split(',').map((kv) => kv.split('=') as [string, string]))
    return { node: `${f.get('ip') ?? '?'}:${f.get('port') ?? '?'}`, state: f.get('state') ?? '?', offset: Number(f.get('offset') ?? 0), lag: Number(f.get('lag') ?? 0) }
  })
}

/** "0-5460, 10923" */
export const slotRanges = (slots: [number, number][]): string => slots.map(([a, b]) => (a === b ? `${a}` : `${a}-${b}`)).join(', ')

/**
 * Every master of the cluster now: CLUSTER SLOTS, then INFO replication on each master's own
 * connection. A master whose connection is not open is left out.
 */
export async function readMasters(cluster: Cluster): Promise<MasterView[]> {
  const reply = await cluster.cluster('SLOTS')
  const byId = new Map<string, { node: string; slots: [number, number][] }>()
  for (const [a, b, master] of reply) {
    if (!master) continue
    const [host, port, id] = master
    const m = byId.get(id) ?? { node: `${host}:${port}`, slots: [] }
    m.slots.push([a, b])
    byId.set(id, m)
  }
  const conns = new Map<string, Redis>(cluster.nodes('all').map((n) => [`${n.options.host}:${n.options.port}`, n]))
  const views = await Promise.all([...byId].map(async ([nodeId, m]) => {
    const conn = conns.get(m.node)
    if (!conn) return undefined
    const info = await conn.info('replication')
    const field = (f: string) => new RegExp(`^${f}:(\\S+)`, 'm').exec(info)?.[1] ?? ''
    return {
      node: m.node, nodeId, slots: m.slots.sort((x, y) => x[0] - y[0]),
      replid: field('master_replid'), previous: field('master_replid2'),
      secondOffset: Number(field('second_repl_offset') || -1), offset: Number(field('master_repl_offset') || 0),
      replicas: Number(field('connected_slaves') || 0),
      links: replicaLinks(info),
    } satisfies MasterView
  }))
  return views.filter((v): v is MasterView => v !== undefined)
}

/**
 * With store.replicas N (N > 0): "shard 127.0.0.1:7001 (slots 0-5460) has 0 of 1 replicas
 * connected: its writes are refused (503)", one per master short of N.
 */
export function shortfalls(views: MasterView[], replicas: number): string[] {
  if (replicas === 0) return []
  return views.filter((v) => v.replicas < replicas).map((v) =>
    `shard ${v.node} (slots ${slotRanges(v.slots)}) has ${v.replicas} of ${replicas} replica${replicas === 1 ? '' : 's'} connected: its writes are refused (503)`)
}

/**
 * How long a promoted master's slots refuse writes with store.replicas 0, ms: long enough for
 * every other running gateway to see the promotion, compare its own writes and leave its loss
 * note. From the promotion, another gateway's look then in flight ends within `lookMs` (it is
 * given up past that), its next poll comes within STATE_POLL_MS, that look ends within `lookMs`,
 * and the note is one SET answered within `commandTimeoutMs`.
 * @param commandTimeoutMs the store's command timeout, ms (2 × store.timeout); a look is given up after as long
 */
export const settleHoldMs = (commandTimeoutMs: number): number => STATE_POLL_MS + 3 * commandTimeoutMs

interface ClusterHistoryOptions {
  /** store.replicas 0: a failover may lose acknowledged writes (no WAIT) */
  failoverIsLoss: boolean
  /** how long a promoted master's slots refuse writes before they are trusted, ms (`settleHoldMs`) */
  settleMs: number
  /** how long a look at the masters may take before it is given up and the next starts afresh, ms */
  lookMs: number
  /** the gateway's write sequence: its listeners hear of a loss, its reset clears the slots' */
  sequence: WriteSequence
  /** the sequence key of a slot */
  seqKey(slot: number): string
  /** the loss note's key, read once a failover settled */
  noteKey: string
}

/** What one gateway process knows of the cluster's masters, and the highest sequence it saw in each slot. */
export class ClusterHistory {
  /** slot → the highest sequence answered there (with replicas: acknowledged by them) */
  readonly #seen = new Map<number, bigint>()
  /** slot → node id of its master at the last look */
  readonly #slotMaster = new Map<number, string>()
  /** node id → the view of the last look */
  #views = new Map<string, MasterView>()
  /** node id → until when its slots refuse writes, and why */
  readonly #settling = new Map<string, { until: number; why: string; slots: [number, number][] }>()
  #looking?: Promise<void>
  /** the looks started; only the latest keeps what it read */
  #looks = 0
  /** the last look's masters, for /readyz and doctor */
  last: MasterView[] = []

  constructor(private readonly cluster: Cluster, private readonly o: ClusterHistoryOptions) {
    o.sequence.onReset(() => this.#seen.clear())
  }

  /** The write sequence key of `slot` (its name hashes to the slot). */
  seqKey(slot: number): string {
    return this.o.seqKey(slot)
  }

  /** The highest sequence seen in `slot`; 0n when none. */
  seenIn(slot: number): bigint {
    return this.#seen.get(slot) ?? 0n
  }

  /** A write in `slot` was answered (or acknowledged) with sequence `n`. */
  saw(slot: number, n: bigint): void {
    if (n > (this.#seen.get(slot) ?? 0n)) this.#seen.set(slot, n)
  }

  /** A FGBACK answer: the slot is below what was seen. @returns the error to throw (its listeners told) */
  wentBack(op: string, slot: number, now: string): Error {
    const was = this.seenIn(slot)
    const node = this.cluster.slots[slot]?.[0] ?? '?'
    return this.o.sequence.wentBack(op, `sequence ${now} after ${was} was seen in slot ${slot} (master ${node})`, { signal: 'sequence', now, was: was.toString() })
  }

  /**
   * Before a write in `slot`, and after its answer came from master `nodeId`: a master not known
   * for the slot is looked at first. Synchronous — undefined, nothing to wait for — unless a
   * master is looked at or one whose hold has just ended has its loss note read: the hot path of
   * a cluster write awaits nothing here while no failover settles.
   * @throws StoreWentBack on a loss; StoreError while the slot's master settles (thrown, or the promise rejects)
   */
  check(op: string, slot: number, nodeId?: string): Promise<void> | undefined {
    if (nodeId !== undefined && this.#views.size && this.#slotMaster.get(slot) !== nodeId) return this.look(op).then(() => this.#settled(op, nodeId))
    if (!this.#settling.size) return undefined
    const master = nodeId ?? this.#slotMaster.get(slot)
    return master === undefined ? undefined : this.#settled(op, master)
  }

  /** Refuses while `master` settles; once its hold ended, reads whether a gateway left a loss note meanwhile. */
  #settled(op: string, master: string): Promise<void> | undefined {
    const s = this.#settling.get(master)
    if (!s) return undefined
    if (Date.now() < s.until) throw new StoreError(`redis ${op}: ${s.why}; slots ${slotRanges(s.slots)} refuse writes until every gateway has compared its own writes`, op, { refusal: 'failover_settling' })
    this.#settling.delete(master)
    // settled: a gateway that found its writes missing has left a note by now
    return this.cluster.get(this.o.noteKey).then((note) => {
      if (note !== null) throw new StoreError(`redis ${op}: a gateway noted a state loss; this gateway's watch takes it up`, op)
    })
  }

  /**
   * Looks at every master (one look at a time, shared); one that takes longer than `lookMs` (a
   * dead master's connection) is given up, so the next poll looks afresh: the settle hold counts
   * on it. A loss the given-up look still finds is reported all the same.
   * @throws StoreWentBack on a loss; StoreError when the look is given up
   */
  look(op: string): Promise<void> {
    if (this.#looking) return this.#looking
    const n = ++this.#looks
    let timer: NodeJS.Timeout | undefined
    const limit = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new StoreError(`redis ${op}: the masters did not all answer within ${this.o.lookMs} ms`, op)), this.o.lookMs)
    })
    this.#looking = Promise.race([this.#look(op, n), limit]).finally(() => {
      clearTimeout(timer)
      this.#looking = undefined
    })
    return this.#looking
  }

  async #look(op: string, n: number): Promise<void> {
    const views = await readMasters(this.cluster)
    const before = this.#views
    const after = new Map(views.map((v) => [v.nodeId, v]))
    // a master this look could not read (its connection closed: killed, not yet replaced in the
    // slot map) keeps its last view until a replica promoted in its place was compared with it;
    // without it that replica would pass for a new master whose keys are all there
    for (const [id, p] of before) if (!after.has(id) && !views.some((v) => v.previous === p.replid)) after.set(id, p)
    // the views are kept only once compared: a look that fails half-way compares again next time
    const keep = () => {
      if (n !== this.#looks) return
      this.#views = after
      this.last = views
      for (const v of views) for (const [a, b] of v.slots) for (let s = a; s <= b; s++) this.#slotMaster.set(s, v.nodeId)
    }
    if (!before.size) return keep()
    const losses: string[] = []
    let first: { v: MasterView; was?: MasterView } | undefined
    for (const v of views) {
      const prev = before.get(v.nodeId)
      if (prev && prev.replid === v.replid && v.offset >= prev.offset) continue
      const was = [...before.values()].find((p) => p.replid === v.previous)
      // a new master that is no promoted replica and no restart (a slot moved to it) keeps its keys
      if (!prev && !was) continue
      const why: string[] = []
      if (was && this.o.failoverIsLoss && v.secondOffset - 1 < was.offset) {
        why.push(`replica ${v.node} took over from ${was.node} at replication offset ${v.secondOffset - 1}, behind the ${was.offset} its master had when last looked at`)
      }
      if (prev && !was) why.push(`master ${v.node} restarted with replication ${v.replid}:${v.offset} (was ${prev.replid}:${prev.offset})`)
      const behind = await this.#behind(v)
      if (behind) why.push(behind)
      if (why.length && (was || behind)) {
        losses.push(`${why.join('; ')}: slots ${slotRanges(v.slots)}`)
        first ??= { v, was }
      } else if (this.o.failoverIsLoss) {
        const how = was ? `replica ${v.node} took over from ${was.node}` : `master ${v.node} restarted`
        this.#settling.set(v.nodeId, { until: Date.now() + this.o.settleMs, why: how, slots: v.slots })
      }
    }
    keep()
    if (first) {
      throw this.o.sequence.wentBack(op, losses.join(' | '), { signal: first.was ? 'replication-id' : 'sequence', now: first.v.replid, was: first.was?.replid ?? before.get(first.v.nodeId)?.replid ?? '?' })
    }
  }

  /** The slots of `v` this gateway wrote, read back: the first below what was seen, described. */
  async #behind(v: MasterView): Promise<string | undefined> {
    const mine = [...this.#seen].filter(([s]) => v.slots.some(([a, b]) => s >= a && s <= b))
    const now = await Promise.all(mine.map(([s]) => this.cluster.get(this.o.seqKey(s))))
    const back = mine.map(([s, seen], j) => ({ s, seen, now: now[j] ?? '0' })).filter((x) => BigInt(x.now) < x.seen)
    if (!back.length) return undefined
    const [first] = back
    return `slot ${first.s} at sequence ${first.now} after ${first.seen} was seen (${back.length} slot${back.length === 1 ? '' : 's'} of ${v.node} behind)`
  }
}
