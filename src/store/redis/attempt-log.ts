/**
 * The Redis store's attempt log (contract §8): JSON entries in streams, field `e` — one stream on
 * one server, AUDIT_STREAMS (./keys.ts) spread over a cluster's masters. Read back whole from a
 * minute before the window and filtered here: the log is read off the request path.
 */
import { aggregate, fencedIn, inTimeline, type AuditEntry, type AuditLog } from '../attempt-log/types.js'
import type { Conn } from './connection.js'

/** Runs one store operation: the closed check and StoreError wrapping (RedisStore's `#run`). */
export type RunOp = <T>(op: string, fn: () => Promise<T>) => Promise<T>

/**
 * The attempt log on `streams`.
 * @param retentionMs entries older than this are trimmed, ms
 * @param run wraps each call (errors become StoreError, op `audit_append`, `audit_query`, …)
 */
export function streamLog(redis: Conn, streams: readonly string[], retentionMs: number, run: RunOp): AuditLog {
  let next = 0

  /** Every entry of every stream from a minute before `since`, 1000 a page; a stream that cannot be read fails the whole read. */
  const scan = async (since: number, each: (e: AuditEntry) => void): Promise<void> => {
    await Promise.all(streams.map(async (key) => {
      // stream ids are Redis's clock, the entries' times the gateways': a minute's slack
      let start = String(Math.max(0, since - 60_000))
      for (;;) {
        const page = await redis.xrange(key, start, '+', 'COUNT', 1000)
        for (const [, fields] of page) {
          const i = fields.indexOf('e')
          if (i >= 0) try { each(JSON.parse(fields[i + 1]) as AuditEntry) } catch { /* not ours */ }
        }
        if (page.length < 1000) break
        start = `(${page[page.length - 1][0]}`
      }
    }))
  }

  /** The entries `keep` selects since `since`, oldest first, the newest `limit`. */
  const newest = async (since: number, keep: (e: AuditEntry) => boolean, limit: number): Promise<AuditEntry[]> => {
    const out: AuditEntry[] = []
    await scan(since, (e) => { if (keep(e)) out.push(e) })
    return out.sort((a, b) => a.time - b.time).slice(-limit)
  }

  return {
    /**
     * Appends a batch to one stream (cluster: the next of 16, in turn, and when its master fails,
     * the one half the slot space away, on another master). Entries older than the retention are
     * trimmed (XTRIM MINID ~, by the stream's ms ids).
     */
    append: (batch) => run('audit_append', async () => {
      if (!batch.length) return
      const minId = String(Math.max(0, Date.now() - retentionMs))
      const entries = batch.map((e) => JSON.stringify(e))
      const n = streams.length
      const i = next++ % n
      try {
        await redis.fgAudit(streams[i], minId, ...entries)
      } catch (e) {
        if (n === 1) throw e
        await redis.fgAudit(streams[(i + n / 2) % n], minId, ...entries)
      }
    }),
    /** Aggregated by the entries' own times. */
    query: (since, until, route) => run('audit_query', async () => {
      const entries: AuditEntry[] = []
      await scan(since, (e) => entries.push(e))
      return aggregate(entries, since, until, route)
    }),
    timeline: (filter, since, limit) => run('audit_timeline', () => newest(since, (e) => e.time >= since && inTimeline(e, filter), limit)),
    fenced: (since, until, route, limit) => run('audit_fenced', () => newest(since, (e) => fencedIn(e, since, until, route), limit)),
  }
}
