/** A loss note (../state-loss/note.ts) as a doctor finding. */
import type { Finding } from './findings.js'
import { describeNote, type LossNote } from '../state-loss/note.js'

/**
 * The doctor finding of a loss (id `state-loss`, a risk): from a note, or from what a running
 * gateway saw without one (an epoch marker changed or missing).
 */
export function lossFinding(note: LossNote | undefined, seen?: string): Finding {
  return {
    id: 'state-loss',
    status: 'risk',
    setting: note ? `loss noted in the store, ${describeNote(note)}` : `state lost: ${seen ?? 'the epoch marker changed or is missing'}`,
    consequence: 'The store lost acknowledged writes (high-water marks may have fallen back, idempotency records vanished): every gateway sharing it answers 503 store-state-lost on fenced and idempotent routes and forwards nothing. Once you have checked what was lost and made the old marks irrelevant (workers take new leases), run `fencegate store accept-loss --config PATH --reason TEXT`: it clears this note and every gateway serves again within a second.',
  }
}
