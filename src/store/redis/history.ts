/**
 * A failover seen through Redis's replication ids (INFO replication): a primary has a
 * `master_replid`; a replica promoted to primary takes a new one and keeps its former primary's as
 * `master_replid2`, while a restarted primary simply has a new one. So the primary the gateway knew
 * was replaced by a replica exactly when the new primary's `master_replid2` is the id it knew.
 * Without `store.replicas` (no WAIT) that replica may lack acknowledged writes — writes no gateway
 * may ever have seen answered, so the write sequence (../state-loss/sequence.ts) alone cannot tell — and the
 * failover itself counts as state loss. A restart is left to the sequence and the epoch marker.
 * Not seen: two failovers between two looks (the second primary's replid2 is the first's).
 */
import type { WriteSequence } from '../state-loss/sequence.js'

/** A primary's replication ids. */
export interface ReplicationIds {
  /** master_replid */
  id: string
  /** master_replid2: the id it took over from when promoted; all zeros otherwise */
  previous: string
}

/** INFO replication's ids; undefined when the server does not say (a proxy, an old Redis). */
export async function replicationIds(conn: { info(section: string): Promise<string> }): Promise<ReplicationIds | undefined> {
  const info = await conn.info('replication')
  const id = /^master_replid:(\w+)/m.exec(info)?.[1]
  const previous = /^master_replid2:(\w+)/m.exec(info)?.[1] ?? ''
  return id ? { id, previous } : undefined
}

/** The primary one gateway process follows. */
export class ReplicationHistory {
  #known?: string

  constructor(
    /** true without store.replicas: a promoted replica may lack acknowledged writes */
    private readonly failoverIsLoss: boolean,
    private readonly sequence: WriteSequence,
  ) {}

  /**
   * The ids read now: remembered; a replica promoted in place of the known primary is reported.
   * @throws StoreWentBack (after telling the sequence's listeners) on such a failover without store.replicas
   */
  observe(ids: ReplicationIds | undefined, op: string): void {
    if (!ids || ids.id === this.#known) return
    const was = this.#known
    this.#known = ids.id
    if (was !== undefined && ids.previous === was && this.failoverIsLoss) {
      throw this.sequence.wentBack(op, `a replica took over as primary (replication id ${ids.id}, was ${was}) while store.replicas was 0: writes it had not received are lost`, { signal: 'replication-id', now: ids.id, was })
    }
  }
}
