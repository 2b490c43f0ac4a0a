/**
 * The PostgreSQL store's write sequence (../state-loss/sequence.ts) and timeline.
 *
 * `fg_seq_v1` is one row, advanced by every write statement of the request path, in the same
 * statement (and so the same transaction): the batches' text is wrapped as
 *   SELECT (SELECT fg_seq_v1($seen, $timeline)) AS o_seq, x.* FROM (<the batch>) x
 * The row's lock orders the writes of every gateway as their commits are ordered, so a standby
 * that has a write has every write answered before it. The function refuses — raising, which
 * rolls the whole statement back — when the row is below what the gateway saw (SQLSTATE FGSQ1),
 * or, without `store.replicas`, when the server is on another timeline than the one the gateway
 * knew (FGTL1): a promoted standby, or a point-in-time restore. The scalar subquery runs after the
 * batch function has produced its rows, so the row is locked only from then to the commit.
 *
 * The timeline is the current WAL file's (pg_walfile_name(pg_current_wal_lsn())): it changes at
 * the promotion itself, where pg_control_checkpoint() would wait for the next checkpoint.
 */
import pg from 'pg'
import type { WriteSequence } from '../state-loss/sequence.js'
import type { Named } from './queries.js'

/** The sequence's table and function, for the (validated, quoted) schema `s`; run by the migration. */
export function sequenceSchemaSql(s: string): string {
  return `
CREATE TABLE IF NOT EXISTS ${s}.fg_seq_v1 (id smallint PRIMARY KEY CHECK (id = 1), n bigint NOT NULL);
INSERT INTO ${s}.fg_seq_v1 (id, n) VALUES (1, 0) ON CONFLICT (id) DO NOTHING;

-- answers '<sequence> <timeline>'; refuses (FGSQ1, FGTL1) before the statement's writes commit
CREATE OR REPLACE FUNCTION ${s}.fg_seq_v1(p_seen bigint, p_timeline text) RETURNS text
LANGUAGE plpgsql AS $fn$
DECLARE
  v bigint;
  v_tl text := substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8);
BEGIN
  IF p_timeline IS NOT NULL AND v_tl <> p_timeline THEN
    RAISE EXCEPTION 'the store is on timeline % (a promoted standby or a restore), the gateway knew %', v_tl, p_timeline USING ERRCODE = 'FGTL1';
  END IF;
  UPDATE ${s}.fg_seq_v1 SET n = n + 1 WHERE id = 1 RETURNING n INTO v;
  IF v - 1 < p_seen THEN
    RAISE EXCEPTION 'the store''s write sequence is % after % was seen', v - 1, p_seen USING ERRCODE = 'FGSQ1', DETAIL = (v - 1)::text;
  END IF;
  RETURN v::text || ' ' || v_tl;
END
$fn$;
`
}

/** The current timeline, as fg_seq_v1 reads it. */
export const currentTimelineSql = 'SELECT substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8) AS tl'

/** Runs one write statement of the store with the sequence around it. */
export type SequencedQuery = <R extends pg.QueryResultRow>(q: Named, values: unknown[]) => Promise<pg.QueryResult<R>>

/** The timeline one gateway process follows, and whether leaving it counts as a loss. */
export class Timeline {
  known?: string
  constructor(
    /** true without store.replicas: a promoted standby may lack acknowledged commits */
    readonly failoverIsLoss: boolean,
    private readonly sequence: WriteSequence,
  ) {}

  /**
   * The timeline read now (markers, open): remembered; another one than known, without
   * store.replicas, is reported.
   * @throws StoreWentBack
   */
  observe(tl: string | undefined, op: string): void {
    if (!tl || tl === this.known) return
    const was = this.known
    this.known = tl
    if (was !== undefined && this.failoverIsLoss) throw this.sequence.wentBack(op, `timeline ${tl} after ${was}: a standby was promoted (or a backup restored) while store.replicas was 0`, { signal: 'timeline', now: tl, was })
  }
}

/**
 * Wraps `pool.query` for the write statements (see the file's header).
 * @param s the validated, quoted schema
 * @throws (the returned function) StoreWentBack on FGSQ1 or FGTL1; else what pg threw
 */
export function sequencedQuery(pool: pg.Pool, s: string, sequence: WriteSequence, timeline: Timeline): SequencedQuery {
  const texts = new Map<string, string>()
  return async <R extends pg.QueryResultRow>(q: Named, values: unknown[]) => {
    const n = values.length
    let text = texts.get(q.name)
    if (text === undefined) texts.set(q.name, text = `SELECT (SELECT ${s}.fg_seq_v1($${n + 1}::bigint, $${n + 2}::text)) AS o_seq, x.* FROM (${q.text}) x`)
    const seen = sequence.seen
    const expected = timeline.failoverIsLoss ? timeline.known ?? null : null
    try {
      const r = await pool.query<R & { o_seq: string }>({ name: `${q.name}_seq`, text, values: [...values, seen.toString(), expected] })
      const [seq, tl] = String(r.rows[0]?.o_seq ?? '').split(' ')
      if (seq) sequence.saw(seq)
      if (tl && timeline.known === undefined) timeline.known = tl
      return r
    } catch (e) {
      const code = e instanceof pg.DatabaseError ? e.code : undefined
      if (code === 'FGSQ1') throw sequence.wentBack(q.name, `sequence ${(e as pg.DatabaseError).detail} after ${seen} was seen`, { signal: 'sequence', now: String((e as pg.DatabaseError).detail), was: seen.toString() })
      if (code === 'FGTL1') {
        const now = /timeline (\w+)/.exec((e as Error).message)?.[1]
        if (now) timeline.known = now
        throw sequence.wentBack(q.name, `timeline ${now ?? '?'} after ${expected}: a standby was promoted (or a backup restored) while store.replicas was 0`, { signal: 'timeline', now: now ?? '?', was: String(expected) })
      }
      throw e
    }
  }
}
