/**
 * The PostgreSQL store's leases (contract §3a, ../contract/leases.ts): the table, the plpgsql
 * functions (the table of ../shared/lease-state.ts; versioned as ./functions.ts says: a name,
 * arguments and answer never change once released, a change is a new `_vN`), and the calls.
 *
 * One lease row per resource, locked FOR UPDATE by every lease operation (a grant inserts a
 * released placeholder first, so two first grants of one resource also meet on one row lock).
 * The grant raises the mark in the same transaction, by the upsert a fence makes; a fence of
 * another transaction that raised it meanwhile makes the grant read the mark again and go above.
 * Instants come from the server's clock after the lock (fg_now_ms_v1), unless a test passes `now`.
 * The calls of one event-loop turn go as one batch (fg_lease_many_v1), as the fences do.
 */
import type pg from 'pg'
import type { Lease, LeaseChange, LeaseGrant } from '../contract/leases.js'
import type { StoreClock } from '../shared/clock.js'
import type { SequencedQuery } from './sequence.js'
import { batcher } from './batcher.js'
import { arrayLiteral } from './arrays.js'
import { refusedAndRolledBack } from './errors.js'
import { LEASE_TOKENS_EXHAUSTED, MAX_LEASE_TOKEN } from '../contract/leases.js'

/** The lease table and its functions, for the (validated, quoted) schema `s`; appended to the migration (./sql.ts). */
export const leasesV1 = (s: string): string => `-- the lease service (contract §3a): one row per resource; a released lease keeps its token
CREATE TABLE IF NOT EXISTS ${s}.fg_leases_v1 (
  resource text PRIMARY KEY, token bigint NOT NULL, holder text NOT NULL,
  expires_at bigint NOT NULL, ttl_ms bigint NOT NULL, released boolean NOT NULL
);
-- a grant: refused while another holder's lease is live; else token = max(lease, mark) + 1, the mark raised to it
-- (raised, 22003, when that max is already the largest token)
CREATE OR REPLACE FUNCTION ${s}.fg_lease_acquire_v1(p_resource text, p_holder text, p_ttl bigint, p_now bigint,
  OUT o_granted boolean, OUT o_token text, OUT o_holder text, OUT o_expires bigint, OUT o_ttl bigint,
  OUT o_prev_token text, OUT o_prev_holder text, OUT o_prev_expired boolean, OUT o_prev_expires bigint)
LANGUAGE plpgsql AS $fn$
DECLARE
  v_token bigint; v_holder text; v_exp bigint; v_ttl bigint; v_rel boolean; v_top bigint; v_new bigint;
BEGIN
  INSERT INTO ${s}.fg_leases_v1 (resource, token, holder, expires_at, ttl_ms, released) VALUES (p_resource, 0, '', 0, 0, true)
    ON CONFLICT (resource) DO NOTHING;
  SELECT l.token, l.holder, l.expires_at, l.ttl_ms, l.released INTO v_token, v_holder, v_exp, v_ttl, v_rel
    FROM ${s}.fg_leases_v1 l WHERE l.resource = p_resource FOR UPDATE;
  p_now := coalesce(p_now, ${s}.fg_now_ms_v1());
  IF NOT v_rel AND v_exp > p_now AND v_holder <> p_holder THEN
    o_granted := false; o_token := v_token::text; o_holder := v_holder; o_expires := v_exp; o_ttl := v_ttl;
    RETURN;
  END IF;
  LOOP
    SELECT f.highest INTO v_top FROM ${s}.fg_fences_v1 f WHERE f.resource = p_resource;
    IF greatest(coalesce(v_top, 0), v_token) >= ${MAX_LEASE_TOKEN} THEN
      RAISE EXCEPTION '${LEASE_TOKENS_EXHAUSTED}' USING ERRCODE = '22003';
    END IF;
    v_new := greatest(coalesce(v_top, 0), v_token) + 1;
    INSERT INTO ${s}.fg_fences_v1 AS f (resource, highest, since) VALUES (p_resource, v_new, p_now)
      ON CONFLICT (resource) DO UPDATE SET highest = excluded.highest, since = excluded.since WHERE f.highest < excluded.highest;
    EXIT WHEN FOUND;
  END LOOP;
  UPDATE ${s}.fg_leases_v1 l SET token = v_new, holder = p_holder, expires_at = p_now + p_ttl, ttl_ms = p_ttl, released = false
    WHERE l.resource = p_resource;
  o_granted := true; o_token := v_new::text; o_holder := p_holder; o_expires := p_now + p_ttl; o_ttl := p_ttl;
  IF NOT v_rel THEN o_prev_token := v_token::text; o_prev_holder := v_holder; o_prev_expired := v_exp <= p_now; o_prev_expires := v_exp; END IF;
END
$fn$;
-- a renewal (p_release false) or release by token: only the resource's lease under p_token with no newer mark
CREATE OR REPLACE FUNCTION ${s}.fg_lease_change_v1(p_resource text, p_token bigint, p_release boolean, p_now bigint,
  OUT o_done boolean, OUT o_token text, OUT o_holder text, OUT o_expires bigint, OUT o_ttl bigint, OUT o_highest text)
LANGUAGE plpgsql AS $fn$
DECLARE
  v_found boolean; v_token bigint; v_holder text; v_exp bigint; v_ttl bigint; v_rel boolean; v_top bigint;
BEGIN
  SELECT l.token, l.holder, l.expires_at, l.ttl_ms, l.released INTO v_token, v_holder, v_exp, v_ttl, v_rel
    FROM ${s}.fg_leases_v1 l WHERE l.resource = p_resource FOR UPDATE;
  v_found := FOUND;
  SELECT f.highest INTO v_top FROM ${s}.fg_fences_v1 f WHERE f.resource = p_resource;
  IF NOT v_found OR v_rel OR v_token <> p_token OR coalesce(v_top, 0) > p_token THEN
    o_done := false;
    o_highest := nullif(greatest(coalesce(v_top, 0), coalesce(v_token, 0)), 0)::text;
    RETURN;
  END IF;
  o_done := true; o_token := v_token::text; o_holder := v_holder; o_ttl := v_ttl;
  IF p_release THEN
    UPDATE ${s}.fg_leases_v1 l SET released = true WHERE l.resource = p_resource;
    o_expires := v_exp;
  ELSE
    o_expires := coalesce(p_now, ${s}.fg_now_ms_v1()) + v_ttl;
    UPDATE ${s}.fg_leases_v1 l SET expires_at = o_expires WHERE l.resource = p_resource;
  END IF;
END
$fn$;
`

/**
 * The group commit's lease batch (./batcher.ts): each call as its single-call function, in
 * resource order, then arrival order — as the fence and admit batches take the marks, so two
 * batches never wait on each other in a cycle. `p_ops` holds acquire, renew or release.
 */
export const leaseManyV1 = (s: string): string => `-- the lease calls of one event-loop turn in one statement and one transaction
CREATE OR REPLACE FUNCTION ${s}.fg_lease_many_v1(p_ops text[], p_resources text[], p_holders text[], p_ttls bigint[], p_tokens bigint[], p_now bigint[])
RETURNS TABLE (o_i integer, o_ok boolean, o_token text, o_holder text, o_expires bigint, o_ttl bigint,
  o_prev_token text, o_prev_holder text, o_prev_expired boolean, o_prev_expires bigint, o_highest text)
LANGUAGE plpgsql AS $fn$
DECLARE v_i integer;
BEGIN
  FOR v_i IN SELECT t.n::integer FROM unnest(p_resources) WITH ORDINALITY AS t(r, n) ORDER BY t.r, t.n LOOP
    o_i := v_i;
    IF p_ops[v_i] = 'acquire' THEN
      SELECT a.o_granted, a.o_token, a.o_holder, a.o_expires, a.o_ttl, a.o_prev_token, a.o_prev_holder, a.o_prev_expired, a.o_prev_expires, NULL
        INTO o_ok, o_token, o_holder, o_expires, o_ttl, o_prev_token, o_prev_holder, o_prev_expired, o_prev_expires, o_highest
        FROM ${s}.fg_lease_acquire_v1(p_resources[v_i], p_holders[v_i], p_ttls[v_i], p_now[v_i]) a;
    ELSE
      SELECT c.o_done, c.o_token, c.o_holder, c.o_expires, c.o_ttl, NULL, NULL, NULL, NULL, c.o_highest
        INTO o_ok, o_token, o_holder, o_expires, o_ttl, o_prev_token, o_prev_holder, o_prev_expired, o_prev_expires, o_highest
        FROM ${s}.fg_lease_change_v1(p_resources[v_i], p_tokens[v_i], p_ops[v_i] = 'release', p_now[v_i]) c;
    END IF;
    RETURN NEXT;
  END LOOP;
END
$fn$;
`

/** The statements, for the schema `s`; every now is $n::bigint, NULL for the server's clock. */
export const leaseQueries = (s: string) => ({
  acquire: { name: 'fg_lease_acquire_v1', text: `SELECT * FROM ${s}.fg_lease_acquire_v1($1, $2, $3::bigint, $4::bigint)` },
  change: { name: 'fg_lease_change_v1', text: `SELECT * FROM ${s}.fg_lease_change_v1($1, $2::bigint, $3::boolean, $4::bigint)` },
  many: { name: 'fg_lease_many_v1', text: `SELECT * FROM ${s}.fg_lease_many_v1($1::text[], $2::text[], $3::text[], $4::bigint[], $5::bigint[], $6::bigint[])` },
  read: { name: 'fg_lease_read_v1', text: `SELECT token::text AS token, holder, expires_at, ttl_ms FROM ${s}.fg_leases_v1
          WHERE resource = $1 AND NOT released AND expires_at > coalesce($2::bigint, ${s}.fg_now_ms_v1())` },
})

type LeaseQueries = ReturnType<typeof leaseQueries>

interface Answer { o_token: string; o_holder: string; o_expires: string; o_ttl: string }
interface Row extends Answer { o_i: number; o_ok: boolean; o_prev_token: string | null; o_prev_holder: string | null; o_prev_expired: boolean | null; o_prev_expires: string | null; o_highest: string | null }

/** One lease call of the batch: `token` for a renewal or release, `holder` and `ttlMs` for an acquisition. */
export interface LeaseCall { op: 'acquire' | 'renew' | 'release'; resource: string; holder?: string; ttlMs?: number; token?: bigint; now: number | null }

const leaseOf = (clock: StoreClock, resource: string, r: Answer): Lease =>
  ({ resource, token: BigInt(r.o_token), holder: r.o_holder, expiresAt: clock.toLocal(Number(r.o_expires)), ttlMs: Number(r.o_ttl) })

/**
 * The lease calls of one store, batched (./batcher.ts) as the fences are: the calls of one
 * event-loop turn go as one sequenced `fg_lease_many_v1` statement.
 */
export function leaseBatches(pool: pg.Pool, q: LeaseQueries, write: SequencedQuery): (call: LeaseCall) => Promise<Row> {
  return batcher(async (calls: readonly LeaseCall[]) => {
    const cols = [calls.map((c) => c.op), calls.map((c) => c.resource), calls.map((c) => c.holder ?? null), calls.map((c) => (c.ttlMs === undefined ? null : Math.round(c.ttlMs))), calls.map((c) => c.token?.toString() ?? null), calls.map((c) => c.now)]
    const { rows } = await write<Row>(q.many, cols.map(arrayLiteral))
    if (rows.length !== calls.length) throw new Error(`batch of ${calls.length} answered ${rows.length} rows`)
    const out = new Array<Row>(calls.length)
    for (const r of rows) out[r.o_i - 1] = r
    return out
  }, { maxInFlight: Math.max(1, Math.floor((pool.options.max ?? 10) / 4)), isolate: refusedAndRolledBack })
}

/** `Store.acquireLease` from its batch row. */
export function grantOf(clock: StoreClock, resource: string, r: Row): LeaseGrant {
  if (!r.o_ok) return { granted: false, held: leaseOf(clock, resource, r) }
  const out: LeaseGrant = { granted: true, lease: leaseOf(clock, resource, r) }
  if (r.o_prev_token !== null) out.previous = { token: BigInt(r.o_prev_token), holder: r.o_prev_holder ?? '', expiresAt: clock.toLocal(Number(r.o_prev_expires)), expired: r.o_prev_expired === true }
  return out
}

/** `Store.renewLease` and `Store.releaseLease` from its batch row. */
export function changeOf(clock: StoreClock, resource: string, r: Row): LeaseChange {
  if (r.o_ok) return { done: true, lease: leaseOf(clock, resource, r) }
  return r.o_highest === null ? { done: false } : { done: false, highest: BigInt(r.o_highest) }
}

/** `Store.readLease`: one read. */
export async function readLease(pool: pg.Pool, q: LeaseQueries, clock: StoreClock, resource: string, now: number | null): Promise<Lease | undefined> {
  const { rows } = await pool.query<{ token: string; holder: string; expires_at: string; ttl_ms: string }>({ ...q.read, values: [resource, now] })
  const r = rows[0]
  return r && leaseOf(clock, resource, { o_token: r.token, o_holder: r.holder, o_expires: r.expires_at, o_ttl: r.ttl_ms })
}
