/**
 * `store.replicas` on PostgreSQL: N synchronous standbys required. The gateway reads
 * `synchronous_standby_names` and `synchronous_commit` when the store opens and every minute;
 * while fewer than N standbys are configured for every commit to wait for, each write of the
 * request path is refused (StoreError: 503 on guarded routes) before it is sent. A configured
 * standby that does not answer is PostgreSQL's to handle: the commit waits for it, and the
 * gateway's `store.timeout` answers 503 first.
 * (https://www.postgresql.org/docs/15/runtime-config-replication.html#GUC-SYNCHRONOUS-STANDBY-NAMES)
 */
import type pg from 'pg'
import { StoreError } from '../contract/store.js'

/**
 * How many standbys each commit waits for, from `synchronous_standby_names`: `FIRST n (…)` and
 * `ANY n (…)` and `n (…)` name n; a plain list (or `*`) names one; '' none.
 */
export function standbysWaitedFor(names: string): number {
  const s = names.trim()
  if (s === '') return 0
  const m = /^(?:(?:FIRST|ANY)\s+)?(\d+)\s*\(/i.exec(s)
  return m ? Number(m[1]) : 1
}

/** synchronous_commit levels at which a commit waits for the synchronous standbys */
const WAITS = new Set(['on', 'remote_write', 'remote_apply'])

/** What the two settings mean against `wanted`: undefined when enough, else why not. */
export function shortfall(wanted: number, names: string, commit: string): string | undefined {
  const n = standbysWaitedFor(names)
  if (!WAITS.has(commit)) return `synchronous_commit is ${commit}: commits do not wait for any standby, and store.replicas asks for ${wanted}`
  if (n < wanted) return `synchronous_standby_names '${names}' makes commits wait for ${n} standby${n === 1 ? '' : 's'}, and store.replicas asks for ${wanted}`
  return undefined
}

/** Watches the settings of one store's database while it is open. */
export class StandbyWatch {
  /** why writes are refused now; undefined while enough standbys are configured (or none are asked for) */
  short?: string
  #timer?: NodeJS.Timeout

  constructor(private readonly pool: pg.Pool, private readonly wanted: number, private readonly onChange: (short: string | undefined) => void = () => {}) {}

  /** Reads the settings once (rejects when the database cannot answer), then every `intervalMs`. */
  async start(intervalMs = 60_000): Promise<void> {
    await this.check()
    this.#timer = setInterval(() => { this.check().catch(() => { /* the database is down: the writes fail on their own */ }) }, intervalMs)
    this.#timer.unref()
  }

  stop(): void {
    if (this.#timer) clearInterval(this.#timer)
  }

  async check(): Promise<void> {
    const { rows } = await this.pool.query<{ names: string; commit: string }>(
      "SELECT current_setting('synchronous_standby_names') AS names, current_setting('synchronous_commit') AS commit")
    const short = shortfall(this.wanted, rows[0].names, rows[0].commit)
    if (short !== this.short) this.onChange(short)
    this.short = short
  }

  /** @throws StoreError naming `op` while too few standbys are configured */
  refuseIfShort(op: string): void {
    if (this.short) throw new StoreError(`postgres ${op}: ${this.short}; the request fails closed`, op)
  }
}
