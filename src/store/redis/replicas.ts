/**
 * How the Redis store sends its writes, and `replicas: N`: after a write the request relies on
 * — an accepted fence (an equal token rewrites the mark, so the wait covers a mark another
 * gateway wrote), a claim, a finish, a release, a resolution — the store sends `WAIT N timeout`
 * on the connection that carried the write and answers only when N replicas acknowledged it;
 * fewer is a StoreError (503), and a claim it made is given back first. Concurrent writes on one
 * connection share one WAIT (a WAIT covers every earlier write of its connection), so a replica
 * that stops answering costs each request one timeout, not a queue of them. On a cluster the
 * writes that need a WAIT are sent to the slot's master's own connection (following MOVED and
 * ASK, ./connection.ts `onMaster`), so the WAIT goes where the write went. WAIT narrows the
 * window in which a failover loses an acknowledged write; it does not close it (see docs/stores.md,
 * "Redis replicas and failover").
 */
import { Redis, type Cluster } from 'ioredis'
import { StoreError } from '../contract/store.js'
import { callScript, onMaster, type Conn } from './connection.js'
import type { SequencedReply, SlotSequencedReply } from './replies.js'
import { SEQUENCED, SLOT_SEQUENCED, type Script } from './scripts.js'
import { keySlot } from './keys.js'
import type { ClusterHistory } from './cluster-history.js'
import type { WriteSequence } from '../state-loss/sequence.js'

/** Fewer replicas than asked acknowledged a write in time (or the connection failed under the WAIT). */
export class ReplicaShortfall extends StoreError {
  /** what the write did (the script's answer), for a caller that must undo it */
  result: unknown
  constructor(op: string, readonly acked: number, readonly wanted: number, timeoutMs: number, readonly node?: string, cause?: Error) {
    super(cause
      ? `redis ${op}: the write's WAIT for ${wanted} replica${wanted === 1 ? '' : 's'} failed (${cause.message})${node ? ` (master ${node})` : ''}; the request fails closed`
      : `redis ${op}: ${acked} of ${wanted} replica${wanted === 1 ? '' : 's'} acknowledged the write within ${timeoutMs} ms${node ? ` (master ${node})` : ''}; the request fails closed`, op, { cause, refusal: 'replica_shortfall' })
    this.name = 'ReplicaShortfall'
  }
}

/**
 * `WAIT replicas timeout` on one connection, shared: a caller whose write has been answered
 * joins the WAIT sent next (one that is already running may have been sent before the write),
 * and at most one WAIT runs at a time, so the writes that arrive while it runs share the next.
 */
class Waiter {
  #running?: Promise<number>
  #next?: Promise<number>
  constructor(private readonly conn: Redis | Cluster, private readonly replicas: number, private readonly timeoutMs: number) {}

  /** Resolves with the replicas that acknowledged every write this connection made before the call. */
  acked(): Promise<number> {
    if (!this.#running) {
      const p = this.conn.wait(this.replicas, this.timeoutMs).then(Number)
      this.#running = p
      p.then(() => { this.#running = undefined }, () => { this.#running = undefined })
      return p
    }
    this.#next ??= this.#running.then(() => {}, () => {}).then(() => {
      this.#next = undefined
      return this.acked()
    })
    return this.#next
  }
}

export interface WriterOptions {
  cluster: boolean
  /** replicas that must acknowledge a write; 0: no WAIT */
  replicas: number
  /** WAIT's timeout, ms */
  replicasTimeoutMs: number
  /** cluster: how long `onMaster` keeps trying, ms */
  commandTimeoutMs: number
  /**
   * one server: the write sequence (../state-loss/sequence.ts), its key and the index's write count's
   * (./keys.ts), both advanced by every script but the attempt log's and the reads
   */
  sequence?: { keys: [seq: string, indexWrites: string]; seen: WriteSequence }
  /** cluster: the slots' write sequences (`seqKey`) and what is known of the masters (./cluster-history.ts) */
  slots?: ClusterHistory
}

/** Sends scripts: through the client's own routing, or — to WAIT after a write — on a known connection. */
export class Writer {
  /** one WAIT queue per connection that carries writes (one server: the one connection; cluster: each master's) */
  readonly #waiters = new WeakMap<object, Waiter>()
  /** replicas: the highest sequence answered so far, not yet known to be on the replicas */
  #answered = 0n
  /** cluster with replicas: per connection, the slots' highest sequences answered and not yet covered by a WAIT */
  readonly #pending = new WeakMap<object, Map<number, bigint>>()
  constructor(private readonly redis: Conn, private readonly o: WriterOptions) {}

  /**
   * A script through the client's own routing; no WAIT. On one server with the sequence (see
   * ./scripts.ts `sequenced`): hands it this gateway's highest, remembers the one answered, and
   * answers the script's own answer.
   * @throws StoreWentBack when the store's sequence is below this gateway's highest (nothing was written)
   */
  call<T>(s: Script, keys: string[], args: (string | Buffer)[], buffer: boolean, op = s.name): Promise<T> {
    if (this.o.slots) return this.#callSlot<T>(s, keys, args, buffer, op, false).then((sent) => sent.result)
    const q = this.o.sequence
    if (!q) return callScript<T>(this.redis, s, keys, args, buffer)
    const seen = q.seen.seen
    const k = keys.slice()
    k.push(q.keys[0], q.keys[1])
    const a = args.slice()
    a.push(seen > 0n ? seen.toString() : '')
    return callScript<SequencedReply<T>>(this.redis, SEQUENCED[s.name as keyof typeof SEQUENCED], k, a, buffer).then(([n, r]) => {
      // with replicas a sequence counts once a WAIT covered it: a write the replicas never
      // acknowledged may be lost in a failover without anything acknowledged being lost
      if (this.o.replicas === 0) q.seen.saw(n.toString())
      else if (BigInt(n.toString()) > this.#answered) this.#answered = BigInt(n.toString())
      return r
    }, (e: Error) => {
      const back = /^FGBACK (\d+)/.exec(e?.message ?? '')
      if (back) throw q.seen.wentBack(op, `sequence ${back[1]} after ${seen} was seen`, { signal: 'sequence', now: back[1], was: seen.toString() })
      throw e
    })
  }

  /**
   * Cluster: `s` with its slot's write sequence (./scripts.ts SLOT_SEQUENCED) through the client's
   * own routing, or on the slot master's connection (`conn`, to WAIT there); the answer is checked
   * against what is known of the slot's master before it is handed back (./cluster-history.ts).
   */
  async #callSlot<T>(s: Script, keys: string[], args: (string | Buffer)[], buffer: boolean, op: string, onConn: boolean): Promise<{ conn: Redis | Cluster; result: T }> {
    const history = this.o.slots!
    const slot = keySlot(keys[0])
    const settling = history.check(op, slot)
    if (settling) await settling
    const seen = history.seenIn(slot)
    const k = keys.slice()
    k.push(history.seqKey(slot))
    const a = args.slice()
    a.push(seen > 0n ? seen.toString() : '')
    const script = SLOT_SEQUENCED[s.name as keyof typeof SLOT_SEQUENCED]
    let sent: { conn: Redis | Cluster; result: SlotSequencedReply<T> }
    try {
      sent = onConn ? await onMaster<SlotSequencedReply<T>>(this.redis as Cluster, script, k, a, buffer, this.o.commandTimeoutMs) : { conn: this.redis, result: await callScript<SlotSequencedReply<T>>(this.redis, script, k, a, buffer) }
    } catch (e) {
      const back = /^FGBACK (\d+)/.exec((e as Error)?.message ?? '')
      if (back) throw history.wentBack(op, slot, back[1])
      throw e
    }
    const [n, node, r] = sent.result
    const checking = history.check(op, slot, node.toString())
    if (checking) await checking
    const v = BigInt(n.toString())
    // with replicas a sequence counts once a WAIT covered it (see `acked`)
    if (this.o.replicas === 0) history.saw(slot, v)
    else {
      let p = this.#pending.get(sent.conn)
      if (!p) this.#pending.set(sent.conn, p = new Map())
      if (v > (p.get(slot) ?? 0n)) p.set(slot, v)
    }
    return { conn: sent.conn, result: r }
  }

  /**
   * Runs `s` on the master of `keys[0]`'s slot. Without `replicas` through the client's own
   * routing; with them on a known connection (see `send`), then — when `durable(result)` — WAIT
   * on that same connection.
   * @throws ReplicaShortfall when fewer replicas acknowledged; `result` is then what the script did
   */
  write<T>(op: string, s: Script, keys: string[], args: (string | Buffer)[], buffer: boolean, durable: (r: T) => boolean): Promise<T> {
    if (this.o.replicas === 0) return this.call<T>(s, keys, args, buffer, op)
    return this.#writeAcked(op, s, keys, args, buffer, durable)
  }

  async #writeAcked<T>(op: string, s: Script, keys: string[], args: (string | Buffer)[], buffer: boolean, durable: (r: T) => boolean): Promise<T> {
    const { conn, result } = await this.send<T>(op, s, keys, args, buffer)
    if (durable(result)) await this.acked(op, conn, result)
    return result
  }

  /**
   * Sends a write on a known connection (one server: the one; cluster: the slot master's);
   * resolves with the connection and the script's answer. `op` names the store operation in errors.
   */
  async send<T>(op: string, s: Script, keys: string[], args: (string | Buffer)[], buffer: boolean): Promise<{ conn: Redis | Cluster; result: T }> {
    if (this.o.slots) return this.#callSlot<T>(s, keys, args, buffer, op, true)
    if (this.o.cluster) return onMaster<T>(this.redis as Cluster, s, keys, args, buffer, this.o.commandTimeoutMs)
    return { conn: this.redis, result: await this.call<T>(s, keys, args, buffer, op) }
  }

  /**
   * Resolves once `replicas` replicas acknowledged every write made on `conn` so far.
   * @throws ReplicaShortfall (carrying `result`, what the write did) when fewer did in time
   */
  async acked(op: string, conn: Redis | Cluster, result: unknown): Promise<void> {
    const { replicas, replicasTimeoutMs } = this.o
    let waiter = this.#waiters.get(conn)
    if (!waiter) this.#waiters.set(conn, waiter = new Waiter(conn, replicas, replicasTimeoutMs))
    const node = conn instanceof Redis && this.o.cluster ? `${conn.options.host}:${conn.options.port}` : undefined
    let acked: number
    // every write answered before this call is covered by the WAIT it joins
    const covered = this.#answered
    const coveredSlots = this.#pending.get(conn)
    this.#pending.delete(conn)
    try {
      acked = await waiter.acked()
    } catch (cause) {
      // the connection failed under the WAIT (a master that died): not acknowledged either
      const e = new ReplicaShortfall(op, 0, replicas, replicasTimeoutMs, node, cause as Error)
      e.result = result
      throw e
    }
    if (acked < replicas) {
      const e = new ReplicaShortfall(op, acked, replicas, replicasTimeoutMs, node)
      e.result = result
      throw e
    }
    this.o.sequence?.seen.saw(covered)
    if (coveredSlots) for (const [slot, n] of coveredSlots) this.o.slots?.saw(slot, n)
  }
}
