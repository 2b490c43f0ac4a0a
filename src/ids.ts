/**
 * Request and claim ids: UUID-shaped (RFC 9562 §5.4 layout, 36 characters), unique across
 * processes and restarts by a random base drawn once per 2^48 ids (74 random bits), and unique
 * within the process by a counter in the last 48 bits. One id costs a counter step and a short
 * hex string (about 70 ns, half a `randomUUID()`; two per keyed request). Not secret and not
 * unguessable: nothing may rely on an id being hard to guess.
 */
import { randomUUID } from 'node:crypto'

const COUNTER_SPAN = 2 ** 48
let base = ''
let n = COUNTER_SPAN

/** A new id, `xxxxxxxx-xxxx-4xxx-yxxx-cccccccccccc` (c: a per-process counter, hex). */
export function newId(): string {
  if (n >= COUNTER_SPAN) {
    base = randomUUID().slice(0, 24)
    n = Math.floor(Math.random() * 2 ** 32) // a fresh base starts anywhere: ids of two bases never line up
  }
  return base + (n++).toString(16).padStart(12, '0')
}
