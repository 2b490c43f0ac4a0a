/**
 * `leases.defaultTtl` (contract §3a): a fixed duration, or `advice` — the lease `fencegate leases`
 * advises (src/audit/leases.ts) for the routes fencing the resource, from the last day of the
 * attempt log: the longest of their minimum leases, at least FLOOR_MS and at most `maxTtl`. With no
 * answered fenced write to size from (no route fences the resource, or none was answered yet):
 * UNSIZED_MS, at most `maxTtl`.
 *
 * Each route's figure is read from the log on its own and stands FRESH_MS; a call after that gets
 * the figure it stood at while a read runs behind it. Only a route's first call waits for its read,
 * at most FIRST_WAIT_MS. A read that fails (the store is down) keeps the last figure and is tried
 * again after a back-off, from RETRY_MIN_MS doubling to FRESH_MS (docs/leases.md, "How long a lease is").
 */
import type { Config } from '../config/schema.js'
import type { AuditLog } from '../store/index.js'
import { buildLeases } from '../audit/leases.js'
import { routesFencing } from './resources.js'

/** The shortest advised lease, ms: a pause of a second or two (GC, a deploy's SIGSTOP) is not a takeover. */
const FLOOR_MS = 5_000
/** The lease while nothing sizes it, ms. */
const UNSIZED_MS = 30_000
/** How long one reading of a route's figure stands, ms. */
const FRESH_MS = 60_000
/** The window the advice reads, ms. */
const WINDOW_MS = 86_400_000
/** Longest a route's first lease call waits for its first reading, ms; then it is unsized. */
const FIRST_WAIT_MS = 2_000
/** The first back-off after a failed reading, ms. */
const RETRY_MIN_MS = 5_000

/** One route's advice: the last figure read, and when to read it again. */
interface RouteAdvice {
  /** the advised minimum lease, ms; undefined: unsized (nothing answered yet, or never read) */
  minimumLeaseMs?: number
  /** no reading before this instant (epoch ms) */
  nextAt: number
  /** the back-off after the last failure, ms; 0 after a success */
  backoffMs: number
  /** the reading under way */
  reading?: Promise<void>
}

export class LeaseTtl {
  readonly #fencing: (resource: string) => string[]
  readonly #routes = new Map<string, RouteAdvice>()

  constructor(private readonly config: Config, private readonly log: AuditLog) {
    this.#fencing = routesFencing(config)
  }

  /** The ttl of a lease on `resource` when the call names none, ms; never rejects. */
  async defaultFor(resource: string, now = Date.now()): Promise<number> {
    const l = this.config.leases!
    if (l.defaultTtl !== 'advice') return l.defaultTtl
    const routes = this.#fencing(resource)
    const first = routes.flatMap((r) => {
      const known = this.#routes.get(r)
      if (known) {
        if (!known.reading && now >= known.nextAt) known.reading = this.#read(r, known, now)
        return []
      }
      const a: RouteAdvice = { nextAt: 0, backoffMs: 0 }
      this.#routes.set(r, a)
      a.reading = this.#read(r, a, now)
      return [a.reading]
    })
    if (first.length) {
      let timer: NodeJS.Timeout | undefined
      await Promise.race([Promise.all(first), new Promise<void>((resolve) => { timer = setTimeout(resolve, FIRST_WAIT_MS) })])
      clearTimeout(timer)
    }
    const sizes = routes.map((r) => this.#routes.get(r)?.minimumLeaseMs).filter((x): x is number => x !== undefined)
    if (!sizes.length) return Math.min(UNSIZED_MS, l.maxTtl)
    return Math.min(l.maxTtl, Math.max(FLOOR_MS, ...sizes))
  }

  /** Reads `route`'s figure into `a`; on failure keeps the last one and backs off. Never rejects. */
  async #read(route: string, a: RouteAdvice, now: number): Promise<void> {
    try {
      const report = await buildLeases(this.config, this.log, now - WINDOW_MS, now, route)
      a.minimumLeaseMs = report.routes[0]?.advice.minimumLeaseMs
      a.backoffMs = 0
      a.nextAt = now + FRESH_MS
    } catch {
      a.backoffMs = Math.min(FRESH_MS, a.backoffMs ? a.backoffMs * 2 : RETRY_MIN_MS)
      a.nextAt = Date.now() + a.backoffMs
    } finally {
      a.reading = undefined
    }
  }
}
