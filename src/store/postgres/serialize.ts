/**
 * `fencing.serialize: store` in PostgreSQL: the registrations of a resource's writes in flight
 * (registrationsSchemaSql, ./sql.ts), group-committed like the fences (./batches.ts) except the
 * read of the older ones; the answers' instants on this process's clock. A schema without the
 * registrations' table says so (./errors.ts).
 */
import type pg from 'pg'
import type { StoreClock } from '../shared/clock.js'
import type { OlderWrites, Registration } from '../contract/store.js'
import type { GroupCommit } from './batches.js'
import { registrationsMissing } from './errors.js'
import type { Queries } from './queries.js'

/** `now` null: the server's clock. */
export async function register(batches: GroupCommit, clock: StoreClock, call: { resource: string; token: bigint; id: string; holdMs: number; now: number | null }): Promise<Registration> {
  const r = await batches.register(call).catch((e) => { throw registrationsMissing(e) })
  return r.registered && r.oldest !== undefined ? { ...r, until: clock.toLocal(r.until) } : r
}

export async function olderRegistered(pool: pg.Pool, q: Queries, clock: StoreClock, resource: string, token: bigint, now: number | null): Promise<OlderWrites> {
  const { rows } = await pool.query<{ oldest: string | null; until: string }>({
    ...q.olderRegistered,
    values: [resource, token.toString(), now],
  }).catch((e) => { throw registrationsMissing(e) })
  const r = rows[0]
  return r.oldest === null ? { until: 0 } : { oldest: BigInt(r.oldest), until: clock.toLocal(Number(r.until)) }
}
