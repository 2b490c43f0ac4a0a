/** A loss note (../state-loss/note.ts) as a doctor finding, and the last loss an operator accepted. */
import type { Finding } from './findings.js'
import type { AuditEntry } from '../attempt-log/types.js'
import { describeNote, type LossNote } from '../state-loss/note.js'

/**
 * The doctor finding of a loss (id `state-loss`, a risk): from a note, or from what a running
 * gateway saw without one (an epoch marker changed or missing). The setting says what was seen,
 * by which gateway (`host:pid`) and when, and that it is not accepted yet.
 */
export function lossFinding(note: LossNote | undefined, seen?: string): Finding {
  return {
    id: 'state-loss',
    status: 'risk',
    setting: `${note ? `loss noted in the store, ${describeNote(note)}` : `state lost: ${seen ?? 'the epoch marker changed or is missing'}`}; not accepted yet`,
    consequence: 'The store lost acknowledged writes (high-water marks may have fallen back, idempotency records vanished): every gateway sharing it answers 503 store-state-lost on fenced and idempotent routes and forwards nothing. Once you have checked what was lost and made the old marks irrelevant (workers take new leases), run `fencegate store accept-loss --config PATH --reason TEXT`: it clears this note and every gateway serves again within a second.',
  }
}

/**
 * The newest `accept-loss` entry of the attempt log as a finding (id `loss-accepted`, ok): when
 * an operator accepted a loss, who, from which process, and why. Shown while no loss is noted, so
 * that a doctor run after accept-loss still tells that the store's state was lost once.
 * @param entry an entry of kind `accept-loss`
 */
export function acceptedLossFinding(entry: Pick<AuditEntry, 'time' | 'replica' | 'by' | 'reason'>): Finding {
  const ago = Math.max(0, Date.now() - entry.time)
  return {
    id: 'loss-accepted',
    status: 'ok',
    setting: `the last loss of acknowledged state was accepted at ${new Date(entry.time).toISOString()} (${agoText(ago)} ago) by ${entry.by ?? entry.replica}${entry.by ? ` on ${entry.replica}` : ''}: ${entry.reason ? `reason: ${entry.reason}` : 'no reason given'}`,
    consequence: 'The gateways serve on the store as it was when the loss was accepted; marks and records lost before then are gone for good (`fencegate audit --since` lists the operator actions; the loss itself is in the gateways\' logs, "store went back in time" or "store lost its state").',
  }
}

const agoText = (ms: number): string =>
  ms < 120_000 ? `${Math.round(ms / 1000)} s` : ms < 7_200_000 ? `${Math.round(ms / 60_000)} min` : ms < 172_800_000 ? `${Math.round(ms / 3_600_000)} h` : `${Math.round(ms / 86_400_000)} d`
