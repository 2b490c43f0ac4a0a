/**
 * The statements the PostgreSQL store sends, for the (validated, quoted) schema `s`: the state
 * markers, the request path's batches (one call of a function of ./functions.ts each), the reads,
 * the reaping, the attempt log and the registrations of `fencing.serialize: store`.
 */
import { AUDIT_COLUMNS, auditQuerySql } from '../attempt-log/sql.js'

/** The attempt log's columns that are not text, with their types (fg_audit_v1, ./schema.ts). */
const AUDIT_CASTS: Partial<Record<(typeof AUDIT_COLUMNS)[number], string>> = {
  time: 'bigint', abandoned: 'smallint', duplicate: 'smallint', overtaken: 'smallint', status: 'integer', upstream_status: 'integer',
  duration_ms: 'double precision', upstream_ms: 'double precision', late_ms: 'double precision', lease_until: 'bigint',
}

/** A statement prepared under `name` on each connection that runs it (pg: one text per name). */
export interface Named { name: string; text: string }

/** The statements the store sends, for the schema `s`. */
export function queries(s: string) {
  const named = (name: string, text: string): Named => ({ name, text })
  return {
    // state markers (Store.markers); migrate writes the epoch too
    epochWrite: `INSERT INTO ${s}.fg_meta_v1 (name, value) VALUES ('epoch', $1) ON CONFLICT (name) DO NOTHING`,
    epochRead: `SELECT value FROM ${s}.fg_meta_v1 WHERE name = 'epoch'`,
    markers: `SELECT name, value FROM ${s}.fg_meta_v1 WHERE name IN ('epoch', 'accepted', 'lossnote')`,
    /** $1 the epoch: accepted, and the loss note deleted, in one statement */
    acceptEpoch: `WITH gone AS (DELETE FROM ${s}.fg_meta_v1 WHERE name = 'lossnote')
      INSERT INTO ${s}.fg_meta_v1 (name, value) VALUES ('accepted', $1) ON CONFLICT (name) DO UPDATE SET value = excluded.value`,
    /** $1 a new epoch, $2 the loss note (JSON): both in one statement */
    retireEpoch: `WITH noted AS (INSERT INTO ${s}.fg_meta_v1 (name, value) VALUES ('lossnote', $2) ON CONFLICT (name) DO UPDATE SET value = excluded.value)
      UPDATE ${s}.fg_meta_v1 SET value = $1 WHERE name = 'epoch'`,
    lossNote: `SELECT value FROM ${s}.fg_meta_v1 WHERE name = 'lossnote'`,
    /**
     * the newest pieces of the schema that are missing, none when it is up to date: each named
     * migration piece is a function ($1, bare names, looked up in the schema $2, quoted) or an
     * attempt-log or records column ($3, `table.column`, in the schema whose bare name is $4)
     */
    upToDate: `SELECT f AS missing FROM unnest($1::text[]) AS f WHERE to_regproc($2 || '.' || f) IS NULL
      UNION ALL
      SELECT c FROM unnest($3::text[]) AS c WHERE NOT EXISTS (SELECT 1 FROM information_schema.columns
        WHERE table_schema = $4 AND table_name = split_part(c, '.', 1) AND column_name = split_part(c, '.', 2))`,
    /** the server's clock, epoch ms (../clock.ts measures the offset with it) */
    clock: named('fg_clock', 'SELECT (extract(epoch FROM clock_timestamp()) * 1000)::float8 AS ms'),
    ping: named('fg_ping', `SELECT 1 FROM ${s}.fg_meta_v1 LIMIT 1`),

    // high-water marks
    highest: named('fg_highest', `SELECT highest::text AS highest FROM ${s}.fg_fences_v1 WHERE resource = $1`),
    mark: named('fg_mark', `SELECT highest::text AS highest, since FROM ${s}.fg_fences_v1 WHERE resource = $1`),

    // every now below is $n::bigint, NULL for the server's clock (fg_now_ms_v1)

    // the request path's batches (./batches.ts): one call of a *_many function each
    fenceMany: named('fg_fence_many_v2', `SELECT o_i, o_accepted, o_highest, o_since, o_raised FROM ${s}.fg_fence_many_v2($1::text[], $2::bigint[], $3::bigint[])`),
    claimMany: named('fg_claim_many_v3', `SELECT * FROM ${s}.fg_claim_many_v3($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bigint[], $7::bigint[], $8::boolean[], $9::bigint[], $10::text[])`),
    admitMany: named('fg_admit_many_v4', `SELECT * FROM ${s}.fg_admit_many_v4($1::text[], $2::bigint[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::bigint[], $9::bigint[], $10::boolean[], $11::bigint[], $12::text[])`),
    settleMany: named('fg_settle_many_v4', `SELECT * FROM ${s}.fg_settle_many_v4($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bigint[], $7::integer[], $8::text[], $9::bytea[], $10::text[], $11::bigint[], $12::bigint[])`),

    // idempotency records off the group commit
    /** $1 leaseMs, $6 now */
    renew: named('fg_renew_v2', `UPDATE ${s}.fg_records_v1 SET lease_until = coalesce($6::bigint, ${s}.fg_now_ms_v1()) + $1
          WHERE route = $2 AND scope = $3 AND key = $4 AND claim_id = $5 AND state = 'in_flight'`),
    /** $5 now, $6 ttlMs */
    resolve: named('fg_resolve_v2', `SELECT r.* FROM (SELECT coalesce($5::bigint, ${s}.fg_now_ms_v1()) AS n) t, ${s}.fg_resolve_v1($1, $2, $3, $4, t.n, t.n + $6::bigint) r`),
    /** idempotency.settle: $4 seen, $5 afterMs, $6 nextInMs, $7 now */
    takeProbe: named('fg_take_probe_v1', `SELECT * FROM ${s}.fg_take_probe_v1($1, $2, $3, $4::integer, $5::bigint, $6::bigint, $7::bigint)`),
    /** idempotency.settle: $4 probes, $5 applied | not_applied, $6 ttlMs, $7–$9 the response, $10 now */
    settleUnknown: named('fg_settle_unknown_v1', `SELECT * FROM ${s}.fg_settle_unknown_v1($1, $2, $3, $4::integer, $5, $6::bigint, $7::integer, $8, $9::bytea, $10::bigint)`),
    unknowns: named('fg_unknowns_v3', `SELECT route, scope, key, state, reason, lease_until, expires_at, probe, probes, next_probe FROM ${s}.fg_records_v1,
            (SELECT coalesce($1::bigint, ${s}.fg_now_ms_v1()) AS n) t
          WHERE state IN ('unknown', 'in_flight') AND (state = 'unknown' OR lease_until <= t.n) AND expires_at > t.n
            AND ($2::text IS NULL OR route = $2) LIMIT $3`),
    /** $1 now or NULL (the server's clock), $2 route, $3 scope, $4 key */
    unknownRecord: named('fg_unknown_record_v1', `SELECT route, scope, key, state, reason, lease_until, expires_at, probe, probes, next_probe FROM ${s}.fg_records_v1,
            (SELECT coalesce($1::bigint, ${s}.fg_now_ms_v1()) AS n) t
          WHERE route = $2 AND scope = $3 AND key = $4
            AND state IN ('unknown', 'in_flight') AND (state = 'unknown' OR lease_until <= t.n) AND expires_at > t.n`),
    reap: named('fg_reap_v2', `DELETE FROM ${s}.fg_records_v1 WHERE (route, scope, key) IN (
          SELECT route, scope, key FROM ${s}.fg_records_v1 WHERE expires_at <= coalesce($1::bigint, ${s}.fg_now_ms_v1()) LIMIT $2 FOR UPDATE SKIP LOCKED)`),

    // the attempt log (its SQL, shared with SQLite: ../attempt-log/sql.ts)
    auditTable: `${s}.fg_audit_v1`,
    /** $1 since, $2 until (epoch ms), $3 route or NULL for every route */
    auditQuery: named('fg_audit_query', auditQuerySql(`${s}.fg_audit_v1`, (n) => n === 3 ? '$3::text' : `$${n}::bigint`)),
    /**
     * a batch of entries in one INSERT, whatever its size: $1 a JSON array of rows, each an array
     * in AUDIT_COLUMNS order (auditRow). One statement prepared once and one value bound, not a
     * text of 26 placeholders an entry, parsed by the server for every batch
     */
    auditAppend: named('fg_audit_append_v1', `INSERT INTO ${s}.fg_audit_v1 (${AUDIT_COLUMNS.join(', ')})
          SELECT ${AUDIT_COLUMNS.map((c, i) => (AUDIT_CASTS[c] ? `(r->>${i})::${AUDIT_CASTS[c]}` : `r->>${i}`)).join(', ')}
          FROM json_array_elements($1::json) AS r`),
    auditReap: named('fg_audit_reap', `DELETE FROM ${s}.fg_audit_v1 WHERE time < $1`),

    // fencing.serialize: store
    registerMany: named('fg_register_many_v2', `SELECT * FROM ${s}.fg_register_many_v2($1::text[], $2::bigint[], $3::text[], $4::bigint[], $5::bigint[])`),
    unregisterMany: named('fg_unregister_many_v2', `SELECT ${s}.fg_unregister_many_v2($1::text[], $2::text[], $3::bigint[], $4::bigint[])`),
    olderRegistered: named('fg_older_registered_v2', `SELECT min(token)::text AS oldest, coalesce(max(deadline), 0)::text AS until FROM ${s}.fg_registrations_v1
          WHERE resource = $1 AND token < $2 AND deadline > coalesce($3::bigint, ${s}.fg_now_ms_v1())`),
    registrationsReap: named('fg_registrations_reap_v2', `DELETE FROM ${s}.fg_registrations_v1 WHERE (resource, id) IN (
          SELECT resource, id FROM ${s}.fg_registrations_v1 WHERE deadline <= coalesce($1::bigint, ${s}.fg_now_ms_v1()) LIMIT $2 FOR UPDATE SKIP LOCKED)`),
  }
}

export type Queries = ReturnType<typeof queries>
