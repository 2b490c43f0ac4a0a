/**
 * What a settings probe finds (src/store/<engine>/settings.ts) and what `fencegate doctor`, the
 * start-up check and the audit report's claim make of it: one finding per setting, `ok`, `risk`
 * or `unknown`, with its consequence in one sentence.
 */
import type { StoreKind } from '../contract/kind.js'

export type FindingStatus = 'ok' | 'risk' | 'unknown'

export interface Finding {
  /** what was looked at: persistence, maxmemory-policy, replication, cluster, shard (one per Redis Cluster master), synchronous_commit, fsync, standbys, recovery, journal_mode, synchronous, filesystem, disk, durability, clock, tls; state-loss (a loss note), loss-accepted (the last accept-loss) */
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
  /** finding `shard`: the master, its slots and replicas as read */
  shard?: ShardView
}

/** One Redis Cluster shard as `fencegate doctor` read it (INFO replication on its master). */
export interface ShardView {
  /** host:port */
  master: string
  /** inclusive slot ranges */
  slots: [number, number][]
  /** master_repl_offset, bytes */
  offset: number
  /** the replicas connected to it; behindBytes is the master's offset less the one the replica acknowledged, lagSeconds the time since its last acknowledgement */
  replicas: { node: string; state: string; offset: number; behindBytes: number; lagSeconds: number }[]
  /** store.replicas */
  wanted: number
  /** at least `wanted` replicas connected: its writes are served */
  covered: boolean
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
