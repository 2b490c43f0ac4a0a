/**
 * The plpgsql functions kept only for gateways of older versions, which keep calling them during a
 * rolling upgrade once the schema is migrated (./functions.ts says why a released function never
 * changes). This version calls none of them; the store tests call some to hold them to what those
 * gateways expect.
 *
 * Every version so far is package 0.1.0, so each is named by the commit that stopped calling it.
 * A gateway refuses a schema older than itself, never a newer one, so any older build can still
 * run against this schema: each function stays until no such build does.
 */

/**
 * Called by gateways built before d7be068 (marks' since): directly by those before 3736566 (group
 * commit), through fg_fence_many_v1 and fg_admit_many_v1 by the rest. Drop once no gateway older
 * than d7be068 runs against the schema, with those two.
 */
export const fenceV1 = (s: string): string => `-- v1, as gateways from before since was kept call it (through the *_many_v1 batches) during a
-- rolling upgrade: the same check-and-set, keeping since on the database's clock
CREATE OR REPLACE FUNCTION ${s}.fg_fence_v1(p_resource text, p_token bigint, OUT o_accepted boolean, OUT o_highest text)
LANGUAGE plpgsql AS $fn$
BEGIN
  SELECT f.o_accepted, f.o_highest INTO o_accepted, o_highest
    FROM ${s}.fg_fence_v2(p_resource, p_token, (extract(epoch FROM clock_timestamp()) * 1000)::bigint) f;
END
$fn$;
`

/**
 * Called by gateways built from 3736566 (group commit) up to before d7be068 (marks' since); drop
 * once no gateway older than d7be068 runs against the schema.
 */
export const fenceManyV1 = (s: string): string => `-- Batches (group commit): one round trip and one transaction for many calls of one operation.
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
`

/**
 * Called by gateways built from 3736566 (group commit) up to before dd3c0bd (the store's clock),
 * which pass the lease's end and the expiry as instants; drop once no gateway older than dd3c0bd
 * runs against the schema. fg_claim_v1, which it runs, stays: fg_claim_v2 runs it too.
 */
export const claimManyV1 = (s: string): string => `CREATE OR REPLACE FUNCTION ${s}.fg_claim_many_v1(
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
`

/**
 * Called by gateways built from 9ac035c (Store.admit) up to before d7be068 (marks' since); drop
 * once no gateway older than d7be068 runs against the schema.
 */
export const admitManyV1 = (s: string): string => `-- fence and, when it accepts, claim: every fence of the batch first (resource order), then the
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
`

/**
 * Called by gateways built from d7be068 (marks' since) up to before dd3c0bd (the store's clock);
 * drop once no gateway older than dd3c0bd runs against the schema.
 */
export const admitManyV2 = (s: string): string => `CREATE OR REPLACE FUNCTION ${s}.fg_admit_many_v2(
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
`

/**
 * Called by gateways built from dd3c0bd (the store's clock) up to before c4d13e7 (a release answers
 * what it did); drop once no gateway older than c4d13e7 runs against the schema.
 */
export const settleManyV2 = (s: string): string => `-- v2 of settle: a finish keeps the record p_ttl_ms from the server's clock (p_now NULL)
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
`

/**
 * Called by gateways built from 3736566 (group commit) up to before dd3c0bd (the store's clock);
 * drop once no gateway older than dd3c0bd runs against the schema.
 */
export const settleManyV1 = (s: string): string => `-- finish (p_state set) or release (p_state NULL) of claims still held by p_cid
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

/**
 * Called by gateways built from d7be068 (`fencing.serialize: store`) up to before dd3c0bd (the
 * store's clock); drop once no gateway older than dd3c0bd runs against the schema.
 */
export const registerManyV1 = (s: string): string => `CREATE OR REPLACE FUNCTION ${s}.fg_register_many_v1(p_resources text[], p_tokens bigint[], p_ids text[], p_deadlines bigint[], p_now bigint[])
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
`

/**
 * Called by gateways built from d7be068 (`fencing.serialize: store`) up to before dd3c0bd (the
 * store's clock); drop once no gateway older than dd3c0bd runs against the schema.
 */
export const unregisterManyV1 = (s: string): string => `-- deletes each registration, or (p_until > 0) keeps it until then
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

/**
 * Called by gateways built from dd3c0bd (the store's clock) up to 2f33a51 (settle's interface, before
 * its PostgreSQL engine), which claim without a probe; drop once no gateway older than the commit
 * that added fg_claim_many_v3 runs against the schema, with fg_claim_v2.
 */
export const claimManyV2 = (s: string): string => `-- v2 of the claim batch and v3 of the admit batch: durations (p_lease_ms, p_ttl_ms) from the
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
`

/**
 * Called by gateways built from dd3c0bd (the store's clock) up to 2f33a51 (settle's interface,
 * before its PostgreSQL engine); drop once no gateway older than the commit that added
 * fg_admit_many_v4 runs against the schema.
 */
export const admitManyV3 = (s: string): string => `CREATE OR REPLACE FUNCTION ${s}.fg_admit_many_v3(
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
`

/**
 * Called by gateways built from c4d13e7 (a release answers what it did) up to 2f33a51 (settle's
 * interface, before its PostgreSQL engine), whose finishes set no first probe time; drop once no
 * gateway older than the commit that added fg_settle_many_v4 runs against the schema.
 */
export const settleManyV3 = (s: string): string => `-- v3 of settle: as v2, and answers each call (o_i): a release what fg_release_v1 did, a finish NULL.
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
`
