/**
 * The attempt log in PostgreSQL: the fg_audit_v1 table, one INSERT per batch (its rows as one JSON value), read
 * with the SQL the SQLite store shares (../attempt-log/sql.ts), trimmed by the store's reaper.
 */
import type pg from 'pg'
import { auditRow, countsFromRows, entryFromRow, fencedSql, timelineSql } from '../attempt-log/sql.js'
import type { AuditLog } from '../attempt-log/types.js'
import type { Queries } from './queries.js'

/** The store's wrapping of a call: refused after close, errors as StoreError naming `op`. */
type Run = <T>(op: string, fn: () => Promise<T>) => Promise<T>

/** The attempt log on `pool`, every call through the store's `run`. */
export function tableLog(pool: pg.Pool, q: Queries, run: Run): AuditLog {
  return {
    append: (batch) => run('audit_append', async () => {
      if (!batch.length) return
      await pool.query({ ...q.auditAppend, values: [JSON.stringify(batch.map(auditRow))] })
    }),
    query: (since, until, route) => run('audit_query', async () => {
      const { rows } = await pool.query({ ...q.auditQuery, values: [since, until, route ?? null] })
      return countsFromRows(rows)
    }),
    timeline: (filter, since, limit) => run('audit_timeline', async () => {
      const sql = timelineSql(q.auditTable, (n) => `$${n}`, filter, since, limit)
      const { rows } = await pool.query(sql.text, sql.values)
      return rows.map(entryFromRow)
    }),
    fenced: (since, until, route, limit) => run('audit_fenced', async () => {
      const sql = fencedSql(q.auditTable, (n) => `$${n}`, since, until, route, limit)
      const { rows } = await pool.query(sql.text, sql.values)
      return rows.map(entryFromRow)
    }),
  }
}

/** Deletes attempt log entries from before `before` (epoch ms); returns how many. */
export async function reapLog(pool: pg.Pool, q: Queries, before: number): Promise<number> {
  const { rowCount } = await pool.query({ ...q.auditReap, values: [before] })
  return rowCount ?? 0
}
