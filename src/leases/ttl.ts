/**
 * `leases.defaultTtl` (contract §3a): a fixed duration, or `advice` — the lease `fencegate leases`
 * advises (src/audit/leases.ts) for the routes fencing the resource, from the last day of the
 * attempt log: the longest of their minimum leases, at least FLOOR_MS and at most `maxTtl`. With no
 * answered fenced write to size from (no route fences the resource, or none was answered yet):
 * UNSIZED_MS, at most `maxTtl`. The figures are read at most once a minute, off the request path
 * but for the first lease call (docs/leases.md, "How long a lease is").
 */
import type { Config } from '../config/schema.js'
import type { AuditLog } from '../store/index.js'
import { buildLeases } from '../audit/leases.js'
import { routesFencing } from './resources.js'

/** The shortest advised lease, ms: a pause of a second or two (GC, a deploy's SIGSTOP) is not a takeover. */
export const FLOOR_MS = 5_000
/** The lease while nothing sizes it, ms. */
export const UNSIZED_MS = 30_000
/** How long one reading of the attempt log stands, ms. */
const FRESH_MS = 60_000
/** The window the advice reads, ms. */
const WINDOW_MS = 86_400_000

export class LeaseTtl {
  /** per route, its advised minimum lease (ms), from the last reading */
  #advice?: Promise<Map<string, number>>
  #readAt = 0

  constructor(private readonly config: Config, private readonly log: AuditLog) {}

  /** The ttl of a lease on `resource` when the call names none, ms. */
  async defaultFor(resource: string, now = Date.now()): Promise<number> {
    const l = this.config.leases!
    if (l.defaultTtl !== 'advice') return l.defaultTtl
    const advised = await this.#read(now)
    const sizes = routesFencing(this.config, resource).map((r) => advised.get(r)).filter((x): x is number => x !== undefined)
    if (!sizes.length) return Math.min(UNSIZED_MS, l.maxTtl)
    return Math.min(l.maxTtl, Math.max(FLOOR_MS, ...sizes))
  }

  #read(now: number): Promise<Map<string, number>> {
    if (this.#advice && now - this.#readAt < FRESH_MS) return this.#advice
    this.#readAt = now
    this.#advice = buildLeases(this.config, this.log, now - WINDOW_MS, now).then(
      (report) => new Map(report.routes.flatMap((r) => (r.advice.minimumLeaseMs !== undefined ? [[r.route, r.advice.minimumLeaseMs] as const] : []))),
      // the log cannot be read (the store is down): unsized for now, read again on the next call
      () => { this.#readAt = 0; return new Map<string, number>() },
    )
    return this.#advice
  }
}
