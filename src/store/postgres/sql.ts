/**
 * The PostgreSQL store's SQL text: the schema (tables, indexes and the plpgsql functions that run
 * the fence and the record state machine on the server) and the statements the store sends.
 * Every name is qualified with the schema `s`, already validated and quoted (./migrate.ts `quoted`).
 *
 * The functions carry a version in their names: a function's name, arguments and answer columns
 * never change once released, because gateways of the previous version call them during a rolling
 * upgrade (the v1 fence and admit batches stay for those). A change is a new `_vN` beside the old.
 *
 * Clock: the functions this version calls take every instant from the server — fg_now_ms_v1(),
 * `clock_timestamp()` as epoch ms, read when the statement gets to that call (after any row lock
 * it waited for) — and the gateway passes durations: a lease, a ttl, how long a registration
 * holds. Each takes a `now` too, NULL but for tests that drive time themselves (the store's
 * `clock: 'caller'`). The older functions kept for rolling upgrades still take the caller's.
 */
import { AUDIT_COLUMNS, auditQuerySql } from '../attempt-log/sql.js'

/** The schema as SQL, every name qualified with the (validated, quoted) schema. */
export function schemaSql(s: string): string {
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
-- in flight: the unknown outcome this claim took over (its o_after), kept when its lease lapses
-- into an unknown outcome, so that its release puts that outcome back (fg_release_v1)
ALTER TABLE ${s}.fg_records_v1 ADD COLUMN IF NOT EXISTS after_reason text;
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
      headers = NULL, body = NULL, reason = NULL, after_reason = NULL
      WHERE t.route = p_route AND t.scope = p_scope AND t.key = p_key;
  END IF;
END
$fn$;

-- the server's clock, epoch ms: when the statement gets here, not when it began
CREATE OR REPLACE FUNCTION ${s}.fg_now_ms_v1() RETURNS bigint
LANGUAGE sql VOLATILE AS $fn$ SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint $fn$;

-- the check-and-set; a mark it raises keeps p_now as its since (o_raised); p_now NULL: the server's clock
CREATE OR REPLACE FUNCTION ${s}.fg_fence_v2(p_resource text, p_token bigint, p_now bigint,
  OUT o_accepted boolean, OUT o_highest text, OUT o_since bigint, OUT o_raised boolean)
LANGUAGE plpgsql AS $fn$
BEGIN
  p_now := coalesce(p_now, ${s}.fg_now_ms_v1());
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
      -- abandoned: its holder crashed or hung past the lease; reported once, then kept as unknown,
      -- with its claim_id, lease_until and after_reason, so that its holder's release can undo it
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
      lease_until = p_lease, expires_at = p_exp, status = NULL, headers = NULL, body = NULL, reason = NULL, after_reason = o_after
      WHERE t.route = p_route AND t.scope = p_scope AND t.key = p_key;
  END IF;
END
$fn$;

-- v2: the lease and the ttl as durations from the server's clock (p_now NULL) or from p_now
CREATE OR REPLACE FUNCTION ${s}.fg_claim_v2(
  p_route text, p_scope text, p_key text, p_fp text, p_cid text,
  p_lease_ms bigint, p_ttl_ms bigint, p_retry boolean, p_now bigint,
  OUT o_kind text, OUT o_after text, OUT o_abandoned boolean, OUT o_lease bigint,
  OUT o_status integer, OUT o_headers text, OUT o_body bytea, OUT o_reason text)
LANGUAGE plpgsql AS $fn$
DECLARE v_now bigint := coalesce(p_now, ${s}.fg_now_ms_v1());
BEGIN
  SELECT c.o_kind, c.o_after, c.o_abandoned, c.o_lease, c.o_status, c.o_headers, c.o_body, c.o_reason
    INTO o_kind, o_after, o_abandoned, o_lease, o_status, o_headers, o_body, o_reason
    FROM ${s}.fg_claim_v1(p_route, p_scope, p_key, p_fp, p_cid, v_now + p_lease_ms, v_now + p_ttl_ms, p_retry, v_now) c;
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

-- v2 of the claim batch and v3 of the admit batch: durations (p_lease_ms, p_ttl_ms) from the
-- server's clock, read for each call as it runs (p_now NULL), through fg_claim_v2
CREATE OR REPLACE FUNCTION ${s}.fg_claim_many_v2(
  p_route text[], p_scope text[], p_key text[], p_fp text[], p_cid text[],
  p_lease_ms bigint[], p_ttl_ms bigint[], p_retry boolean[], p_now bigint[])
RETURNS TABLE (o_i integer, o_kind text, o_after text, o_abandoned boolean, o_lease bigint,
  o_status integer, o_headers text, o_body bytea, o_reason text)
LANGUAGE plpgsql AS $fn$
DECLARE v_i integer;
BEGIN
  FOR v_i IN SELECT t.n::integer FROM unnest(p_route, p_scope, p_key) WITH ORDINALITY AS t(r, s, k, n) ORDER BY t.r, t.s, t.k, t.n LOOP
    SELECT c.o_kind, c.o_after, c.o_abandoned, c.o_lease, c.o_status, c.o_headers, c.o_body, c.o_reason
      INTO o_kind, o_after, o_abandoned, o_lease, o_status, o_headers, o_body, o_reason
      FROM ${s}.fg_claim_v2(p_route[v_i], p_scope[v_i], p_key[v_i], p_fp[v_i], p_cid[v_i], p_lease_ms[v_i], p_ttl_ms[v_i], p_retry[v_i], p_now[v_i]) c;
    o_i := v_i;
    RETURN NEXT;
  END LOOP;
END
$fn$;

CREATE OR REPLACE FUNCTION ${s}.fg_admit_many_v3(
  p_resources text[], p_tokens bigint[],
  p_route text[], p_scope text[], p_key text[], p_fp text[], p_cid text[],
  p_lease_ms bigint[], p_ttl_ms bigint[], p_retry boolean[], p_now bigint[])
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
        FROM ${s}.fg_claim_v2(p_route[v_i], p_scope[v_i], p_key[v_i], p_fp[v_i], p_cid[v_i], p_lease_ms[v_i], p_ttl_ms[v_i], p_retry[v_i], p_now[v_i]) c;
    END IF;
    RETURN NEXT;
  END LOOP;
END
$fn$;

-- a release by the claim p_cid (src/store/record-state.ts decideRelease): while the record is in
-- flight under p_cid, or is the unknown outcome (reason crash) that claim's own lapsed lease made
-- (fg_claim_v1 keeps claim_id and lease_until then; a finish and this function write lease_until
-- 0, a takeover another claim_id, a resolution another state), it deletes the record or puts
-- back the unknown outcome the claim took over (after_reason), with the claim's expiry.
-- o_kind: released | restored | not_held; o_lapsed: it undid such a lapsed lease
CREATE OR REPLACE FUNCTION ${s}.fg_release_v1(p_route text, p_scope text, p_key text, p_cid text,
  OUT o_kind text, OUT o_lapsed boolean)
LANGUAGE plpgsql AS $fn$
DECLARE
  r ${s}.fg_records_v1%ROWTYPE;
BEGIN
  o_kind := 'not_held'; o_lapsed := false;
  SELECT * INTO r FROM ${s}.fg_records_v1 t
    WHERE t.route = p_route AND t.scope = p_scope AND t.key = p_key AND t.claim_id = p_cid FOR UPDATE;
  IF NOT FOUND THEN RETURN; END IF;
  IF r.state = 'unknown' AND coalesce(r.reason, 'crash') = 'crash' AND r.lease_until > 0 THEN
    o_lapsed := true;
  ELSIF r.state <> 'in_flight' THEN
    RETURN;
  END IF;
  IF r.after_reason IS NULL THEN
    DELETE FROM ${s}.fg_records_v1 t WHERE t.route = p_route AND t.scope = p_scope AND t.key = p_key;
    o_kind := 'released';
  ELSE
    UPDATE ${s}.fg_records_v1 t SET state = 'unknown', reason = r.after_reason, after_reason = NULL, lease_until = 0
      WHERE t.route = p_route AND t.scope = p_scope AND t.key = p_key;
    o_kind := 'restored';
  END IF;
END
$fn$;

-- v3 of settle: as v2, and answers each call (o_i): a release what fg_release_v1 did, a finish NULL.
-- v2 and v1 stay for gateways from before; their releases run fg_release_v1 too.
CREATE OR REPLACE FUNCTION ${s}.fg_settle_many_v3(
  p_route text[], p_scope text[], p_key text[], p_cid text[], p_state text[], p_ttl_ms bigint[],
  p_status integer[], p_headers text[], p_body bytea[], p_reason text[], p_now bigint[])
RETURNS TABLE (o_i integer, o_kind text, o_lapsed boolean)
LANGUAGE plpgsql AS $fn$
DECLARE v_i integer;
BEGIN
  FOR v_i IN SELECT t.n::integer FROM unnest(p_route, p_scope, p_key) WITH ORDINALITY AS t(r, s, k, n) ORDER BY t.r, t.s, t.k, t.n LOOP
    o_i := v_i; o_kind := NULL; o_lapsed := NULL;
    IF p_state[v_i] IS NULL THEN
      SELECT x.o_kind, x.o_lapsed INTO o_kind, o_lapsed FROM ${s}.fg_release_v1(p_route[v_i], p_scope[v_i], p_key[v_i], p_cid[v_i]) x;
    ELSE
      UPDATE ${s}.fg_records_v1 t SET state = p_state[v_i], lease_until = 0,
        expires_at = coalesce(p_now[v_i], ${s}.fg_now_ms_v1()) + p_ttl_ms[v_i], status = p_status[v_i],
        headers = p_headers[v_i], body = p_body[v_i], reason = p_reason[v_i], after_reason = NULL
        WHERE t.route = p_route[v_i] AND t.scope = p_scope[v_i] AND t.key = p_key[v_i] AND t.claim_id = p_cid[v_i] AND t.state = 'in_flight';
    END IF;
    RETURN NEXT;
  END LOOP;
END
$fn$;

-- v2 of settle: a finish keeps the record p_ttl_ms from the server's clock (p_now NULL)
CREATE OR REPLACE FUNCTION ${s}.fg_settle_many_v2(
  p_route text[], p_scope text[], p_key text[], p_cid text[], p_state text[], p_ttl_ms bigint[],
  p_status integer[], p_headers text[], p_body bytea[], p_reason text[], p_now bigint[])
RETURNS integer
LANGUAGE plpgsql AS $fn$
DECLARE v_i integer;
BEGIN
  FOR v_i IN SELECT t.n::integer FROM unnest(p_route, p_scope, p_key) WITH ORDINALITY AS t(r, s, k, n) ORDER BY t.r, t.s, t.k, t.n LOOP
    IF p_state[v_i] IS NULL THEN
      PERFORM ${s}.fg_release_v1(p_route[v_i], p_scope[v_i], p_key[v_i], p_cid[v_i]);
    ELSE
      UPDATE ${s}.fg_records_v1 t SET state = p_state[v_i], lease_until = 0,
        expires_at = coalesce(p_now[v_i], ${s}.fg_now_ms_v1()) + p_ttl_ms[v_i], status = p_status[v_i],
        headers = p_headers[v_i], body = p_body[v_i], reason = p_reason[v_i], after_reason = NULL
        WHERE t.route = p_route[v_i] AND t.scope = p_scope[v_i] AND t.key = p_key[v_i] AND t.claim_id = p_cid[v_i] AND t.state = 'in_flight';
    END IF;
  END LOOP;
  RETURN coalesce(array_length(p_route, 1), 0);
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
      PERFORM ${s}.fg_release_v1(p_route[v_i], p_scope[v_i], p_key[v_i], p_cid[v_i]);
    ELSE
      UPDATE ${s}.fg_records_v1 t SET state = p_state[v_i], lease_until = 0, expires_at = p_exp[v_i], status = p_status[v_i],
        headers = p_headers[v_i], body = p_body[v_i], reason = p_reason[v_i], after_reason = NULL
        WHERE t.route = p_route[v_i] AND t.scope = p_scope[v_i] AND t.key = p_key[v_i] AND t.claim_id = p_cid[v_i] AND t.state = 'in_flight';
    END IF;
  END LOOP;
  RETURN coalesce(array_length(p_route, 1), 0);
END
$fn$;
`
}

/**
 * `fencing.serialize: store` (src/fencing/window.ts): the registered writes, and their batches.
 * Register takes the resource's mark row FOR SHARE before it reads it and writes the
 * registration: a fence raising that mark (its INSERT … ON CONFLICT DO UPDATE locks the row)
 * waits until the registration is committed, and a registration made while such a fence is under
 * way waits for it and then reads the raised mark (READ COMMITTED re-reads a row it waited for).
 * Batches take the mark rows in resource order, as the fence batches do: no deadlock between them.
 */
export function registrationsSchemaSql(s: string): string {
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

-- v2: the deadline as a duration from the server's clock (p_now NULL), read under the mark's lock
CREATE OR REPLACE FUNCTION ${s}.fg_register_many_v2(p_resources text[], p_tokens bigint[], p_ids text[], p_hold_ms bigint[], p_now bigint[])
RETURNS TABLE (o_i integer, o_registered boolean, o_highest text, o_oldest text, o_until bigint)
LANGUAGE plpgsql AS $fn$
DECLARE
  v_i integer;
  v_highest bigint;
  v_now bigint;
BEGIN
  FOR v_i IN SELECT t.n::integer FROM unnest(p_resources) WITH ORDINALITY AS t(r, n) ORDER BY t.r, t.n LOOP
    o_i := v_i; o_highest := NULL; o_oldest := NULL; o_until := 0;
    SELECT f.highest INTO v_highest FROM ${s}.fg_fences_v1 f WHERE f.resource = p_resources[v_i] FOR SHARE;
    IF FOUND AND p_tokens[v_i] < v_highest THEN
      o_registered := false; o_highest := v_highest::text;
    ELSE
      v_now := coalesce(p_now[v_i], ${s}.fg_now_ms_v1());
      INSERT INTO ${s}.fg_registrations_v1 AS w (resource, id, token, deadline)
        VALUES (p_resources[v_i], p_ids[v_i], p_tokens[v_i], v_now + p_hold_ms[v_i])
        ON CONFLICT (resource, id) DO UPDATE SET token = excluded.token, deadline = excluded.deadline;
      o_registered := true;
      SELECT min(w.token)::text, coalesce(max(w.deadline), 0) INTO o_oldest, o_until FROM ${s}.fg_registrations_v1 w
        WHERE w.resource = p_resources[v_i] AND w.token < p_tokens[v_i] AND w.deadline > v_now;
    END IF;
    RETURN NEXT;
  END LOOP;
END
$fn$;

-- v2: deletes each registration (p_hold_ms NULL), or keeps it p_hold_ms from the server's clock (p_now NULL)
CREATE OR REPLACE FUNCTION ${s}.fg_unregister_many_v2(p_resources text[], p_ids text[], p_hold_ms bigint[], p_now bigint[])
RETURNS integer
LANGUAGE plpgsql AS $fn$
DECLARE v_i integer;
BEGIN
  FOR v_i IN SELECT t.n::integer FROM unnest(p_resources, p_ids) WITH ORDINALITY AS t(r, d, n) ORDER BY t.r, t.d, t.n LOOP
    IF p_hold_ms[v_i] IS NOT NULL THEN
      UPDATE ${s}.fg_registrations_v1 w SET deadline = coalesce(p_now[v_i], ${s}.fg_now_ms_v1()) + p_hold_ms[v_i]
        WHERE w.resource = p_resources[v_i] AND w.id = p_ids[v_i];
    ELSE
      DELETE FROM ${s}.fg_registrations_v1 w WHERE w.resource = p_resources[v_i] AND w.id = p_ids[v_i];
    END IF;
  END LOOP;
  RETURN coalesce(array_length(p_resources, 1), 0);
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

/** Statements of the migration (./migrate.ts), around schemaSql and registrationsSchemaSql. */
export const migrateSql = {
  /** serialises replicas migrating at once, until the transaction ends */
  lock: "SELECT pg_advisory_xact_lock(hashtext('fencegate migrate'))",
  /** $1: the schema's bare name */
  schemaExists: 'SELECT 1 FROM pg_namespace WHERE nspname = $1',
  createSchema: (s: string): string => `CREATE SCHEMA ${s}`,
}

/** The attempt log's columns that are not text, with their types (the table above). */
const AUDIT_CASTS: Partial<Record<(typeof AUDIT_COLUMNS)[number], string>> = {
  time: 'bigint', abandoned: 'smallint', duplicate: 'smallint', overtaken: 'smallint', status: 'integer', upstream_status: 'integer',
  duration_ms: 'double precision', upstream_ms: 'double precision', late_ms: 'double precision',
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
     * true when the newest pieces of the schema are there: the v3 admit batch (the server's clock;
     * made by the same migration as the marks' since and the attempt log's upstream_ms, late_ms
     * and highest_token) and the v3 settle batch with the records' after_reason; $1 and $3 are the
     * qualified names of fg_admit_many_v3 and fg_settle_many_v3, $2 the schema's bare name
     */
    upToDate: `SELECT to_regproc($1) IS NOT NULL AND to_regproc($3) IS NOT NULL
        AND EXISTS (SELECT 1 FROM information_schema.columns
          WHERE table_schema = $2 AND table_name = 'fg_audit_v1' AND column_name = 'highest_token')
        AND EXISTS (SELECT 1 FROM information_schema.columns
          WHERE table_schema = $2 AND table_name = 'fg_records_v1' AND column_name = 'after_reason') AS ok`,
    admitManyName: `${s}.fg_admit_many_v3`,
    settleManyName: `${s}.fg_settle_many_v3`,
    /** the server's clock, epoch ms (../clock.ts measures the offset with it) */
    clock: named('fg_clock', 'SELECT (extract(epoch FROM clock_timestamp()) * 1000)::float8 AS ms'),
    ping: named('fg_ping', `SELECT 1 FROM ${s}.fg_meta_v1 LIMIT 1`),

    // high-water marks
    highest: named('fg_highest', `SELECT highest::text AS highest FROM ${s}.fg_fences_v1 WHERE resource = $1`),
    mark: named('fg_mark', `SELECT highest::text AS highest, since FROM ${s}.fg_fences_v1 WHERE resource = $1`),

    // every now below is $n::bigint, NULL for the server's clock (fg_now_ms_v1)

    // the request path's batches (./batches.ts): one call of a *_many function each
    fenceMany: named('fg_fence_many_v2', `SELECT o_i, o_accepted, o_highest, o_since, o_raised FROM ${s}.fg_fence_many_v2($1::text[], $2::bigint[], $3::bigint[])`),
    claimMany: named('fg_claim_many_v2', `SELECT * FROM ${s}.fg_claim_many_v2($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bigint[], $7::bigint[], $8::boolean[], $9::bigint[])`),
    admitMany: named('fg_admit_many_v3', `SELECT * FROM ${s}.fg_admit_many_v3($1::text[], $2::bigint[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::bigint[], $9::bigint[], $10::boolean[], $11::bigint[])`),
    settleMany: named('fg_settle_many_v3', `SELECT * FROM ${s}.fg_settle_many_v3($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bigint[], $7::integer[], $8::text[], $9::bytea[], $10::text[], $11::bigint[])`),

    // idempotency records off the group commit
    /** $1 leaseMs, $6 now */
    renew: named('fg_renew_v2', `UPDATE ${s}.fg_records_v1 SET lease_until = coalesce($6::bigint, ${s}.fg_now_ms_v1()) + $1
          WHERE route = $2 AND scope = $3 AND key = $4 AND claim_id = $5 AND state = 'in_flight'`),
    /** $5 now, $6 ttlMs */
    resolve: named('fg_resolve_v2', `SELECT r.* FROM (SELECT coalesce($5::bigint, ${s}.fg_now_ms_v1()) AS n) t, ${s}.fg_resolve_v1($1, $2, $3, $4, t.n, t.n + $6::bigint) r`),
    unknowns: named('fg_unknowns_v2', `SELECT route, scope, key, state, reason, lease_until, expires_at FROM ${s}.fg_records_v1,
            (SELECT coalesce($1::bigint, ${s}.fg_now_ms_v1()) AS n) t
          WHERE state IN ('unknown', 'in_flight') AND (state = 'unknown' OR lease_until <= t.n) AND expires_at > t.n
            AND ($2::text IS NULL OR route = $2) LIMIT $3`),
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
