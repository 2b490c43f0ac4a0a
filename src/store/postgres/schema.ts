/**
 * The PostgreSQL store's tables and indexes (DDL), every name qualified with the (validated,
 * quoted) schema `s` (./migrate.ts `quoted`). Idempotent: tables are created if missing and
 * columns added later come as `ADD COLUMN IF NOT EXISTS`, so a schema of any older version is
 * brought up to date and a newer one is left as it is. ./sql.ts applies them with the functions.
 */

/** The fences, the idempotency records, the state markers (fg_meta_v1) and the attempt log. */
export const tables = (s: string): string => `CREATE TABLE IF NOT EXISTS ${s}.fg_meta_v1 (name text PRIMARY KEY, value text NOT NULL);
CREATE TABLE IF NOT EXISTS ${s}.fg_fences_v1 (resource text PRIMARY KEY, highest bigint NOT NULL CHECK (highest >= 0));
-- when the mark was first accepted (epoch ms); NULL for marks from before it was kept
ALTER TABLE ${s}.fg_fences_v1 ADD COLUMN IF NOT EXISTS since bigint;
CREATE TABLE IF NOT EXISTS ${s}.fg_records_v1 (
  route text NOT NULL, scope text NOT NULL, key text NOT NULL,
  state text NOT NULL CHECK (state IN ('in_flight', 'completed', 'not_stored', 'unknown')),
  fingerprint text NOT NULL, claim_id text NOT NULL,
  lease_until bigint NOT NULL, expires_at bigint NOT NULL,
  status integer, headers text, body bytea, reason text,
  PRIMARY KEY (route, scope, key)
);
-- in flight: the unknown outcome this claim took over (its o_after), kept when its lease lapses
-- into an unknown outcome, so that its release puts that outcome back (fg_release_v1)
ALTER TABLE ${s}.fg_records_v1 ADD COLUMN IF NOT EXISTS after_reason text;
-- idempotency.settle: the filled probe request (in flight or unknown), the probes taken and when
-- the next is due (epoch ms); in flight, those of the unknown outcome the claim took over, which
-- its release puts back
ALTER TABLE ${s}.fg_records_v1 ADD COLUMN IF NOT EXISTS probe text;
ALTER TABLE ${s}.fg_records_v1 ADD COLUMN IF NOT EXISTS probes integer;
ALTER TABLE ${s}.fg_records_v1 ADD COLUMN IF NOT EXISTS next_probe bigint;
ALTER TABLE ${s}.fg_records_v1 ADD COLUMN IF NOT EXISTS after_probe text;
ALTER TABLE ${s}.fg_records_v1 ADD COLUMN IF NOT EXISTS after_probes integer;
ALTER TABLE ${s}.fg_records_v1 ADD COLUMN IF NOT EXISTS after_next bigint;
CREATE INDEX IF NOT EXISTS fg_records_v1_expires ON ${s}.fg_records_v1 (expires_at);
CREATE INDEX IF NOT EXISTS fg_records_v1_unsettled ON ${s}.fg_records_v1 (route) WHERE state IN ('unknown', 'in_flight');

CREATE TABLE IF NOT EXISTS ${s}.fg_audit_v1 (
  time bigint NOT NULL, kind text NOT NULL, replica text NOT NULL, route text NOT NULL, method text,
  resource text, token text, key_hash text, fingerprint text, outcome text, result text, unknown text,
  abandoned smallint NOT NULL DEFAULT 0, duplicate smallint NOT NULL DEFAULT 0, overtaken smallint NOT NULL DEFAULT 0,
  status integer, upstream_status integer, duration_ms double precision, trace_id text, resolution text
);
ALTER TABLE ${s}.fg_audit_v1 ADD COLUMN IF NOT EXISTS request_id text;
ALTER TABLE ${s}.fg_audit_v1 ADD COLUMN IF NOT EXISTS reason text;
ALTER TABLE ${s}.fg_audit_v1 ADD COLUMN IF NOT EXISTS actor text;
ALTER TABLE ${s}.fg_audit_v1 ADD COLUMN IF NOT EXISTS upstream_ms double precision;
ALTER TABLE ${s}.fg_audit_v1 ADD COLUMN IF NOT EXISTS late_ms double precision;
ALTER TABLE ${s}.fg_audit_v1 ADD COLUMN IF NOT EXISTS highest_token text;
ALTER TABLE ${s}.fg_audit_v1 ADD COLUMN IF NOT EXISTS lease_until bigint;
CREATE INDEX IF NOT EXISTS fg_audit_v1_time ON ${s}.fg_audit_v1 (time);
CREATE INDEX IF NOT EXISTS fg_audit_v1_key ON ${s}.fg_audit_v1 (route, key_hash, time);
`

/**
 * `fencing.serialize: store` (src/fencing/window.ts): the registered writes. fg_register_many_v2
 * takes the resource's mark row FOR SHARE before it reads it and writes the registration: a fence
 * raising that mark (its INSERT … ON CONFLICT DO UPDATE locks the row) waits until the
 * registration is committed, and a registration made while such a fence is under way waits for it
 * and then reads the raised mark (READ COMMITTED re-reads a row it waited for). Batches take the
 * mark rows in resource order, as the fence batches do: no deadlock between them.
 */
export const registrationsTable = (s: string): string => `CREATE TABLE IF NOT EXISTS ${s}.fg_registrations_v1 (
  resource text NOT NULL, id text NOT NULL, token bigint NOT NULL CHECK (token >= 0), deadline bigint NOT NULL,
  PRIMARY KEY (resource, id)
);
CREATE INDEX IF NOT EXISTS fg_registrations_v1_deadline ON ${s}.fg_registrations_v1 (deadline);
`
