/**
 * The plpgsql functions this version calls (the legacy ones, kept for older gateways, are in
 * ./legacy-functions.ts; ./sql.ts applies both, in the order released). Each is `(s) => text` for
 * the (validated, quoted) schema `s`; the text is what the migration sends, comments included.
 *
 * A function's name, arguments and answer columns never change once released: gateways of an
 * older version keep calling it during a rolling upgrade, after the schema is migrated. A change
 * is a new `_vN` beside the old one, and the old one moves to ./legacy-functions.ts.
 *
 * Clock: these functions take every instant from the server — fg_now_ms_v1(), `clock_timestamp()`
 * as epoch ms, read when the statement gets to that call (after any row lock it waited for) — and
 * the gateway passes durations: a lease, a ttl, how long a registration holds. Each takes a `now`
 * too, NULL but for tests that drive time themselves (the store's `clock: 'caller'`).
 *
 * Batches (group commit, ./batches.ts): one round trip and one transaction for many calls of one
 * operation. Each call runs as its single-call function would, in key order (then arrival order),
 * so two batches lock rows in the same order and never deadlock; calls of one key run in the order
 * they arrived.
 */

/**
 * `fencegate resolve` and the admin API (queries().resolve): an operator settles an unknown
 * outcome.
 */
export const resolveV1 = (s: string): string => `-- an operator settles an unknown outcome (or an in-flight record past its lease):
-- failed deletes the record, completed keeps it as not_stored with status 0, without the probe
-- fields of idempotency.settle (a body change only: what it takes and answers is unchanged)
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
      headers = NULL, body = NULL, reason = NULL, after_reason = NULL,
      probe = NULL, probes = NULL, next_probe = NULL, after_probe = NULL, after_probes = NULL, after_next = NULL
      WHERE t.route = p_route AND t.scope = p_scope AND t.key = p_key;
  END IF;
END
$fn$;
`

/** The server's clock every live function and statement reads when its `now` is NULL. */
export const nowMsV1 = (s: string): string => `-- the server's clock, epoch ms: when the statement gets here, not when it began
CREATE OR REPLACE FUNCTION ${s}.fg_now_ms_v1() RETURNS bigint
LANGUAGE sql VOLATILE AS $fn$ SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint $fn$;
`

/** The fence: fg_fence_many_v2 and fg_admit_many_v3 run it for each call. */
export const fenceV2 = (s: string): string => `-- the check-and-set; a mark it raises keeps p_now as its since (o_raised); p_now NULL: the server's clock
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
`

/**
 * The claim on instants, as the legacy batches (and fg_claim_v2) run it: fg_claim_v3 with the
 * instants made durations from p_now and no probe, so every version runs the one body and a
 * claim by an older gateway clears the probe fields too (its signature and answer unchanged).
 */
export const claimV1 = (s: string): string => `-- v1: the lease's end and the expiry as instants; the body is fg_claim_v3's
CREATE OR REPLACE FUNCTION ${s}.fg_claim_v1(
  p_route text, p_scope text, p_key text, p_fp text, p_cid text,
  p_lease bigint, p_exp bigint, p_retry boolean, p_now bigint,
  OUT o_kind text, OUT o_after text, OUT o_abandoned boolean, OUT o_lease bigint,
  OUT o_status integer, OUT o_headers text, OUT o_body bytea, OUT o_reason text)
LANGUAGE plpgsql AS $fn$
BEGIN
  SELECT c.o_kind, c.o_after, c.o_abandoned, c.o_lease, c.o_status, c.o_headers, c.o_body, c.o_reason
    INTO o_kind, o_after, o_abandoned, o_lease, o_status, o_headers, o_body, o_reason
    FROM ${s}.fg_claim_v3(p_route, p_scope, p_key, p_fp, p_cid, p_lease - p_now, p_exp - p_now, p_retry, p_now, NULL) c;
END
$fn$;
`

/** The claim on durations without a probe: the legacy fg_claim_many_v2 and fg_admit_many_v3 run it for each call. */
export const claimV2 = (s: string): string => `-- v2: the lease and the ttl as durations from the server's clock (p_now NULL) or from p_now
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
`

/** queries().fenceMany: the fence batch. */
export const fenceManyV2 = (s: string): string => `-- v2 of the fence and admit batches: each fence also answers when its mark was first accepted
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
`

/** A release, as every settle batch (v1 … v4) runs it: the one body that gives a claim back. */
export const releaseV1 = (s: string): string => `-- a release by the claim p_cid (src/store/shared/record-state.ts decideRelease): while the record is in
-- flight under p_cid, or is the unknown outcome (reason crash) that claim's own lapsed lease made
-- (fg_claim_v1 keeps claim_id and lease_until then; a finish and this function write lease_until
-- 0, a takeover another claim_id, a resolution another state), it deletes the record or puts
-- back the unknown outcome the claim took over (after_reason) with its probe fields (after_probe,
-- after_probes, after_next: a body change only), with the claim's expiry.
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
    UPDATE ${s}.fg_records_v1 t SET state = 'unknown', reason = r.after_reason, after_reason = NULL, lease_until = 0,
      probe = r.after_probe, probes = r.after_probes, next_probe = r.after_next, after_probe = NULL, after_probes = NULL, after_next = NULL
      WHERE t.route = p_route AND t.scope = p_scope AND t.key = p_key;
    o_kind := 'restored';
  END IF;
END
$fn$;
`

/** queries().registerMany (`fencing.serialize: store`). */
export const registerManyV2 = (s: string): string => `-- v2: the deadline as a duration from the server's clock (p_now NULL), read under the mark's lock
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
`

/** queries().unregisterMany (`fencing.serialize: store`). */
export const unregisterManyV2 = (s: string): string => `-- v2: deletes each registration (p_hold_ms NULL), or keeps it p_hold_ms from the server's clock (p_now NULL)
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
`

/**
 * The claim (the table of ../shared/record-state.ts), the one body every claim function runs:
 * durations from the server's clock (p_now NULL) or from p_now, and `idempotency.settle`'s filled
 * probe request (p_probe, NULL without settle), kept with the record while in flight or unknown.
 * A takeover keeps the probe fields of the outcome it took over (after_probe, after_probes,
 * after_next) for its release to put back.
 */
export const claimV3 = (s: string): string => `-- v3: the claim with its probe request (idempotency.settle); fg_claim_v1 and fg_claim_v2 run it
CREATE OR REPLACE FUNCTION ${s}.fg_claim_v3(
  p_route text, p_scope text, p_key text, p_fp text, p_cid text,
  p_lease_ms bigint, p_ttl_ms bigint, p_retry boolean, p_now bigint, p_probe text,
  OUT o_kind text, OUT o_after text, OUT o_abandoned boolean, OUT o_lease bigint,
  OUT o_status integer, OUT o_headers text, OUT o_body bytea, OUT o_reason text)
LANGUAGE plpgsql AS $fn$
DECLARE
  r ${s}.fg_records_v1%ROWTYPE;
  v_fresh boolean := false;
  v_now bigint := coalesce(p_now, ${s}.fg_now_ms_v1());
  v_lease bigint := v_now + p_lease_ms;
  v_exp bigint := v_now + p_ttl_ms;
BEGIN
  FOR attempt IN 1..5 LOOP
    INSERT INTO ${s}.fg_records_v1 (route, scope, key, state, fingerprint, claim_id, lease_until, expires_at, probe)
    VALUES (p_route, p_scope, p_key, 'in_flight', p_fp, p_cid, v_lease, v_exp, p_probe)
    ON CONFLICT (route, scope, key) DO NOTHING;
    IF FOUND THEN o_kind := 'claimed'; RETURN; END IF;
    SELECT * INTO r FROM ${s}.fg_records_v1 t WHERE t.route = p_route AND t.scope = p_scope AND t.key = p_key FOR UPDATE;
    EXIT WHEN FOUND;
    -- released or reaped between the two statements: try the insert again
  END LOOP;
  IF r.state IS NULL THEN RAISE EXCEPTION 'claim: the record kept disappearing'; END IF;

  IF r.expires_at <= v_now THEN
    v_fresh := true; o_kind := 'claimed';
  ELSIF r.fingerprint <> p_fp THEN
    o_kind := 'mismatch';
  ELSIF r.state = 'completed' THEN
    o_kind := 'completed'; o_status := r.status; o_headers := r.headers; o_body := r.body;
  ELSIF r.state = 'not_stored' THEN
    o_kind := 'not_stored'; o_status := coalesce(r.status, 0);
  ELSIF r.state = 'in_flight' THEN
    IF r.lease_until > v_now THEN
      o_kind := 'in_flight'; o_lease := r.lease_until;
    ELSIF p_retry THEN
      v_fresh := true; o_kind := 'claimed'; o_after := 'crash'; o_abandoned := true;
    ELSE
      -- abandoned: its holder crashed or hung past the lease; reported once, then kept as unknown,
      -- with its claim_id, lease_until, after_reason and probe, so that its holder's release can
      -- undo it and a probe can still ask about it
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
      lease_until = v_lease, expires_at = v_exp, status = NULL, headers = NULL, body = NULL, reason = NULL, after_reason = o_after,
      probe = p_probe, probes = NULL, next_probe = NULL,
      after_probe = CASE WHEN o_after IS NULL THEN NULL ELSE r.probe END,
      after_probes = CASE WHEN o_after IS NULL THEN NULL ELSE r.probes END,
      after_next = CASE WHEN o_after IS NULL THEN NULL ELSE r.next_probe END
      WHERE t.route = p_route AND t.scope = p_scope AND t.key = p_key;
  END IF;
END
$fn$;
`

/** queries().claimMany: the claim batch. */
export const claimManyV3 = (s: string): string => `-- v3 of the claim batch and v4 of the admit batch: each claim with its probe request (p_probe,
-- NULL without idempotency.settle), through fg_claim_v3
CREATE OR REPLACE FUNCTION ${s}.fg_claim_many_v3(
  p_route text[], p_scope text[], p_key text[], p_fp text[], p_cid text[],
  p_lease_ms bigint[], p_ttl_ms bigint[], p_retry boolean[], p_now bigint[], p_probe text[])
RETURNS TABLE (o_i integer, o_kind text, o_after text, o_abandoned boolean, o_lease bigint,
  o_status integer, o_headers text, o_body bytea, o_reason text)
LANGUAGE plpgsql AS $fn$
DECLARE v_i integer;
BEGIN
  FOR v_i IN SELECT t.n::integer FROM unnest(p_route, p_scope, p_key) WITH ORDINALITY AS t(r, s, k, n) ORDER BY t.r, t.s, t.k, t.n LOOP
    SELECT c.o_kind, c.o_after, c.o_abandoned, c.o_lease, c.o_status, c.o_headers, c.o_body, c.o_reason
      INTO o_kind, o_after, o_abandoned, o_lease, o_status, o_headers, o_body, o_reason
      FROM ${s}.fg_claim_v3(p_route[v_i], p_scope[v_i], p_key[v_i], p_fp[v_i], p_cid[v_i], p_lease_ms[v_i], p_ttl_ms[v_i], p_retry[v_i], p_now[v_i], p_probe[v_i]) c;
    o_i := v_i;
    RETURN NEXT;
  END LOOP;
END
$fn$;
`

/**
 * queries().admitMany: fence and, when it accepts, claim. Every fence of the batch runs before
 * any claim, so admit batches take row locks in the same order as the fence and claim batches.
 */
export const admitManyV4 = (s: string): string => `-- v4: as v3, each claim with its probe request (p_probe), through fg_claim_v3
CREATE OR REPLACE FUNCTION ${s}.fg_admit_many_v4(
  p_resources text[], p_tokens bigint[],
  p_route text[], p_scope text[], p_key text[], p_fp text[], p_cid text[],
  p_lease_ms bigint[], p_ttl_ms bigint[], p_retry boolean[], p_now bigint[], p_probe text[])
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
        FROM ${s}.fg_claim_v3(p_route[v_i], p_scope[v_i], p_key[v_i], p_fp[v_i], p_cid[v_i], p_lease_ms[v_i], p_ttl_ms[v_i], p_retry[v_i], p_now[v_i], p_probe[v_i]) c;
    END IF;
    RETURN NEXT;
  END LOOP;
END
$fn$;
`

/** queries().settleMany: finishes and releases. */
export const settleManyV4 = (s: string): string => `-- v4 of settle: as v3, and a finish as unknown of a record holding a probe request sets its first
-- probe time p_probe_ms from now (NULL: none); a finish as completed or not stored drops the probe
CREATE OR REPLACE FUNCTION ${s}.fg_settle_many_v4(
  p_route text[], p_scope text[], p_key text[], p_cid text[], p_state text[], p_ttl_ms bigint[],
  p_status integer[], p_headers text[], p_body bytea[], p_reason text[], p_now bigint[], p_probe_ms bigint[])
RETURNS TABLE (o_i integer, o_kind text, o_lapsed boolean)
LANGUAGE plpgsql AS $fn$
DECLARE
  v_i integer;
  v_now bigint;
BEGIN
  FOR v_i IN SELECT t.n::integer FROM unnest(p_route, p_scope, p_key) WITH ORDINALITY AS t(r, s, k, n) ORDER BY t.r, t.s, t.k, t.n LOOP
    o_i := v_i; o_kind := NULL; o_lapsed := NULL;
    IF p_state[v_i] IS NULL THEN
      SELECT x.o_kind, x.o_lapsed INTO o_kind, o_lapsed FROM ${s}.fg_release_v1(p_route[v_i], p_scope[v_i], p_key[v_i], p_cid[v_i]) x;
    ELSE
      v_now := coalesce(p_now[v_i], ${s}.fg_now_ms_v1());
      UPDATE ${s}.fg_records_v1 t SET state = p_state[v_i], lease_until = 0,
        expires_at = v_now + p_ttl_ms[v_i], status = p_status[v_i],
        headers = p_headers[v_i], body = p_body[v_i], reason = p_reason[v_i], after_reason = NULL,
        probe = CASE WHEN p_state[v_i] = 'unknown' THEN t.probe END, probes = NULL,
        next_probe = CASE WHEN p_state[v_i] = 'unknown' AND t.probe IS NOT NULL THEN v_now + p_probe_ms[v_i] END,
        after_probe = NULL, after_probes = NULL, after_next = NULL
        WHERE t.route = p_route[v_i] AND t.scope = p_scope[v_i] AND t.key = p_key[v_i] AND t.claim_id = p_cid[v_i] AND t.state = 'in_flight';
    END IF;
    RETURN NEXT;
  END LOOP;
END
$fn$;
`

/** queries().takeProbe (`idempotency.settle`, Store.takeProbe). */
export const takeProbeV1 = (s: string): string => `-- the next probe of an unknown outcome (src/store/shared/record-state.ts decideTakeProbe): an
-- unknown record holding a probe, or one in flight past its lease (it becomes unknown, reason
-- crash, claim_id and lease_until kept for its holder's release), with p_seen probes so far and
-- the next due — at next_probe, else p_after_ms past the lapsed lease — on the server's clock
-- read after the row lock (p_now NULL). Then probes = p_seen + 1, the next due p_next_ms on.
-- o_kind: taken | not_due (nothing written)
CREATE OR REPLACE FUNCTION ${s}.fg_take_probe_v1(p_route text, p_scope text, p_key text,
  p_seen integer, p_after_ms bigint, p_next_ms bigint, p_now bigint,
  OUT o_kind text, OUT o_probe text, OUT o_probes integer, OUT o_reason text, OUT o_abandoned boolean)
LANGUAGE plpgsql AS $fn$
DECLARE
  r ${s}.fg_records_v1%ROWTYPE;
  v_now bigint;
  v_abandoned boolean;
BEGIN
  o_kind := 'not_due';
  SELECT * INTO r FROM ${s}.fg_records_v1 t WHERE t.route = p_route AND t.scope = p_scope AND t.key = p_key FOR UPDATE;
  v_now := coalesce(p_now, ${s}.fg_now_ms_v1());
  IF r.state IS NULL OR r.expires_at <= v_now OR r.probe IS NULL THEN RETURN; END IF;
  v_abandoned := r.state = 'in_flight';
  IF v_abandoned THEN
    IF r.lease_until > v_now THEN RETURN; END IF;
  ELSIF r.state <> 'unknown' THEN
    RETURN;
  END IF;
  IF coalesce(r.probes, 0) <> p_seen THEN RETURN; END IF;
  IF coalesce(r.next_probe, r.lease_until + p_after_ms) > v_now THEN RETURN; END IF;
  o_kind := 'taken'; o_probe := r.probe; o_probes := p_seen + 1; o_abandoned := v_abandoned;
  o_reason := CASE WHEN v_abandoned THEN 'crash' ELSE coalesce(r.reason, 'crash') END;
  UPDATE ${s}.fg_records_v1 t SET state = 'unknown', reason = o_reason, probes = o_probes, next_probe = v_now + p_next_ms
    WHERE t.route = p_route AND t.scope = p_scope AND t.key = p_key;
END
$fn$;
`

/** queries().settleUnknown (`idempotency.settle`, Store.settle). */
export const settleUnknownV1 = (s: string): string => `-- settles the unknown outcome with p_probes probes taken (src/store/shared/record-state.ts
-- decideSettle): applied, completed with the probe's response for p_ttl_ms; not_applied, deleted.
-- Anything else (resolved, taken over, probed again, expired) is left alone.
-- o_kind: settled (o_reason, the unknown reason) | moved
CREATE OR REPLACE FUNCTION ${s}.fg_settle_unknown_v1(p_route text, p_scope text, p_key text,
  p_probes integer, p_as text, p_ttl_ms bigint, p_status integer, p_headers text, p_body bytea, p_now bigint,
  OUT o_kind text, OUT o_reason text)
LANGUAGE plpgsql AS $fn$
DECLARE
  r ${s}.fg_records_v1%ROWTYPE;
  v_now bigint;
BEGIN
  SELECT * INTO r FROM ${s}.fg_records_v1 t WHERE t.route = p_route AND t.scope = p_scope AND t.key = p_key FOR UPDATE;
  v_now := coalesce(p_now, ${s}.fg_now_ms_v1());
  IF r.state IS DISTINCT FROM 'unknown' OR r.expires_at <= v_now OR coalesce(r.probes, 0) <> p_probes THEN
    o_kind := 'moved'; RETURN;
  END IF;
  o_kind := 'settled'; o_reason := coalesce(r.reason, 'crash');
  IF p_as = 'not_applied' THEN
    DELETE FROM ${s}.fg_records_v1 t WHERE t.route = p_route AND t.scope = p_scope AND t.key = p_key;
  ELSE
    UPDATE ${s}.fg_records_v1 t SET state = 'completed', lease_until = 0, expires_at = v_now + p_ttl_ms,
      status = p_status, headers = p_headers, body = p_body, reason = NULL, after_reason = NULL,
      probe = NULL, probes = NULL, next_probe = NULL, after_probe = NULL, after_probes = NULL, after_next = NULL
      WHERE t.route = p_route AND t.scope = p_scope AND t.key = p_key;
  END IF;
END
$fn$;
`
