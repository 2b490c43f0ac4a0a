/**
 * `fencing.serialize: store`: the registrations of forwarded fenced writes, as the stores that
 * compute in this process (memory, and redis for the read-only `olderRegistered`) keep and read
 * them. The rules, shared by every store (src/store/contract/store.ts, `register`):
 * - a registration is live while its deadline is after `now`; an expired one counts for nothing
 *   and may be deleted by anyone;
 * - "older" is strictly below the asked token: equal tokens (one lease holder writing many times)
 *   never wait for each other;
 * - tokens compare as BigInt, never as JS numbers.
 * See src/fencing/window.ts for why they exist and the order they are made in.
 */
import type { OlderWrites } from '../contract/store.js'

/** One registered write: its token and until when it counts (epoch ms). */
export interface Registered {
  token: bigint
  deadline: number
}

/** The older writes among `entries` live at `now`: the lowest token below `token`, and their latest deadline. */
export function olderOf(entries: Iterable<Registered>, token: bigint, now: number): OlderWrites {
  let oldest: bigint | undefined
  let until = 0
  for (const e of entries) {
    if (e.deadline <= now || e.token >= token) continue
    if (oldest === undefined || e.token < oldest) oldest = e.token
    if (e.deadline > until) until = e.deadline
  }
  return oldest === undefined ? { until: 0 } : { oldest, until }
}
