/**
 * The SQLite store's SQL text: the layout, what brings a file made by an older version up to it,
 * and every statement the engine prepares. The engine (./index.ts) decides what to run when; the
 * text is here, in one place, to read and review as SQL.
 *
 * The schema version is in the table names (`_v1`), so a future layout can sit beside this one.
 * Tokens are INTEGER (SQLite's 64-bit signed integer holds 0 … 2^63−1 exactly; read with
 * safeIntegers), times are epoch ms.
 */
import { AUDIT_COLUMNS } from '../attempt-log/sql.js'

/** The layout: markers, marks, idempotency records and the attempt log. */
export const SCHEMA = `
CREATE TABLE IF NOT EXISTS fg_meta_v1 (name TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS fg_fences_v1 (resource TEXT PRIMARY KEY, highest INTEGER NOT NULL, since INTEGER) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS fg_records_v1 (
  id TEXT PRIMARY KEY, state TEXT NOT NULL, fingerprint TEXT NOT NULL, claim_id TEXT NOT NULL,
  lease_until INTEGER NOT NULL, expires_at INTEGER NOT NULL,
  status INTEGER, headers TEXT, body BLOB, reason TEXT, after_reason TEXT,
  probe TEXT, probes INTEGER, next_probe INTEGER, after_probe TEXT, after_probes INTEGER, after_next INTEGER
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS fg_records_v1_expires ON fg_records_v1 (expires_at);
CREATE INDEX IF NOT EXISTS fg_records_v1_unsettled ON fg_records_v1 (state) WHERE state IN ('unknown', 'in_flight');
CREATE TABLE IF NOT EXISTS fg_audit_v1 (
  time INTEGER NOT NULL, kind TEXT NOT NULL, replica TEXT NOT NULL, route TEXT NOT NULL, method TEXT,
  resource TEXT, token TEXT, key_hash TEXT, fingerprint TEXT, outcome TEXT, result TEXT, unknown TEXT,
  abandoned INTEGER NOT NULL DEFAULT 0, duplicate INTEGER NOT NULL DEFAULT 0, overtaken INTEGER NOT NULL DEFAULT 0,
  status INTEGER, upstream_status INTEGER, duration_ms REAL, trace_id TEXT, resolution TEXT, request_id TEXT,
  reason TEXT, actor TEXT, upstream_ms REAL, late_ms REAL, highest_token TEXT, lease_until INTEGER
);
CREATE INDEX IF NOT EXISTS fg_audit_v1_time ON fg_audit_v1 (time);
CREATE INDEX IF NOT EXISTS fg_audit_v1_key ON fg_audit_v1 (route, key_hash, time);
`

/**
 * `fencing.serialize: store`: the forwarded fenced writes registered by every process sharing the
 * file (src/fencing/window.ts); a row counts while its deadline (epoch ms) is ahead.
 */
export const REGISTRATIONS_SCHEMA = `
CREATE TABLE IF NOT EXISTS fg_registrations_v1 (
  resource TEXT NOT NULL, id TEXT NOT NULL, token INTEGER NOT NULL, deadline INTEGER NOT NULL,
  PRIMARY KEY (resource, id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS fg_registrations_v1_deadline ON fg_registrations_v1 (deadline);
`

/**
 * The lease service (contract §3a): one row per resource, beside its mark in fg_fences_v1; a
 * released lease keeps its row (and token) with `released` 1. A file made by an older version gets
 * the table when opened; older gateways never read it.
 */
export const LEASES_SCHEMA = `
CREATE TABLE IF NOT EXISTS fg_leases_v1 (
  resource TEXT PRIMARY KEY, token INTEGER NOT NULL, holder TEXT NOT NULL, expires_at INTEGER NOT NULL,
  ttl_ms INTEGER NOT NULL, released INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;
`

export const LEASES = {
  get: 'SELECT token, holder, expires_at, ttl_ms, released FROM fg_leases_v1 WHERE resource = ?',
  put: 'INSERT OR REPLACE INTO fg_leases_v1 (resource, token, holder, expires_at, ttl_ms, released) VALUES (?, ?, ?, ?, ?, ?)',
} as const

/**
 * Columns added to a table after it was first released, in the order they are added: a file
 * made before them gets them when opened (the attempt log's request ids, operators' reasons,
 * effect durations and stale writers' lateness; the time a mark was first accepted; the unknown
 * outcome an in-flight claim took over, which its release puts back; `idempotency.settle`'s
 * probe request, probe count and next probe time, and those of the outcome a claim took over).
 */
export const ADDED_COLUMNS: readonly (readonly [table: string, column: string, type: 'TEXT' | 'REAL' | 'INTEGER'])[] = [
  ['fg_audit_v1', 'request_id', 'TEXT'],
  ['fg_audit_v1', 'reason', 'TEXT'],
  ['fg_audit_v1', 'actor', 'TEXT'],
  ['fg_audit_v1', 'highest_token', 'TEXT'],
  ['fg_audit_v1', 'upstream_ms', 'REAL'],
  ['fg_audit_v1', 'late_ms', 'REAL'],
  ['fg_fences_v1', 'since', 'INTEGER'],
  ['fg_records_v1', 'after_reason', 'TEXT'],
  ['fg_records_v1', 'probe', 'TEXT'],
  ['fg_records_v1', 'probes', 'INTEGER'],
  ['fg_records_v1', 'next_probe', 'INTEGER'],
  ['fg_records_v1', 'after_probe', 'TEXT'],
  ['fg_records_v1', 'after_probes', 'INTEGER'],
  ['fg_records_v1', 'after_next', 'INTEGER'],
  ['fg_audit_v1', 'lease_until', 'INTEGER'],
]

/** The pragma listing a table's columns (`name` per row). */
export const tableInfo = (table: string): string => `table_info(${table})`

export const addColumn = (table: string, column: string, type: string): string => `ALTER TABLE ${table} ADD COLUMN ${column} ${type}`

/** The state markers (contract §3): `epoch`, the `accepted` one and the loss note (`lossnote`, ../state-loss/note.ts). */
export const META = {
  /** the first epoch: kept when there is one already */
  init: 'INSERT OR IGNORE INTO fg_meta_v1 (name, value) VALUES (?, ?)',
  get: 'SELECT value FROM fg_meta_v1 WHERE name = ?',
  put: 'INSERT OR REPLACE INTO fg_meta_v1 (name, value) VALUES (?, ?)',
  /** the loss note, at accept-loss */
  del: 'DELETE FROM fg_meta_v1 WHERE name = ?',
} as const

/** High-water marks. */
export const FENCES = {
  highest: 'SELECT highest FROM fg_fences_v1 WHERE resource = ?',
  mark: 'SELECT highest, since FROM fg_fences_v1 WHERE resource = ?',
  /** written only after `mark` read a lower mark (or none) in the same BEGIN IMMEDIATE transaction */
  raise: 'INSERT OR REPLACE INTO fg_fences_v1 (resource, highest, since) VALUES (?, ?, ?)',
} as const

/** Idempotency records, one row per `recordId` (src/store/shared/record-state.ts). */
export const RECORDS = {
  get: 'SELECT * FROM fg_records_v1 WHERE id = ?',
  put: `INSERT OR REPLACE INTO fg_records_v1 (id, state, fingerprint, claim_id, lease_until, expires_at, status, headers, body, reason, after_reason,
      probe, probes, next_probe, after_probe, after_probes, after_next)
    VALUES (@id, @state, @fingerprint, @claim_id, @lease_until, @expires_at, @status, @headers, @body, @reason, @after_reason,
      @probe, @probes, @next_probe, @after_probe, @after_probes, @after_next)`,
  delete: 'DELETE FROM fg_records_v1 WHERE id = ?',
  /** lease_until, id, claim_id: only the holder's in-flight record */
  renew: "UPDATE fg_records_v1 SET lease_until = ? WHERE id = ? AND claim_id = ? AND state = 'in_flight'",
  /** the route's records start with its name and a newline (recordId) */
  unknowns: `SELECT id, state, reason, lease_until, expires_at, probe, probes, next_probe FROM fg_records_v1
    WHERE state IN ('unknown', 'in_flight') AND (state = 'unknown' OR lease_until <= @now) AND expires_at > @now
      AND (@route IS NULL OR substr(id, 1, length(@route) + 1) = @route || char(10)) LIMIT @limit`,
  /** up to 1000 expired records at a time */
  reap: 'DELETE FROM fg_records_v1 WHERE id IN (SELECT id FROM fg_records_v1 WHERE expires_at <= ? LIMIT 1000)',
} as const

/** `fencing.serialize: store` (fg_registrations_v1). */
export const REGISTRATIONS = {
  /** resource, token, now: the lowest older token still live and the latest deadline among those */
  older: `SELECT min(token) AS oldest, max(deadline) AS until FROM fg_registrations_v1
    WHERE resource = ? AND token < ? AND deadline > ?`,
  dropExpired: 'DELETE FROM fg_registrations_v1 WHERE resource = ? AND deadline <= ?',
  put: `INSERT INTO fg_registrations_v1 (resource, id, token, deadline) VALUES (?, ?, ?, ?)
    ON CONFLICT (resource, id) DO UPDATE SET token = excluded.token, deadline = excluded.deadline`,
  hold: 'UPDATE fg_registrations_v1 SET deadline = ? WHERE resource = ? AND id = ?',
  drop: 'DELETE FROM fg_registrations_v1 WHERE resource = ? AND id = ?',
  /** up to 1000 expired registrations at a time */
  reap: `DELETE FROM fg_registrations_v1 WHERE (resource, id) IN (
    SELECT resource, id FROM fg_registrations_v1 WHERE deadline <= ? LIMIT 1000)`,
} as const

/** The attempt log table; its queries are shared with PostgreSQL (../attempt-log/sql.ts). */
export const AUDIT_TABLE = 'fg_audit_v1'

export const AUDIT = {
  insert: `INSERT INTO ${AUDIT_TABLE} (${AUDIT_COLUMNS.join(', ')}) VALUES (${AUDIT_COLUMNS.map(() => '?').join(', ')})`,
  /** before, limit: the oldest entries past the retention, a bounded number at a time (by the time index) */
  prune: `DELETE FROM ${AUDIT_TABLE} WHERE rowid IN (SELECT rowid FROM ${AUDIT_TABLE} WHERE time < ? LIMIT ?)`,
} as const
