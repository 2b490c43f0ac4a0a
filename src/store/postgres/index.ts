/**
 * PostgreSQL store (pg), shared by every gateway replica that points at the same database.
 *
 * Tables carry the schema version in their names (like the SQLite store) and live in
 * `store.schema`; `fencegate migrate` creates them, and so does start-up unless
 * `store.migrate: false`. The request path's operations (fence, claim, finish, release) are
 * group-committed: the calls of one operation made in one event-loop turn, or while earlier
 * batches of it run, go as one call of a `*_many` function — one round trip and one transaction
 * for all of them (./batch.ts) — which applies each call as its single-call form would:
 * - fence: `INSERT … ON CONFLICT … DO UPDATE … WHERE highest < token RETURNING`, and when that
 *   returns no row (equal or stale token) a read of the mark, both in one plpgsql function so
 *   the second statement sees the row the first one compared against (or a later one);
 * - claim: a plpgsql function that inserts the record (`ON CONFLICT DO NOTHING`), or else locks
 *   the existing row (`SELECT … FOR UPDATE`) and applies the table of src/store/record-state.ts;
 * - finish and release: one `UPDATE` / `DELETE` guarded by claim_id and state = 'in_flight'.
 * Tokens travel as decimal text and are stored as BIGINT: never a JS number.
 * A reaper deletes expired records in batches of 1000 (`FOR UPDATE SKIP LOCKED`, so replicas
 * reaping at once do not queue behind each other).
 *
 * Failure: the pool never waits for a connection longer than `connectTimeoutMs`, statements are
 * cancelled by the server after `statementTimeoutMs`, and a connection the server ends (restart,
 * pg_terminate_backend, network) is dropped from the pool without crashing the process; the
 * calls that needed it reject with StoreError (503).
 */
import pg from 'pg'
import { randomUUID } from 'node:crypto'
import { StoreError, type AdmitResult, type FenceMark, type FenceRequest, type StateMarkers, type ClaimRequest, type ClaimResult, type Completion, type FenceResult, type RecordKey, type Resolution, type ResolveResult, type Store, type UnknownReason, type UnknownRecord } from '../types.js'
import { AUDIT_COLUMNS, auditQuerySql, auditRow, countsFromRows, entryFromRow, fencedSql, timelineSql } from '../attempt-log/sql.js'
import type { AuditEntry, AuditLog } from '../attempt-log/types.js'
import { batcher } from '../batch.js'
import type { OlderWrites, Registration } from '../types.js'

export interface PostgresStoreOptions {
  /** postgres:// or postgresql:// URL; `?application_name=` names the connections (default "fencegate") */
  url: string
  /** schema holding the tables; created by migrate; default "public" */
  schema?: string
  /** most connections per gateway process; default 10 */
  pool?: number
  /** the server cancels a statement running longer than this, ms; default 5000 */
  statementTimeoutMs?: number
  /** longest wait for a connection (new or from the pool), ms; default 1000 */
  connectTimeoutMs?: number
  /** how often expired records are deleted, ms; default 60000 (0 turns the reaper off) */
  reapIntervalMs?: number
  /** attempt log entries older than this are deleted by the reaper, ms; default 7 days */
  auditRetentionMs?: number
}

const IDENT = /^[a-z_][a-z0-9_]{0,62}$/

/** The schema as SQL, every name qualified with the (validated, quoted) schema. */
function schemaSql(s: string): string {
  return `
CREATE TABLE IF NOT EXISTS ${s}.fg_meta_v1 (name text PRIMARY KEY, value text NOT NULL);
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
CREATE INDEX IF NOT EXISTS fg_audit_v1_time ON ${s}.fg_audit_v1 (time);
CREATE INDEX IF NOT EXISTS fg_audit_v1_key ON ${s}.fg_audit_v1 (route, key_hash, time);

-- an operator settles an unknown outcome (or an in-flight record past its lease):
-- failed deletes the record, completed keeps it as not_stored with status 0
CREATE OR REPLACE FUNCTION ${s}.fg_resolve_v1(
  p_route text, p_scope text, p_key text, p_as text, p_now bigint, p_exp bigint,
  OUT o_kind text, OUT o_reason text, OUT o_state text)
LANGUAGE plpgsql AS $fn$
DECLARE
  r ${s}.fg_records_v1%ROWTYPE;
BEGIN
  SELECT * INTO r FROM ${s}.fg_records_v1 t WHERE t.route = p_route AND t.scope = p_scope AND t.key = p_key FOR UPDATE;
  IF NOT FOUND OR r.expires_at <= p_now THEN o_kind := 'not_found'; RETURN; END IF;
  IF r.state = 'unknown' THEN
    o_reason := coalesce(r.reason, 'crash');
  ELSIF r.state = 'in_flight' AND r.lease_until <= p_now THEN
    o_reason := 'crash';
  ELSE
    o_kind := 'refused'; o_state := r.state; RETURN;
  END IF;
  o_kind := 'resolved';
  IF p_as = 'failed' THEN
    DELETE FROM ${s}.fg_records_v1 t WHERE t.route = p_route AND t.scope = p_scope AND t.key = p_key;
  ELSE
    UPDATE ${s}.fg_records_v1 t SET state = 'not_stored', status = 0, lease_until = 0, expires_at = p_exp,
      headers = NULL, body = NULL, reason = NULL
      WHERE t.route = p_route AND t.scope = p_scope AND t.key = p_key;
  END IF;
END
$fn$;

-- the check-and-set; a mark it raises keeps p_now as its since (o_raised)
CREATE OR REPLACE FUNCTION ${s}.fg_fence_v2(p_resource text, p_token bigint, p_now bigint,
  OUT o_accepted boolean, OUT o_highest text, OUT o_since bigint, OUT o_raised boolean)
LANGUAGE plpgsql AS $fn$
BEGIN
  INSERT INTO ${s}.fg_fences_v1 AS f (resource, highest, since) VALUES (p_resource, p_token, p_now)
  ON CONFLICT (resource) DO UPDATE SET highest = excluded.highest, since = excluded.since WHERE f.highest < excluded.highest
  RETURNING f.highest::text, f.since INTO o_highest, o_since;
  IF FOUND THEN o_accepted := true; o_raised := true; RETURN; END IF;
  -- equal or stale: a new snapshot sees the mark compared against, or a later one
  SELECT f.highest::text, f.since INTO o_highest, o_since FROM ${s}.fg_fences_v1 f WHERE f.resource = p_resource;
  IF o_highest IS NULL THEN RAISE EXCEPTION 'fence: the mark of % disappeared', p_resource; END IF;
  o_accepted := o_highest::bigint = p_token;
  o_raised := false;
END
$fn$;

-- v1, as gateways from before since was kept call it (through the *_many_v1 batches) during a
-- rolling upgrade: the same check-and-set, keeping since on the database's clock
CREATE OR REPLACE FUNCTION ${s}.fg_fence_v1(p_resource text, p_token bigint, OUT o_accepted boolean, OUT o_highest text)
LANGUAGE plpgsql AS $fn$
BEGIN
  SELECT f.o_accepted, f.o_highest INTO o_accepted, o_highest
    FROM ${s}.fg_fence_v2(p_resource, p_token, (extract(epoch FROM clock_timestamp()) * 1000)::bigint) f;
END
$fn$;

CREATE OR REPLACE FUNCTION ${s}.fg_claim_v1(
  p_route text, p_scope text, p_key text, p_fp text, p_cid text,
  p_lease bigint, p_exp bigint, p_retry boolean, p_now bigint,
  OUT o_kind text, OUT o_after text, OUT o_abandoned boolean, OUT o_lease bigint,
  OUT o_status integer, OUT o_headers text, OUT o_body bytea, OUT o_reason text)
LANGUAGE plpgsql AS $fn$
DECLARE
  r ${s}.fg_records_v1%ROWTYPE;
  v_fresh boolean := false;
BEGIN
  FOR attempt IN 1..5 LOOP
    INSERT INTO ${s}.fg_records_v1 (route, scope, key, state, fingerprint, claim_id, lease_until, expires_at)
    VALUES (p_route, p_scope, p_key, 'in_flight', p_fp, p_cid, p_lease, p_exp)
    ON CONFLICT (route, scope, key) DO NOTHING;
    IF FOUND THEN o_kind := 'claimed'; RETURN; END IF;
    SELECT * INTO r FROM ${s}.fg_records_v1 t WHERE t.route = p_route AND t.scope = p_scope AND t.key = p_key FOR UPDATE;
    EXIT WHEN FOUND;
    -- released or reaped between the two statements: try the insert again
  END LOOP;
  IF r.state IS NULL THEN RAISE EXCEPTION 'claim: the record kept disappearing'; END IF;

  IF r.expires_at <= p_now THEN
    v_fresh := true; o_kind := 'claimed';
  ELSIF r.fingerprint <> p_fp THEN
    o_kind := 'mismatch';
  ELSIF r.state = 'completed' THEN
    o_kind := 'completed'; o_status := r.status; o_headers := r.headers; o_body := r.body;
  ELSIF r.state = 'not_stored' THEN
    o_kind := 'not_stored'; o_status := coalesce(r.status, 0);
  ELSIF r.state = 'in_flight' THEN
    IF r.lease_until > p_now THEN
      o_kind := 'in_flight'; o_lease := r.lease_until;
    ELSIF p_retry THEN
      v_fresh := true; o_kind := 'claimed'; o_after := 'crash'; o_abandoned := true;
    ELSE
      -- abandoned: its holder crashed or hung past the lease; reported once, then kept as unknown
      UPDATE ${s}.fg_records_v1 t SET state = 'unknown', reason = 'crash'
        WHERE t.route = p_route AND t.scope = p_scope AND t.key = p_key;
      o_kind := 'unknown'; o_reason := 'crash'; o_abandoned := true;
    END IF;
  ELSIF p_retry THEN
    v_fresh := true; o_kind := 'claimed'; o_after := coalesce(r.reason, 'crash');
  ELSE
    o_kind := 'unknown'; o_reason := coalesce(r.reason, 'crash');
  END IF;

  IF v_fresh THEN
    UPDATE ${s}.fg_records_v1 t SET state = 'in_flight', fingerprint = p_fp, claim_id = p_cid,
      lease_until = p_lease, expires_at = p_exp, status = NULL, headers = NULL, body = NULL, reason = NULL
      WHERE t.route = p_route AND t.scope = p_scope AND t.key = p_key;
  END IF;
END
$fn$;

-- Batches (group commit): one round trip and one transaction for many calls of one operation.
-- Each call runs as its single-call function would, in key order (then arrival order), so two
-- batches lock rows in the same order and never deadlock each other; calls of one key run in
-- the order they arrived.
CREATE OR REPLACE FUNCTION ${s}.fg_fence_many_v1(p_resources text[], p_tokens bigint[])
RETURNS TABLE (o_i integer, o_accepted boolean, o_highest text)
LANGUAGE plpgsql AS $fn$
DECLARE v_i integer;
BEGIN
  FOR v_i IN SELECT t.n::integer FROM unnest(p_resources) WITH ORDINALITY AS t(r, n) ORDER BY t.r, t.n LOOP
    SELECT f.o_accepted, f.o_highest INTO o_accepted, o_highest FROM ${s}.fg_fence_v1(p_resources[v_i], p_tokens[v_i]) f;
    o_i := v_i;
    RETURN NEXT;
  END LOOP;
END
$fn$;

CREATE OR REPLACE FUNCTION ${s}.fg_claim_many_v1(
  p_route text[], p_scope text[], p_key text[], p_fp text[], p_cid text[],
  p_lease bigint[], p_exp bigint[], p_retry boolean[], p_now bigint[])
RETURNS TABLE (o_i integer, o_kind text, o_after text, o_abandoned boolean, o_lease bigint,
  o_status integer, o_headers text, o_body bytea, o_reason text)
LANGUAGE plpgsql AS $fn$
DECLARE v_i integer;
BEGIN
  FOR v_i IN SELECT t.n::integer FROM unnest(p_route, p_scope, p_key) WITH ORDINALITY AS t(r, s, k, n) ORDER BY t.r, t.s, t.k, t.n LOOP
    SELECT c.o_kind, c.o_after, c.o_abandoned, c.o_lease, c.o_status, c.o_headers, c.o_body, c.o_reason
      INTO o_kind, o_after, o_abandoned, o_lease, o_status, o_headers, o_body, o_reason
      FROM ${s}.fg_claim_v1(p_route[v_i], p_scope[v_i], p_key[v_i], p_fp[v_i], p_cid[v_i], p_lease[v_i], p_exp[v_i], p_retry[v_i], p_now[v_i]) c;
    o_i := v_i;
    RETURN NEXT;
  END LOOP;
END
$fn$;

-- fence and, when it accepts, claim: every fence of the batch first (resource order), then the
-- claims (key order), so admit batches take row locks in the same order as the others
CREATE OR REPLACE FUNCTION ${s}.fg_admit_many_v1(
  p_resources text[], p_tokens bigint[],
  p_route text[], p_scope text[], p_key text[], p_fp text[], p_cid text[],
  p_lease bigint[], p_exp bigint[], p_retry boolean[], p_now bigint[])
RETURNS TABLE (o_i integer, o_accepted boolean, o_highest text, o_kind text, o_after text, o_abandoned boolean,
  o_lease bigint, o_status integer, o_headers text, o_body bytea, o_reason text)
LANGUAGE plpgsql AS $fn$
DECLARE
  v_i integer;
  v_accepted boolean[] := '{}';
  v_highest text[] := '{}';
BEGIN
  FOR v_i IN SELECT t.n::integer FROM unnest(p_resources) WITH ORDINALITY AS t(r, n) ORDER BY t.r, t.n LOOP
    SELECT f.o_accepted, f.o_highest INTO o_accepted, o_highest FROM ${s}.fg_fence_v1(p_resources[v_i], p_tokens[v_i]) f;
    v_accepted[v_i] := o_accepted;
    v_highest[v_i] := o_highest;
  END LOOP;
  FOR v_i IN SELECT t.n::integer FROM unnest(p_route, p_scope, p_key) WITH ORDINALITY AS t(r, s, k, n) ORDER BY t.r, t.s, t.k, t.n LOOP
    o_i := v_i; o_accepted := v_accepted[v_i]; o_highest := v_highest[v_i];
    o_kind := NULL; o_after := NULL; o_abandoned := NULL; o_lease := NULL; o_status := NULL; o_headers := NULL; o_body := NULL; o_reason := NULL;
    IF o_accepted THEN
      SELECT c.o_kind, c.o_after, c.o_abandoned, c.o_lease, c.o_status, c.o_headers, c.o_body, c.o_reason
        INTO o_kind, o_after, o_abandoned, o_lease, o_status, o_headers, o_body, o_reason
        FROM ${s}.fg_claim_v1(p_route[v_i], p_scope[v_i], p_key[v_i], p_fp[v_i], p_cid[v_i], p_lease[v_i], p_exp[v_i], p_retry[v_i], p_now[v_i]) c;
    END IF;
    RETURN NEXT;
  END LOOP;
END
$fn$;

-- v2 of the fence and admit batches: each fence also answers when its mark was first accepted
-- (o_since) and whether it raised it (o_raised). The v1 batches stay for gateways from before.
CREATE OR REPLACE FUNCTION ${s}.fg_fence_many_v2(p_resources text[], p_tokens bigint[], p_now bigint[])
RETURNS TABLE (o_i integer, o_accepted boolean, o_highest text, o_since bigint, o_raised boolean)
LANGUAGE plpgsql AS $fn$
DECLARE v_i integer;
BEGIN
  FOR v_i IN SELECT t.n::integer FROM unnest(p_resources) WITH ORDINALITY AS t(r, n) ORDER BY t.r, t.n LOOP
    SELECT f.o_accepted, f.o_highest, f.o_since, f.o_raised INTO o_accepted, o_highest, o_since, o_raised
      FROM ${s}.fg_fence_v2(p_resources[v_i], p_tokens[v_i], p_now[v_i]) f;
    o_i := v_i;
    RETURN NEXT;
  END LOOP;
END
$fn$;

CREATE OR REPLACE FUNCTION ${s}.fg_admit_many_v2(
  p_resources text[], p_tokens bigint[],
  p_route text[], p_scope text[], p_key text[], p_fp text[], p_cid text[],
  p_lease bigint[], p_exp bigint[], p_retry boolean[], p_now bigint[])
RETURNS TABLE (o_i integer, o_accepted boolean, o_highest text, o_since bigint, o_raised boolean, o_kind text, o_after text, o_abandoned boolean,
  o_lease bigint, o_status integer, o_headers text, o_body bytea, o_reason text)
LANGUAGE plpgsql AS $fn$
DECLARE
  v_i integer;
  v_accepted boolean[] := '{}';
  v_highest text[] := '{}';
  v_since bigint[] := '{}';
  v_raised boolean[] := '{}';
BEGIN
  FOR v_i IN SELECT t.n::integer FROM unnest(p_resources) WITH ORDINALITY AS t(r, n) ORDER BY t.r, t.n LOOP
    SELECT f.o_accepted, f.o_highest, f.o_since, f.o_raised INTO o_accepted, o_highest, o_since, o_raised
      FROM ${s}.fg_fence_v2(p_resources[v_i], p_tokens[v_i], p_now[v_i]) f;
    v_accepted[v_i] := o_accepted;
    v_highest[v_i] := o_highest;
    v_since[v_i] := o_since;
    v_raised[v_i] := o_raised;
  END LOOP;
  FOR v_i IN SELECT t.n::integer FROM unnest(p_route, p_scope, p_key) WITH ORDINALITY AS t(r, s, k, n) ORDER BY t.r, t.s, t.k, t.n LOOP
    o_i := v_i; o_accepted := v_accepted[v_i]; o_highest := v_highest[v_i]; o_since := v_since[v_i]; o_raised := v_raised[v_i];
    o_kind := NULL; o_after := NULL; o_abandoned := NULL; o_lease := NULL; o_status := NULL; o_headers := NULL; o_body := NULL; o_reason := NULL;
    IF o_accepted THEN
      SELECT c.o_kind, c.o_after, c.o_abandoned, c.o_lease, c.o_status, c.o_headers, c.o_body, c.o_reason
        INTO o_kind, o_after, o_abandoned, o_lease, o_status, o_headers, o_body, o_reason
        FROM ${s}.fg_claim_v1(p_route[v_i], p_scope[v_i], p_key[v_i], p_fp[v_i], p_cid[v_i], p_lease[v_i], p_exp[v_i], p_retry[v_i], p_now[v_i]) c;
    END IF;
    RETURN NEXT;
  END LOOP;
END
$fn$;

-- finish (p_state set) or release (p_state NULL) of claims still held by p_cid
CREATE OR REPLACE FUNCTION ${s}.fg_settle_many_v1(
  p_route text[], p_scope text[], p_key text[], p_cid text[], p_state text[], p_exp bigint[],
  p_status integer[], p_headers text[], p_body bytea[], p_reason text[])
RETURNS integer
LANGUAGE plpgsql AS $fn$
DECLARE v_i integer;
BEGIN
  FOR v_i IN SELECT t.n::integer FROM unnest(p_route, p_scope, p_key) WITH ORDINALITY AS t(r, s, k, n) ORDER BY t.r, t.s, t.k, t.n LOOP
    IF p_state[v_i] IS NULL THEN
      DELETE FROM ${s}.fg_records_v1 t
        WHERE t.route = p_route[v_i] AND t.scope = p_scope[v_i] AND t.key = p_key[v_i] AND t.claim_id = p_cid[v_i] AND t.state = 'in_flight';
    ELSE
      UPDATE ${s}.fg_records_v1 t SET state = p_state[v_i], lease_until = 0, expires_at = p_exp[v_i], status = p_status[v_i],
        headers = p_headers[v_i], body = p_body[v_i], reason = p_reason[v_i]
        WHERE t.route = p_route[v_i] AND t.scope = p_scope[v_i] AND t.key = p_key[v_i] AND t.claim_id = p_cid[v_i] AND t.state = 'in_flight';
    END IF;
  END LOOP;
  RETURN coalesce(array_length(p_route, 1), 0);
END
$fn$;
`
}

interface ClaimRow {
  o_kind: string
  o_after: string | null
  o_abandoned: boolean | null
  o_lease: string | null
  o_status: number | null
  o_headers: string | null
  o_body: Buffer | null
  o_reason: string | null
}

interface ClaimCall { key: RecordKey; req: ClaimRequest; now: number }
interface FenceCall extends FenceRequest { now: number }
/** A fence's columns in the v2 batches' rows. */
interface FenceRow { o_accepted: boolean; o_highest: string; o_since: string | null; o_raised: boolean | null }

function fenceResult(r: FenceRow): FenceResult {
  const out: FenceResult = { accepted: r.o_accepted === true, highest: BigInt(r.o_highest) }
  if (r.o_since !== null && r.o_since !== undefined) out.since = Number(r.o_since)
  if (r.o_raised) out.raised = true
  return out
}
interface AdmitCall extends ClaimCall { fence: FenceRequest }
/** finish (with `done`) or release (without) */
interface SettleCall { key: RecordKey; claimId: string; done?: Completion; expiresAt?: number }

function claimResult(r: ClaimRow): ClaimResult {
  switch (r.o_kind) {
    case 'claimed': {
      const out: ClaimResult = { kind: 'claimed' }
      if (r.o_after) out.after = asReason(r.o_after)
      if (r.o_abandoned) out.abandoned = true
      return out
    }
    case 'completed':
      return { kind: 'completed', response: { status: r.o_status!, headers: JSON.parse(r.o_headers ?? '[]'), body: r.o_body ?? Buffer.alloc(0) } }
    case 'not_stored':
      return { kind: 'not_stored', status: r.o_status ?? 0 }
    case 'in_flight':
      return { kind: 'in_flight', leaseUntil: Number(r.o_lease) }
    case 'unknown':
      return r.o_abandoned ? { kind: 'unknown', reason: asReason(r.o_reason), abandoned: true } : { kind: 'unknown', reason: asReason(r.o_reason) }
    case 'mismatch':
      return { kind: 'mismatch' }
    default:
      throw new Error(`claim function answered ${r.o_kind}`)
  }
}

const REASONS = new Set<string>(['timeout', 'reset', 'client_abort', 'crash'])
const asReason = (s: string | null): UnknownReason => (s && REASONS.has(s) ? s as UnknownReason : 'crash')

/** Quotes a validated schema name. */
const quoted = (schema: string): string => {
  if (!IDENT.test(schema)) throw new TypeError('options.schema must be a lower-case SQL identifier ([a-z_][a-z0-9_]*, at most 63 characters)')
  return `"${schema}"`
}

/** A pool that never lets a dropped connection crash the process. */
/**
 * Whether PostgreSQL answered a batch with an error, so its one statement rolled back and each
 * call may be made again alone: a SQLSTATE outside class 08 (connection exception) and 57P
 * (shutdown, crash). A connection lost without an answer may have committed the batch.
 */
function refusedAndRolledBack(e: unknown): boolean {
  const code = (e as { code?: unknown } | undefined)?.code
  return typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code) && !code.startsWith('08') && !code.startsWith('57P')
}

/**
 * `fencing.serialize: store` (src/fencing/window.ts): the registered writes, and their batches.
 * Register takes the resource's mark row FOR SHARE before it reads it and writes the
 * registration: a fence raising that mark (its INSERT … ON CONFLICT DO UPDATE locks the row)
 * waits until the registration is committed, and a registration made while such a fence is under
 * way waits for it and then reads the raised mark (READ COMMITTED re-reads a row it waited for).
 * Batches take the mark rows in resource order, as the fence batches do: no deadlock between them.
 */
function registrationsSchemaSql(s: string): string {
  return `
CREATE TABLE IF NOT EXISTS ${s}.fg_registrations_v1 (
  resource text NOT NULL, id text NOT NULL, token bigint NOT NULL CHECK (token >= 0), deadline bigint NOT NULL,
  PRIMARY KEY (resource, id)
);
CREATE INDEX IF NOT EXISTS fg_registrations_v1_deadline ON ${s}.fg_registrations_v1 (deadline);

CREATE OR REPLACE FUNCTION ${s}.fg_register_many_v1(p_resources text[], p_tokens bigint[], p_ids text[], p_deadlines bigint[], p_now bigint[])
RETURNS TABLE (o_i integer, o_registered boolean, o_highest text, o_oldest text, o_until bigint)
LANGUAGE plpgsql AS $fn$
DECLARE
  v_i integer;
  v_highest bigint;
BEGIN
  FOR v_i IN SELECT t.n::integer FROM unnest(p_resources) WITH ORDINALITY AS t(r, n) ORDER BY t.r, t.n LOOP
    o_i := v_i; o_highest := NULL; o_oldest := NULL; o_until := 0;
    SELECT f.highest INTO v_highest FROM ${s}.fg_fences_v1 f WHERE f.resource = p_resources[v_i] FOR SHARE;
    IF FOUND AND p_tokens[v_i] < v_highest THEN
      o_registered := false; o_highest := v_highest::text;
    ELSE
      INSERT INTO ${s}.fg_registrations_v1 AS w (resource, id, token, deadline)
        VALUES (p_resources[v_i], p_ids[v_i], p_tokens[v_i], p_deadlines[v_i])
        ON CONFLICT (resource, id) DO UPDATE SET token = excluded.token, deadline = excluded.deadline;
      o_registered := true;
      SELECT min(w.token)::text, coalesce(max(w.deadline), 0) INTO o_oldest, o_until FROM ${s}.fg_registrations_v1 w
        WHERE w.resource = p_resources[v_i] AND w.token < p_tokens[v_i] AND w.deadline > p_now[v_i];
    END IF;
    RETURN NEXT;
  END LOOP;
END
$fn$;

-- deletes each registration, or (p_until > 0) keeps it until then
CREATE OR REPLACE FUNCTION ${s}.fg_unregister_many_v1(p_resources text[], p_ids text[], p_until bigint[])
RETURNS integer
LANGUAGE plpgsql AS $fn$
DECLARE v_i integer;
BEGIN
  FOR v_i IN SELECT t.n::integer FROM unnest(p_resources, p_ids) WITH ORDINALITY AS t(r, d, n) ORDER BY t.r, t.d, t.n LOOP
    IF p_until[v_i] > 0 THEN
      UPDATE ${s}.fg_registrations_v1 w SET deadline = p_until[v_i] WHERE w.resource = p_resources[v_i] AND w.id = p_ids[v_i];
    ELSE
      DELETE FROM ${s}.fg_registrations_v1 w WHERE w.resource = p_resources[v_i] AND w.id = p_ids[v_i];
    END IF;
  END LOOP;
  RETURN coalesce(array_length(p_resources, 1), 0);
END
$fn$;
`
}

interface RegisterCall { resource: string; token: bigint; id: string; deadline: number; now: number }
interface UnregisterCall { resource: string; id: string; until: number }

/** A schema made before the registrations: a message that says what to do. */
const registrationsMissing = (e: unknown): unknown => {
  const code = (e as { code?: string } | undefined)?.code
  return code === '42P01' || code === '42883'
    ? new Error('the schema has no fg_registrations_v1 (fencing.serialize: store): it was made by an older fencegate; run `fencegate migrate --config PATH` (or set store.migrate: true)', { cause: e })
    : e
}

function createPool(o: Required<Pick<PostgresStoreOptions, 'url' | 'pool' | 'statementTimeoutMs' | 'connectTimeoutMs'>>, onError: (e: Error) => void): pg.Pool {
  const pool = new pg.Pool({
    connectionString: o.url,
    max: o.pool,
    connectionTimeoutMillis: o.connectTimeoutMs,
    statement_timeout: o.statementTimeoutMs,
    // a query on a connection that went silent (no RST) must not hold a pool slot forever
    query_timeout: o.statementTimeoutMs + 1000,
    idleTimeoutMillis: 30_000,
    keepAlive: true,
    fallback_application_name: 'fencegate',
  })
  // An idle client whose connection the server ended emits 'error' on the pool; pg drops it.
  pool.on('error', onError)
  return pool
}

/**
 * Creates or updates the schema (idempotent; replicas may run it at once: an advisory lock
 * serialises them).
 * @throws StoreError when the database cannot be reached or refuses
 */
export async function migratePostgres(options: Pick<PostgresStoreOptions, 'url' | 'schema' | 'connectTimeoutMs'>): Promise<{ schema: string; epoch: string }> {
  const schema = options.schema ?? 'public'
  const s = quoted(schema)
  const client = new pg.Client({ connectionString: options.url, connectionTimeoutMillis: options.connectTimeoutMs ?? 5000, fallback_application_name: 'fencegate migrate' })
  client.on('error', () => {})
  try {
    await client.connect()
    await client.query('BEGIN')
    await client.query("SELECT pg_advisory_xact_lock(hashtext('fencegate migrate'))")
    // CREATE SCHEMA needs CREATE on the database even when the schema exists: a role given a
    // schema made for it by an administrator has no such right, and needs none
    const exists = await client.query('SELECT 1 FROM pg_namespace WHERE nspname = $1', [schema])
    if (!exists.rowCount) await client.query(`CREATE SCHEMA ${s}`)
    await client.query(schemaSql(s))
    await client.query(registrationsSchemaSql(s))
    await client.query(`INSERT INTO ${s}.fg_meta_v1 (name, value) VALUES ('epoch', $1) ON CONFLICT (name) DO NOTHING`, [randomUUID()])
    const { rows } = await client.query(`SELECT value FROM ${s}.fg_meta_v1 WHERE name = 'epoch'`)
    await client.query('COMMIT')
    return { schema, epoch: rows[0].value as string }
  } catch (e) {
    await client.query('ROLLBACK').catch(() => {})
    throw new StoreError(`cannot migrate PostgreSQL schema ${schema}: ${(e as Error).message}`, 'migrate', { cause: e })
  } finally {
    await client.end().catch(() => {})
  }
}

export class PostgresStore implements Store {
  readonly kind = 'postgres' as const
  readonly #pool: pg.Pool
  readonly #s: string
  readonly #reaper?: NodeJS.Timeout
  readonly #auditRetentionMs: number
  #closed = false
  /** the attempt log: the fg_audit_v1 table */
  readonly audit: AuditLog
  /** the value written when the schema was first created */
  epoch = ''
  readonly #fence: (call: FenceCall) => Promise<FenceResult>
  readonly #claim: (call: ClaimCall) => Promise<ClaimResult>
  readonly #admit: (call: AdmitCall) => Promise<AdmitResult>
  readonly #settle: (call: SettleCall) => Promise<void>

  /** Use `PostgresStore.open`, which also checks that the schema is there. */
  constructor(options: PostgresStoreOptions) {
    const { url, schema = 'public', pool = 10, statementTimeoutMs = 5000, connectTimeoutMs = 1000, reapIntervalMs = 60_000, auditRetentionMs = 7 * 86_400_000 } = options
    this.#auditRetentionMs = auditRetentionMs
    if (typeof url !== 'string' || !/^postgres(ql)?:\/\//.test(url)) throw new TypeError('options.url must be a postgres:// or postgresql:// URL')
    if (!Number.isInteger(pool) || pool < 1) throw new TypeError('options.pool must be a positive integer')
    if (!Number.isInteger(statementTimeoutMs) || statementTimeoutMs < 1) throw new TypeError('options.statementTimeoutMs must be a positive integer')
    this.#s = quoted(schema)
    this.#pool = createPool({ url, pool, statementTimeoutMs, connectTimeoutMs }, () => {})
    this.audit = {
      append: (batch) => this.#auditAppend(batch),
      query: (since, until, route) => this.#auditQuery(since, until, route),
      timeline: (filter, since, limit) => this.#run('audit_timeline', async () => {
        const q = timelineSql(`${this.#s}.fg_audit_v1`, (n) => `$${n}`, filter, since, limit)
        const { rows } = await this.#pool.query(q.text, q.values)
        return rows.map(entryFromRow)
      }),
      fenced: (since, until, route, limit) => this.#run('audit_fenced', async () => {
        const q = fencedSql(`${this.#s}.fg_audit_v1`, (n) => `$${n}`, since, until, route, limit)
        const { rows } = await this.#pool.query(q.text, q.values)
        return rows.map(entryFromRow)
      }),
    }
    // a batch per operation and event-loop turn; a quarter of the pool each at most (audit and
    // markers need connections too)
    const batches = { maxInFlight: Math.max(1, Math.floor(pool / 4)), isolate: refusedAndRolledBack }
    this.#fence = batcher((calls) => this.#fenceBatch(calls), batches)
    this.#claim = batcher((calls) => this.#claimBatch(calls), batches)
    this.#admit = batcher((calls) => this.#admitBatch(calls), batches)
    this.#settle = batcher((calls) => this.#settleBatch(calls), batches)
    if (reapIntervalMs > 0) {
      this.#reaper = setInterval(() => {
        this.reap(Date.now()).catch(() => { /* next round */ })
        this.reapAudit(Date.now()).catch(() => { /* next round */ })
        this.reapRegistrations(Date.now()).catch(() => { /* next round */ })
      }, reapIntervalMs)
      this.#reaper.unref()
    }
  }

  /**
   * Connects, runs the migration when `migrate` is true, and reads the epoch.
   * @throws StoreError when the database cannot be reached or the schema is missing
   */
  static async open(options: PostgresStoreOptions & { migrate?: boolean }): Promise<PostgresStore> {
    if (options.migrate) await migratePostgres(options)
    const store = new PostgresStore(options)
    try {
      const { rows } = await store.#pool.query(`SELECT value FROM ${store.#s}.fg_meta_v1 WHERE name = 'epoch'`)
      store.epoch = rows[0]?.value ?? ''
      // the newest piece of the schema: the v2 fence and admit batches (with the marks' since
      // and the attempt log's upstream_ms, late_ms and highest_token, made by the same migration)
      const { rows: fns } = await store.#pool.query(`SELECT to_regproc($1) IS NOT NULL AND EXISTS (SELECT 1 FROM information_schema.columns
        WHERE table_schema = $2 AND table_name = 'fg_audit_v1' AND column_name = 'highest_token') AS ok`, [`${store.#s}.fg_admit_many_v2`, options.schema ?? 'public'])
      if (!fns[0].ok) {
        await store.close()
        throw new StoreError(`PostgreSQL schema ${options.schema ?? 'public'} was made by an older fencegate: run \`fencegate migrate --config PATH\` (or set store.migrate: true)`, 'open')
      }
    } catch (e) {
      if (e instanceof StoreError) throw e
      await store.close()
      const missing = (e as { code?: string }).code === '42P01'
      throw new StoreError(missing
        ? `PostgreSQL schema ${options.schema ?? 'public'} has no fencegate tables: run \`fencegate migrate --config PATH\` or set store.migrate: true`
        : `cannot reach PostgreSQL: ${(e as Error).message}`, 'open', { cause: e })
    }
    return store
  }

  async markers(): Promise<StateMarkers> {
    return this.#run('markers', async () => {
      const { rows } = await this.#pool.query(`SELECT name, value FROM ${this.#s}.fg_meta_v1 WHERE name IN ('epoch', 'accepted')`)
      const get = (n: string) => rows.find((r) => r.name === n)?.value as string | undefined
      return { epoch: get('epoch'), accepted: get('accepted') }
    })
  }

  async acceptLoss(): Promise<string> {
    return this.#run('accept_loss', async () => {
      await this.#pool.query(`INSERT INTO ${this.#s}.fg_meta_v1 (name, value) VALUES ('epoch', $1) ON CONFLICT (name) DO NOTHING`, [randomUUID()])
      const { rows } = await this.#pool.query(`SELECT value FROM ${this.#s}.fg_meta_v1 WHERE name = 'epoch'`)
      const epoch = rows[0].value as string
      await this.#pool.query(`INSERT INTO ${this.#s}.fg_meta_v1 (name, value) VALUES ('accepted', $1) ON CONFLICT (name) DO UPDATE SET value = excluded.value`, [epoch])
      return epoch
    })
  }

  async #run<T>(op: string, fn: () => Promise<T>): Promise<T> {
    if (this.#closed) throw new StoreError('store is closed', op)
    try {
      return await fn()
    } catch (e) {
      throw new StoreError(`postgres ${op}: ${(e as Error).message}`, op, { cause: e })
    }
  }

  fence(resource: string, token: bigint, now = Date.now()): Promise<FenceResult> {
    return this.#run('fence', () => this.#fence({ resource, token, now }))
  }

  admit(fence: FenceRequest, key: RecordKey, req: ClaimRequest, now: number): Promise<AdmitResult> {
    return this.#run('admit', () => this.#admit({ fence, key, req, now }))
  }

  highest(resource: string): Promise<bigint | undefined> {
    return this.#run('highest', async () => {
      const { rows } = await this.#pool.query({
        name: 'fg_highest',
        text: `SELECT highest::text AS highest FROM ${this.#s}.fg_fences_v1 WHERE resource = $1`,
        values: [resource],
      })
      return rows.length ? BigInt(rows[0].highest) : undefined
    })
  }

  mark(resource: string): Promise<FenceMark | undefined> {
    return this.#run('mark', async () => {
      const { rows } = await this.#pool.query({
        name: 'fg_mark',
        text: `SELECT highest::text AS highest, since FROM ${this.#s}.fg_fences_v1 WHERE resource = $1`,
        values: [resource],
      })
      if (!rows.length) return undefined
      return rows[0].since === null ? { highest: BigInt(rows[0].highest) } : { highest: BigInt(rows[0].highest), since: Number(rows[0].since) }
    })
  }

  claim(key: RecordKey, req: ClaimRequest, now: number): Promise<ClaimResult> {
    return this.#run('claim', () => this.#claim({ key, req, now }))
  }

  finish(key: RecordKey, claimId: string, done: Completion, ttlMs: number, now: number): Promise<void> {
    return this.#run('finish', () => this.#settle({ key, claimId, done, expiresAt: now + ttlMs }))
  }

  release(key: RecordKey, claimId: string): Promise<void> {
    return this.#run('release', () => this.#settle({ key, claimId }))
  }

  /** One guarded UPDATE, outside the group commit: renewals are rare (a quarter lease apart). */
  renew(key: RecordKey, claimId: string, leaseMs: number, now: number): Promise<boolean> {
    return this.#run('renew', async () => {
      const { rowCount } = await this.#pool.query({
        name: 'fg_renew',
        text: `UPDATE ${this.#s}.fg_records_v1 SET lease_until = $1 WHERE route = $2 AND scope = $3 AND key = $4 AND claim_id = $5 AND state = 'in_flight'`,
        values: [now + leaseMs, key.route, key.scope, key.key, claimId],
      })
      return (rowCount ?? 0) > 0
    })
  }

  // ------------------------------------------------------------- batches (one round trip each)

  #fenceBatch(calls: readonly FenceCall[]): Promise<FenceResult[]> {
    return this.#many<FenceRow & { o_i: number }, FenceResult>(calls.length, {
      name: 'fg_fence_many_v2',
      text: `SELECT o_i, o_accepted, o_highest, o_since, o_raised FROM ${this.#s}.fg_fence_many_v2($1::text[], $2::bigint[], $3::bigint[])`,
      values: [calls.map((c) => c.resource), calls.map((c) => c.token.toString()), calls.map((c) => c.now)],
    }, fenceResult)
  }

  #claimBatch(calls: readonly ClaimCall[]): Promise<ClaimResult[]> {
    return this.#many<ClaimRow & { o_i: number }, ClaimResult>(calls.length, {
      name: 'fg_claim_many',
      text: `SELECT * FROM ${this.#s}.fg_claim_many_v1($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bigint[], $7::bigint[], $8::boolean[], $9::bigint[])`,
      values: [
        calls.map((c) => c.key.route), calls.map((c) => c.key.scope), calls.map((c) => c.key.key),
        calls.map((c) => c.req.fingerprint), calls.map((c) => c.req.claimId),
        calls.map((c) => c.now + c.req.leaseMs), calls.map((c) => c.now + c.req.ttlMs),
        calls.map((c) => c.req.retryUnknown), calls.map((c) => c.now),
      ],
    }, claimResult)
  }

  #admitBatch(calls: readonly AdmitCall[]): Promise<AdmitResult[]> {
    type Row = ClaimRow & FenceRow & { o_i: number }
    return this.#many<Row, AdmitResult>(calls.length, {
      name: 'fg_admit_many_v2',
      text: `SELECT * FROM ${this.#s}.fg_admit_many_v2($1::text[], $2::bigint[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::bigint[], $9::bigint[], $10::boolean[], $11::bigint[])`,
      values: [
        calls.map((c) => c.fence.resource), calls.map((c) => c.fence.token.toString()),
        calls.map((c) => c.key.route), calls.map((c) => c.key.scope), calls.map((c) => c.key.key),
        calls.map((c) => c.req.fingerprint), calls.map((c) => c.req.claimId),
        calls.map((c) => c.now + c.req.leaseMs), calls.map((c) => c.now + c.req.ttlMs),
        calls.map((c) => c.req.retryUnknown), calls.map((c) => c.now),
      ],
    }, (r) => {
      const fence = fenceResult(r)
      return fence.accepted ? { fence, claim: claimResult(r) } : { fence }
    })
  }

  async #settleBatch(calls: readonly SettleCall[]): Promise<void[]> {
    const cols: unknown[][] = Array.from({ length: 10 }, () => [])
    for (const c of calls) {
      const d = c.done
      const row = [
        c.key.route, c.key.scope, c.key.key, c.claimId, d?.kind ?? null, c.expiresAt ?? 0,
        d?.kind === 'completed' ? d.response.status : d?.kind === 'not_stored' ? d.status : null,
        d?.kind === 'completed' ? JSON.stringify(d.response.headers) : null,
        d?.kind === 'completed' ? d.response.body : null,
        d?.kind === 'unknown' ? d.reason : null,
      ]
      row.forEach((v, i) => cols[i].push(v))
    }
    await this.#pool.query({
      name: 'fg_settle_many',
      text: `SELECT ${this.#s}.fg_settle_many_v1($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bigint[], $7::integer[], $8::text[], $9::bytea[], $10::text[])`,
      values: cols,
    })
    return calls.map(() => undefined)
  }

  /** Runs a batch function whose rows carry `o_i`, the 1-based index of the call they answer. */
  async #many<R extends { o_i: number }, O>(n: number, query: pg.QueryConfig, map: (row: R) => O): Promise<O[]> {
    const { rows } = await this.#pool.query<R>(query)
    const out = new Array<O>(n)
    for (const r of rows) out[r.o_i - 1] = map(r)
    if (rows.length !== n) throw new Error(`batch of ${n} answered ${rows.length} rows`)
    return out
  }

  resolve(key: RecordKey, as: Resolution, ttlMs: number, now: number): Promise<ResolveResult> {
    return this.#run('resolve', async () => {
      const { rows } = await this.#pool.query<{ o_kind: string; o_reason: string | null; o_state: string | null }>({
        name: 'fg_resolve',
        text: `SELECT * FROM ${this.#s}.fg_resolve_v1($1, $2, $3, $4, $5, $6)`,
        values: [key.route, key.scope, key.key, as, now, now + ttlMs],
      })
      const r = rows[0]
      switch (r.o_kind) {
        case 'resolved': return { kind: 'resolved', reason: asReason(r.o_reason) }
        case 'not_found': return { kind: 'not_found' }
        case 'refused': return { kind: 'refused', state: r.o_state as 'in_flight' | 'completed' | 'not_stored' }
        default: throw new Error(`resolve function answered ${r.o_kind}`)
      }
    })
  }

  /** One multi-row INSERT per batch. */
  #auditAppend(batch: readonly AuditEntry[]): Promise<void> {
    return this.#run('audit_append', async () => {
      if (!batch.length) return
      const width = AUDIT_COLUMNS.length
      const values = batch.flatMap(auditRow)
      const tuples = batch.map((_, i) => `(${AUDIT_COLUMNS.map((__, j) => `$${i * width + j + 1}`).join(', ')})`)
      await this.#pool.query(`INSERT INTO ${this.#s}.fg_audit_v1 (${AUDIT_COLUMNS.join(', ')}) VALUES ${tuples.join(', ')}`, values)
    })
  }

  #auditQuery(since: number, until: number, route?: string) {
    return this.#run('audit_query', async () => {
      const { rows } = await this.#pool.query({
        name: 'fg_audit_query',
        text: auditQuerySql(`${this.#s}.fg_audit_v1`, (n) => n === 3 ? '$3::text' : `$${n}::bigint`),
        values: [since, until, route ?? null],
      })
      return countsFromRows(rows)
    })
  }

  unknowns(now: number, options: { route?: string; limit?: number } = {}): Promise<UnknownRecord[]> {
    const { route, limit = 1000 } = options
    return this.#run('unknowns', async () => {
      const { rows } = await this.#pool.query<{ route: string; scope: string; key: string; state: string; reason: UnknownReason | null; lease_until: string; expires_at: string }>({
        name: 'fg_unknowns',
        text: `SELECT route, scope, key, state, reason, lease_until, expires_at FROM ${this.#s}.fg_records_v1
          WHERE state IN ('unknown', 'in_flight') AND (state = 'unknown' OR lease_until <= $1) AND expires_at > $1
            AND ($2::text IS NULL OR route = $2) LIMIT $3`,
        values: [now, route ?? null, limit],
      })
      return rows.map((r) => ({
        key: { route: r.route, scope: r.scope, key: r.key },
        reason: r.state === 'in_flight' ? 'crash' : r.reason ?? 'crash',
        leaseUntil: Number(r.lease_until),
        expiresAt: Number(r.expires_at),
      }))
    })
  }

  /** Deletes attempt log entries older than the retention; returns how many. */
  async reapAudit(now: number): Promise<number> {
    const { rowCount } = await this.#pool.query({
      name: 'fg_audit_reap',
      text: `DELETE FROM ${this.#s}.fg_audit_v1 WHERE time < $1`,
      values: [now - this.#auditRetentionMs],
    })
    return rowCount ?? 0
  }

  /**
   * Deletes expired records, `batch` at a time, at most `maxBatches` batches; returns how many.
   * Rows another transaction holds are skipped, not waited for.
   */
  async reap(now: number, batch = 1000, maxBatches = 10): Promise<number> {
    let total = 0
    for (let i = 0; i < maxBatches && !this.#closed; i++) {
      const { rowCount } = await this.#pool.query({
        name: 'fg_reap',
        text: `DELETE FROM ${this.#s}.fg_records_v1 WHERE (route, scope, key) IN (
          SELECT route, scope, key FROM ${this.#s}.fg_records_v1 WHERE expires_at <= $1 LIMIT $2 FOR UPDATE SKIP LOCKED)`,
        values: [now, batch],
      })
      total += rowCount ?? 0
      if ((rowCount ?? 0) < batch) break
    }
    return total
  }

  // ------------------------------------------------- fencing.serialize: store (registrations)

  /** register and unregister batches, made on first use */
  #registrationBatches?: { register: (c: RegisterCall) => Promise<Registration>; unregister: (c: UnregisterCall) => Promise<void> }
  get #registrations() {
    return (this.#registrationBatches ??= (() => {
      const batches = { maxInFlight: Math.max(1, Math.floor((this.#pool.options.max ?? 10) / 4)), isolate: refusedAndRolledBack }
      return {
        register: batcher((calls: readonly RegisterCall[]) => this.#many<{ o_i: number; o_registered: boolean; o_highest: string | null; o_oldest: string | null; o_until: string }, Registration>(calls.length, {
          name: 'fg_register_many',
          text: `SELECT * FROM ${this.#s}.fg_register_many_v1($1::text[], $2::bigint[], $3::text[], $4::bigint[], $5::bigint[])`,
          values: [calls.map((c) => c.resource), calls.map((c) => c.token.toString()), calls.map((c) => c.id), calls.map((c) => c.deadline), calls.map((c) => c.now)],
        }, (r) => !r.o_registered
          ? { registered: false, highest: BigInt(r.o_highest!) }
          : r.o_oldest === null ? { registered: true, until: 0 } : { registered: true, oldest: BigInt(r.o_oldest), until: Number(r.o_until) }), batches),
        unregister: batcher(async (calls: readonly UnregisterCall[]) => {
          await this.#pool.query({
            name: 'fg_unregister_many',
            text: `SELECT ${this.#s}.fg_unregister_many_v1($1::text[], $2::text[], $3::bigint[])`,
            values: [calls.map((c) => c.resource), calls.map((c) => c.id), calls.map((c) => c.until)],
          })
          return calls.map(() => undefined)
        }, batches),
      }
    })())
  }

  /** See `Store.register` and registrationsSchemaSql. Group-committed like the fences. */
  register(resource: string, token: bigint, id: string, deadline: number, now: number): Promise<Registration> {
    return this.#run('register', () => this.#registrations.register({ resource, token, id, deadline, now }).catch((e) => { throw registrationsMissing(e) }))
  }

  olderRegistered(resource: string, token: bigint, now: number): Promise<OlderWrites> {
    return this.#run('older_registered', async () => {
      const { rows } = await this.#pool.query<{ oldest: string | null; until: string }>({
        name: 'fg_older_registered',
        text: `SELECT min(token)::text AS oldest, coalesce(max(deadline), 0)::text AS until FROM ${this.#s}.fg_registrations_v1
          WHERE resource = $1 AND token < $2 AND deadline > $3`,
        values: [resource, token.toString(), now],
      }).catch((e) => { throw registrationsMissing(e) })
      const r = rows[0]
      return r.oldest === null ? { until: 0 } : { oldest: BigInt(r.oldest), until: Number(r.until) }
    })
  }

  unregister(resource: string, id: string, until = 0): Promise<void> {
    return this.#run('unregister', () => this.#registrations.unregister({ resource, id, until: Math.max(0, Math.floor(until)) }).catch((e) => { throw registrationsMissing(e) }))
  }

  /** Deletes expired registrations (a crashed replica's), `batch` at a time, skipping rows another transaction holds. */
  async reapRegistrations(now: number, batch = 1000, maxBatches = 10): Promise<number> {
    let total = 0
    for (let i = 0; i < maxBatches && !this.#closed; i++) {
      const { rowCount } = await this.#pool.query({
        name: 'fg_registrations_reap',
        text: `DELETE FROM ${this.#s}.fg_registrations_v1 WHERE (resource, id) IN (
          SELECT resource, id FROM ${this.#s}.fg_registrations_v1 WHERE deadline <= $1 LIMIT $2 FOR UPDATE SKIP LOCKED)`,
        values: [now, batch],
      })
      total += rowCount ?? 0
      if ((rowCount ?? 0) < batch) break
    }
    return total
  }

  /** A round trip that also proves the tables are there. */
  ping(): Promise<void> {
    return this.#run('ping', async () => {
      await this.#pool.query({ name: 'fg_ping', text: `SELECT 1 FROM ${this.#s}.fg_meta_v1 LIMIT 1` })
    })
  }

  async close(): Promise<void> {
    if (this.#closed) return
    this.#closed = true
    if (this.#reaper) clearInterval(this.#reaper)
    await this.#pool.end().catch(() => {})
  }
}
