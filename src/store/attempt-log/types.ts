/**
 * The attempt log (contract §8): one entry per decision the gateway made, appended by the
 * request path through a bounded queue (src/audit/queue.ts) and kept by the store. Entries
 * never carry a raw idempotency key: `keyHash` is the hex SHA-256 of scope and key.
 */
import type { Outcome, UnknownReason } from '../../outcomes.js'

/** One decision: a request's attempt, or an operator's resolution of an unknown outcome. */
export interface AuditEntry {
  /** epoch ms when the decision was made (the request ended, or the resolution was written) */
  time: number
  /**
   * `attempt`: a request; `resolve`: `fencegate resolve` (CLI or admin) settled a key;
   * `accept-loss`: `fencegate store accept-loss` (CLI or admin) accepted a store's lost state;
   * `probe`: a probe of `idempotency.settle` asked the resource about the key's unknown outcome
   * (`result` its answer: applied, not_applied, undecided, error; `upstreamStatus`, `upstreamMs`,
   * `requestId` of the attempt it settles, `reason` what went wrong). A settlement by probe is a
   * `resolve` entry with `by` "probe".
   * `lease`: the lease service (contract §3a) decided on the resource's lease: `result` granted,
   * held, renewed, released, stale or expired (a takeover of a lease past its end: written with
   * the grant, `token` the old lease's), `token` the lease's, `by` its holder, `leaseUntil` its end;
   * `route` is LEASE_ROUTE.
   */
  kind: 'attempt' | 'resolve' | 'accept-loss' | 'probe' | 'lease'
  /** hostname:pid of the gateway process (or the CLI) that wrote it */
  replica: string
  route: string
  method?: string
  /** the filled fencing resource, when fencing checked the request */
  resource?: string
  /** the fencing token as a decimal string */
  token?: string
  /** hex SHA-256 of scope and key (`keyHashOf`, src/idempotency/record-key.ts); never the key */
  keyHash?: string
  /** the request fingerprint (hex SHA-256 of method, path, query, content type, body) */
  fingerprint?: string
  /** contract §6 outcome of the attempt */
  outcome?: Outcome
  /** idempotency result (stored, replayed, in_flight, key_reused, released, not_stored) */
  result?: string
  /** set when this attempt's own outcome became unknown (sent, no complete response) */
  unknown?: UnknownReason
  /** this attempt found an earlier attempt of its key abandoned past its lease (reason crash) */
  abandoned?: boolean
  /** this attempt forwarded a key again after an unknown outcome (unknownOutcome: retry) */
  duplicate?: boolean
  /** an older-token request for the resource completed after a newer-token one was forwarded */
  overtaken?: boolean
  /** status sent to the client (499: the client left) */
  status?: number
  /** status the upstream answered, when it answered */
  upstreamStatus?: number
  durationMs?: number
  /**
   * ms from sending the request upstream to its response headers: how long the upstream took to
   * apply the write (the effect's duration, `fencegate leases`); set when the upstream answered
   */
  upstreamMs?: number
  /**
   * a stale write (412): ms between the first acceptance of the token that superseded it and
   * its arrival — how far behind its writer was (`supersededForMs`, `fencegate leases`)
   */
  lateMs?: number
  /** a stale write (412): the token that superseded it (the resource's highest), decimal */
  highestToken?: string
  /** W3C trace id of the request's SERVER span, when tracing is on */
  traceId?: string
  /** the request id (the client's X-Request-Id when sane, else the gateway's) */
  requestId?: string
  /** kind `resolve`: what the operator declared */
  resolution?: 'completed' | 'failed'
  /** operator actions (`resolve`, `accept-loss`): why, as given with `--reason` or the admin body's `reason` */
  reason?: string
  /** operator actions: who, e.g. `cli:alice@host-1` or `admin-api:10.0.0.7`; a lease entry: its holder */
  by?: string
  /** kind `lease`: when the lease ends (granted, renewed, held) or ended (released, expired), epoch ms */
  leaseUntil?: number
}

/**
 * The kinds of entry that are operator actions (`TimelineFilter.operator`, the audit report's
 * actions): a resolution and an accepted loss, by the CLI or the admin API (a settlement by probe
 * is a `resolve` too). Probes are the gateway's own, lease entries the lease service's: neither is one.
 */
export const OPERATOR_KINDS = ['resolve', 'accept-loss'] as const satisfies readonly AuditEntry['kind'][]

/** Whether `e` is an operator action (OPERATOR_KINDS). */
const isOperatorAction = (e: AuditEntry): boolean => (OPERATOR_KINDS as readonly string[]).includes(e.kind)

/** The `route` of the lease service's entries: no route's name (names are [a-z0-9_-]+), so never one of theirs. */
export const LEASE_ROUTE = '(leases)'

/** Counts of one route over a window (contract §8, without `claim`). */
export interface AuditCounts {
  route: string
  attempts: number
  keys: number
  forwarded: number
  replayed: number
  stale: number
  tokenMissing: number
  inFlightConflicts: number
  keyReused: number
  released: number
  unknownOutcomes: { resolved: number; unresolved: number }
  duplicateForwards: number
  overtaken: number
}

/**
 * Where the attempt log is kept: each store implements it next to its own state (a table, a
 * Redis stream, a ring buffer in memory).
 */
export interface AuditLog {
  /** Appends entries in order; entries older than the retention may be dropped now or later. */
  append(batch: readonly AuditEntry[]): Promise<void>
  /**
   * Aggregated counts per route of the attempts with `since <= time < until`, routes sorted by
   * name; only `route` when given. An unknown outcome counts as resolved when a `resolve` entry
   * for the same route and key hash was written at or after it (before `until`).
   */
  query(since: number, until: number, route?: string): Promise<AuditCounts[]>
  /**
   * The entries about some keys or one resource since `since` (epoch ms), oldest first, at most
   * `limit`: a key's or a resource's timeline, and what `fencegate unknown` tells of each record.
   */
  timeline(filter: TimelineFilter, since: number, limit: number): Promise<AuditEntry[]>
  /**
   * The fenced attempts (those with a resource) with `since <= time < until`, only `route`'s
   * when given, oldest first; at most `limit`, the newest: what `fencegate leases` reads.
   */
  fenced(since: number, until: number, route: string | undefined, limit: number): Promise<AuditEntry[]>
}

/** Whether an entry is a fenced attempt in a window (the in-memory logs' filter of `AuditLog.fenced`; the SQL one is in ./sql.ts). */
export function fencedIn(e: AuditEntry, since: number, until: number, route: string | undefined): boolean {
  return e.kind === 'attempt' && e.resource !== undefined && e.time >= since && e.time < until && (route === undefined || e.route === route)
}

/**
 * Which entries a timeline holds: those with one of `keyHashes`, or with `resource`, or (with
 * `operator`) every operator action (OPERATOR_KINDS), or (with `all`) every entry;
 * only `route`'s when given, and only those before `until` (epoch ms) when given: the next older
 * page of a timeline.
 */
export interface TimelineFilter {
  route?: string
  keyHashes?: readonly string[]
  resource?: string
  operator?: boolean
  all?: boolean
  until?: number
}

/** Whether an entry belongs to a timeline (the in-memory logs' filter; the SQL one is in ./sql.ts). */
export function inTimeline(e: AuditEntry, f: TimelineFilter): boolean {
  if (f.route !== undefined && e.route !== f.route) return false
  if (f.until !== undefined && e.time >= f.until) return false
  if (f.all) return true
  if (f.operator && isOperatorAction(e)) return true
  if (f.keyHashes && e.keyHash !== undefined && f.keyHashes.includes(e.keyHash)) return true
  return f.resource !== undefined && e.resource === f.resource
}

export const emptyCounts = (route: string): AuditCounts => ({
  route, attempts: 0, keys: 0, forwarded: 0, replayed: 0, stale: 0, tokenMissing: 0,
  inFlightConflicts: 0, keyReused: 0, released: 0, unknownOutcomes: { resolved: 0, unresolved: 0 },
  duplicateForwards: 0, overtaken: 0,
})

/**
 * The aggregation of `AuditLog.query` over entries in memory (memory and redis stores; the SQL
 * stores run the same rules as one query). `entries` may hold more than the window.
 */
export function aggregate(entries: Iterable<AuditEntry>, since: number, until: number, route?: string): AuditCounts[] {
  const byRoute = new Map<string, AuditCounts & { keySet: Set<string> }>()
  /** latest resolution time per route + key hash */
  const resolvedAt = new Map<string, number[]>()
  const unknowns: { counts: AuditCounts; id: string | undefined; time: number }[] = []
  for (const e of entries) {
    if (e.time < since || e.time >= until || (route !== undefined && e.route !== route)) continue
    if (e.kind === 'resolve') {
      if (e.keyHash) {
        const id = `${e.route}\n${e.keyHash}`
        const list = resolvedAt.get(id) ?? []
        list.push(e.time)
        resolvedAt.set(id, list)
      }
      continue
    }
    if (e.kind !== 'attempt') continue
    let c = byRoute.get(e.route)
    if (!c) byRoute.set(e.route, c = { ...emptyCounts(e.route), keySet: new Set() })
    c.attempts++
    if (e.keyHash) c.keySet.add(e.keyHash)
    switch (e.outcome) {
      case 'forwarded': c.forwarded++; break
      case 'replayed': c.replayed++; break
      case 'stale': c.stale++; break
      case 'token_missing': c.tokenMissing++; break
      case 'in_flight': c.inFlightConflicts++; break
      case 'key_reused': c.keyReused++; break
    }
    if (e.result === 'released') c.released++
    if (e.duplicate) c.duplicateForwards++
    if (e.overtaken) c.overtaken++
    const id = e.keyHash ? `${e.route}\n${e.keyHash}` : undefined
    if (e.unknown) unknowns.push({ counts: c, id, time: e.time })
    if (e.abandoned) unknowns.push({ counts: c, id, time: e.time })
  }
  for (const u of unknowns) {
    const settled = u.id !== undefined && (resolvedAt.get(u.id) ?? []).some((t) => t >= u.time)
    if (settled) u.counts.unknownOutcomes.resolved++
    else u.counts.unknownOutcomes.unresolved++
  }
  return [...byRoute.values()]
    .map(({ keySet, ...c }) => ({ ...c, keys: keySet.size }))
    .sort((a, b) => (a.route < b.route ? -1 : a.route > b.route ? 1 : 0))
}
