/**
 * The loss note (contract §3): what a gateway saw when it found the store gone back in time,
 * written into the store with a new epoch (`Store.retireEpoch`), so that every gateway sharing
 * the store, one started later and `fencegate doctor` all learn what happened, when and where —
 * until an operator runs `fencegate store accept-loss`, which deletes it.
 *
 * Stored as JSON: Redis `{fg:<prefix>:lossnote}`, the `lossnote` row of the SQLite and PostgreSQL
 * meta tables, a field of the memory store.
 */
import { hostname } from 'node:os'
import type { LossSignal, StoreWentBack } from './sequence.js'

export type { LossSignal }

/** What a gateway saw, in the store until accept-loss. */
export interface LossNote {
  signal: LossSignal
  /** what the store answered: its write sequence, its timeline id, its replication id */
  now: string
  /** what the gateway had seen before: the highest sequence answered, the timeline or replication id it knew */
  was: string
  /** the whole sentence, as logged: "sequence 41 after 57 was seen" */
  seen: string
  /** the store call that met it: fg_fence, claim, markers, reconnect… */
  op: string
  /** when, epoch ms on the noting gateway's clock */
  at: number
  /** the noting gateway process: `host:pid` */
  by: string
}

/** This process, as a note names it. */
const INSTANCE = `${hostname()}:${process.pid}`

/** The note of a refusal met by this process, at `at` (epoch ms). */
export function noteOf(e: StoreWentBack, at = Date.now()): LossNote {
  return { signal: e.signal, now: e.now, was: e.was, seen: e.seen, op: e.op, at, by: INSTANCE }
}

/** JSON, as stored. */
export const encodeNote = (n: LossNote): string => JSON.stringify(n)

/** A stored note; one that does not parse (written by hand, cut short) is kept as its text. */
export function decodeNote(text: string | null | undefined): LossNote | undefined {
  if (text === null || text === undefined) return undefined
  try {
    const n = JSON.parse(text) as Partial<LossNote>
    if (typeof n === 'object' && n !== null && typeof n.seen === 'string') {
      return { signal: n.signal ?? 'sequence', now: String(n.now ?? '?'), was: String(n.was ?? '?'), seen: n.seen, op: String(n.op ?? '?'), at: Number(n.at) || 0, by: String(n.by ?? '?') }
    }
  } catch { /* below */ }
  return { signal: 'sequence', now: '?', was: '?', seen: text.slice(0, 500), op: '?', at: 0, by: '?' }
}

const SIGNAL: Record<LossSignal, string> = {
  'sequence': 'write sequence',
  'timeline': 'PostgreSQL timeline',
  'replication-id': 'Redis replication id',
}

/** One line: "write sequence: sequence 41 after 57 was seen (by host:123 at 2026-…Z, on fg_fence)". */
export function describeNote(n: LossNote): string {
  return `${SIGNAL[n.signal] ?? n.signal}: ${n.seen} (by gateway ${n.by} at ${n.at ? new Date(n.at).toISOString() : '?'}, on ${n.op})`
}
