/**
 * The PostgreSQL store's schema, made or brought up to date: `fencegate migrate`, and start-up
 * unless `store.migrate: false`.
 */
import type { ConnectionOptions } from 'node:tls'
import pg from 'pg'
import { pgConnection } from '../shared/tls.js'
import { randomUUID } from 'node:crypto'
import { StoreError } from '../contract/store.js'
import { queries, type Queries } from './queries.js'
import { migrateSql, registrationsSchemaSql, schemaSql } from './sql.js'
import { sequenceSchemaSql } from './sequence.js'

const IDENT = /^[a-z_][a-z0-9_]{0,62}$/

/**
 * Quotes a validated schema name.
 * @throws TypeError when it is not a lower-case SQL identifier
 */
export const quoted = (schema: string): string => {
  if (!IDENT.test(schema)) throw new TypeError('options.schema must be a lower-case SQL identifier ([a-z_][a-z0-9_]*, at most 63 characters)')
  return `"${schema}"`
}

/**
 * Creates or updates the schema (idempotent; replicas may run it at once: an advisory lock
 * serialises them).
 * @param options.url postgres:// URL; `schema` default "public"; `connectTimeoutMs` default 5000; `tls` store.tls's node:tls options
 * @returns the schema and its epoch (written the first time, then kept)
 * @throws StoreError when the database cannot be reached or refuses
 */
export async function migratePostgres(options: { url: string; schema?: string; connectTimeoutMs?: number; tls?: ConnectionOptions }): Promise<{ schema: string; epoch: string }> {
  const schema = options.schema ?? 'public'
  const s = quoted(schema)
  const q = queries(s)
  const client = new pg.Client({ ...pgConnection(options.url, options.tls), connectionTimeoutMillis: options.connectTimeoutMs ?? 5000, fallback_application_name: 'fencegate migrate' })
  client.on('error', () => {})
  try {
    await client.connect()
    await client.query('BEGIN')
    await client.query(migrateSql.lock)
    // CREATE SCHEMA needs CREATE on the database even when the schema exists: a role given a
    // schema made for it by an administrator has no such right, and needs none
    const exists = await client.query(migrateSql.schemaExists, [schema])
    if (!exists.rowCount) await client.query(migrateSql.createSchema(s))
    await client.query(schemaSql(s))
    await client.query(registrationsSchemaSql(s))
    await client.query(sequenceSchemaSql(s))
    await client.query(q.epochWrite, [randomUUID()])
    const { rows } = await client.query(q.epochRead)
    await client.query('COMMIT')
    return { schema, epoch: rows[0].value as string }
  } catch (e) {
    await client.query('ROLLBACK').catch(() => {})
    throw new StoreError(`cannot migrate PostgreSQL schema ${schema}: ${(e as Error).message}`, 'migrate', { cause: e })
  } finally {
    await client.end().catch(() => {})
  }
}

/**
 * The newest pieces of the schema this version uses, by the migration that made them: the v4
 * admit batch (the claim's probe; made with the marks' since, the attempt log's upstream_ms,
 * late_ms and highest_token, fg_take_probe_v1 and fg_settle_unknown_v1), the v4 settle batch with
 * the records' after_reason and after_next, the write sequence, and the leases (contract §3a:
 * fg_lease_many_v1 with its table and functions, the attempt log's lease_until). Each is checked
 * because a schema without it opens but fails every call that needs it.
 */
const NEWEST = {
  functions: ['fg_admit_many_v4', 'fg_settle_many_v4', 'fg_seq_v1', 'fg_lease_many_v1'],
  columns: ['fg_audit_v1.highest_token', 'fg_audit_v1.lease_until', 'fg_records_v1.after_reason', 'fg_records_v1.after_next'],
}

/**
 * The pieces of NEWEST the schema lacks (functions by name, columns as `table.column`).
 * @returns none when the schema is up to date
 */
export async function schemaMissing(pool: pg.Pool, q: Queries, schema: string): Promise<string[]> {
  const { rows } = await pool.query<{ missing: string }>(q.upToDate, [NEWEST.functions, quoted(schema), NEWEST.columns, schema])
  return rows.map((r) => r.missing)
}
