/**
 * Deleting what expired in PostgreSQL (records, registrations), in batches: rows another
 * transaction holds are skipped (`FOR UPDATE SKIP LOCKED`), so replicas reaping at once do not
 * queue behind each other.
 */
import type pg from 'pg'
import type { Named } from './queries.js'

/**
 * Runs `query` (now, batch) until it deletes fewer than `batch` rows, at most `maxBatches`
 * times, or the store closed; returns how many. `now` null: the server's clock.
 */
export async function reapIn(pool: pg.Pool, query: Named, now: number | null, batch: number, maxBatches: number, closed: () => boolean): Promise<number> {
  let total = 0
  for (let i = 0; i < maxBatches && !closed(); i++) {
    const { rowCount } = await pool.query({ ...query, values: [now, batch] })
    total += rowCount ?? 0
    if ((rowCount ?? 0) < batch) break
  }
  return total
}
