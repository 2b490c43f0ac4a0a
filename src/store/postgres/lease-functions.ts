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
 */
import type pg from 'pg'
import type { Lease, LeaseChange, LeaseGrant } from '../contract/leases.js'
import type { StoreClock } from '../shared/clock.js'
import type { SequencedQuery } from './sequence.js'

/** The lease table and its functions, for the (validated, quoted) schema `s`; appended to the migration (./sql.ts). */
export const leasesV1 = (s: string): string => `-- the lease service (contract §3a): one row per resource; a released lease keeps its token
CREATE TABLE IF NOT EXISTS ${s}.fg_leases_v1 (
  resource text PRIMARY KEY, token bigint NOT NULL, holder text NOT NULL,
  expires_at bigint NOT NULL, ttl_ms bigint NOT NULL, released boolean NOT NULL
);
-- a grant: refused while another holder's lease is live; else token = max(lease, mark) + 1, the mark raised to it
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

/** The statements, for the schema `s`; every now is $n::bigint, NULL for the server's clock. */
export const leaseQueries = (s: string) => ({
  acquire: { name: 'fg_lease_acquire_v1', text: `SELECT * FROM ${s}.fg_lease_acquire_v1($1, $2, $3::bigint, $4::bigint)` },
  change: { name: 'fg_lease_change_v1', text: `SELECT * FROM ${s}.fg_lease_change_v1($1, $2::bigint, $3::boolean, $4::bigint)` },
  read: { name: 'fg_lease_read_v1', text: `SELECT token::text AS token, holder, expires_at, ttl_ms FROM ${s}.fg_leases_v1
          WHERE resource = $1 AND NOT released AND expires_at > coalesce($2::bigint, ${s}.fg_now_ms_v1())` },
})

type LeaseQueries = ReturnType<typeof leaseQueries>

interface Answer { o_token: string; o_holder: string; o_expires: string; o_ttl: string }

const leaseOf = (clock: StoreClock, resource: string, r: Answer): Lease =>
  ({ resource, token: BigInt(r.o_token), holder: r.o_holder, expiresAt: clock.toLocal(Number(r.o_expires)), ttlMs: Number(r.o_ttl) })

/** `Store.acquireLease`, one sequenced statement. @param now the caller's with `clock: 'caller'`, else null */
export async function acquireLease(write: SequencedQuery, q: LeaseQueries, clock: StoreClock, resource: string, holder: string, ttlMs: number, now: number | null): Promise<LeaseGrant> {
  const { rows } = await write<Answer & { o_granted: boolean; o_prev_token: string | null; o_prev_holder: string | null; o_prev_expired: boolean | null; o_prev_expires: string | null }>(q.acquire, [resource, holder, Math.round(ttlMs), now])
  const r = rows[0]
  if (!r.o_granted) return { granted: false, held: leaseOf(clock, resource, r) }
  const out: LeaseGrant = { granted: true, lease: leaseOf(clock, resource, r) }
  if (r.o_prev_token !== null) out.previous = { token: BigInt(r.o_prev_token), holder: r.o_prev_holder ?? '', expiresAt: clock.toLocal(Number(r.o_prev_expires)), expired: r.o_prev_expired === true }
  return out
}

/** `Store.renewLease` and `Store.releaseLease`, one sequenced statement. */
export async function changeLease(write: SequencedQuery, q: LeaseQueries, clock: StoreClock, resource: string, token: bigint, release: boolean, now: number | null): Promise<LeaseChange> {
  const { rows } = await write<Answer & { o_done: boolean; o_highest: string | null }>(q.change, [resource, token.toString(), release, now])
  const r = rows[0]
  if (r.o_done) return { done: true, lease: leaseOf(clock, resource, r) }
  return r.o_highest === null ? { done: false } : { done: false, highest: BigInt(r.o_highest) }
}

/** `Store.readLease`: one read. */
export async function readLease(pool: pg.Pool, q: LeaseQueries, clock: StoreClock, resource: string, now: number | null): Promise<Lease | undefined> {
  const { rows } = await pool.query<{ token: string; holder: string; expires_at: string; ttl_ms: string }>({ ...q.read, values: [resource, now] })
  const r = rows[0]
  return r && leaseOf(clock, resource, { o_token: r.token, o_holder: r.holder, o_expires: r.expires_at, o_ttl: r.ttl_ms })
}
