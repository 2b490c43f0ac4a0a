/**
 * `fencegate unknown` and admin `GET /unknown` (contract §8): every idempotency record now in
 * the unknown state — sent upstream, no complete response, not yet resolved or expired — with
 * what the attempt log tells of it, so an operator can find the key and settle it with
 * `fencegate resolve --key-hash`. Also the `fencegate_unknown_outcomes_unresolved` gauge's
 * refresher (off the request path, at most every 15 s).
 */
import type { Config } from '../config/schema.js'
import { ExpiryWatch } from './expiry.js'
import type { EntrySink } from './entry.js'
import type { Logger } from '../log.js'
import type { Metrics } from '../telemetry/metrics.js'
import type { AuditEntry, Store, UnknownReason, UnknownRecord } from '../store/index.js'
import { keyHashOf } from '../idempotency/record-key.js'
import { nextProbeAt } from '../idempotency/settle/settler.js'

/** One unknown outcome as listed (contract §8 `{"unknown": [...]}`). */
export interface UnknownOutcome {
  route: string
  /** the attempt log's key hash (hex SHA-256 of scope and key): what `resolve --key-hash` takes */
  keyHash: string
  /** the fencing resource of the attempt, when it was fenced and the attempt log has it */
  resource?: string
  /** RFC 3339: when the outcome became unknown (the attempt ended, or its lease ran out) */
  since: string
  reason: UnknownReason
  /** hostname:pid of the gateway that sent it, when that gateway lived to write its entry */
  replica?: string
  traceId?: string
  requestId?: string
  /** RFC 3339: when the record expires and the key is taken as new */
  expires: string
  /** idempotency.settle (contract §4a): how many probes were sent */
  probes?: number
  /** idempotency.settle: RFC 3339, when the next probe is due; null when probing ended (or the record holds no probe): an operator's turn */
  nextProbe?: string | null
}

/** At most this many records are listed (the store's default limit). */
export const UNKNOWN_LIMIT = 1000

/**
 * Lists the unknown outcomes, oldest first.
 * @throws StoreError when the store cannot answer
 */
export async function listUnknown(config: Config, store: Store, now = Date.now(), route?: string): Promise<{ unknown: UnknownOutcome[] }> {
  const records = await store.unknowns(now, { route, limit: UNKNOWN_LIMIT })
  const hashes = records.map((r) => keyHashOf(r.key.scope, r.key.key))
  const told = new Map<string, AuditEntry>()
  if (records.length) {
    const entries = await store.audit.timeline({ keyHashes: hashes, route }, now - config.audit.retention, records.length * 20)
    // the latest entry of each key that made or found its outcome unknown
    for (const e of entries) if (e.keyHash && (e.unknown || e.abandoned)) told.set(`${e.route}\n${e.keyHash}`, e)
  }
  const ttl = new Map(config.routes.map((r) => [r.name, r.idempotency?.ttl]))
  const settles = new Map(config.routes.flatMap((r) => (r.idempotency?.settle ? [[r.name, r.idempotency.settle] as const] : [])))
  const out = records.map((r, i): UnknownOutcome & { at: number } => {
    const e = told.get(`${r.key.route}\n${hashes[i]}`)
    const own = e?.unknown !== undefined // written by the attempt itself, not by a later one that found it abandoned
    const at = since(r, e, ttl.get(r.key.route))
    const u: UnknownOutcome & { at: number } = { at, route: r.key.route, keyHash: hashes[i], since: new Date(at).toISOString(), reason: r.reason, expires: new Date(r.expiresAt).toISOString() }
    if (e?.resource) u.resource = e.resource
    const settle = settles.get(r.key.route)
    if (settle) {
      u.probes = r.probes ?? 0
      const next = nextProbeAt(r, { afterMs: settle.after, forMs: settle.for ?? ttl.get(r.key.route)!, ttlMs: ttl.get(r.key.route)! })
      u.nextProbe = next === null ? null : new Date(next).toISOString()
    }
    if (own) {
      u.replica = e.replica
      if (e.traceId) u.traceId = e.traceId
      if (e.requestId) u.requestId = e.requestId
    }
    return u
  })
  out.sort((a, b) => a.at - b.at)
  return { unknown: out.map(({ at: _, ...u }) => u) }
}

/** When the outcome became unknown: the lease end of a crashed holder, else its attempt's end. */
function since(r: UnknownRecord, e: AuditEntry | undefined, ttlMs: number | undefined): number {
  if (r.leaseUntil > 0) return r.leaseUntil
  if (e?.unknown) return e.time
  return ttlMs !== undefined ? r.expiresAt - ttlMs : r.expiresAt
}

/**
 * Keeps `fencegate_unknown_outcomes_unresolved{route}` at the store's count, every `intervalMs`
 * (default 15 s, shorter for a ttl under 45 s) and once at start; every idempotent route is set,
 * 0 when it has none. Each round also hands the records about to expire to ./expiry.ts.
 * @param audit where the expiries' attempt-log entries go
 * @returns stop
 */
export function watchUnknown(config: Config, store: Store, metrics: Metrics, log: Logger, audit?: EntrySink, intervalMs = 15_000): () => void {
  const ttls = new Map(config.routes.flatMap((r) => r.idempotency ? [[r.name, r.idempotency.ttl] as const] : []))
  const routes = [...ttls.keys()]
  const expiry = new ExpiryWatch(store, ttls, metrics, log, audit)
  // a round at least every third of the shortest ttl, so that no record expires between two unseen
  intervalMs = Math.max(1_000, Math.min(intervalMs, ...[...ttls.values()].map((t) => t / 3)))
  let busy = false
  const refresh = async () => {
    if (busy) return
    busy = true
    try {
      const records = await store.unknowns(Date.now(), { limit: 100_000 })
      const counts = new Map(routes.map((r) => [r, 0]))
      for (const r of records) counts.set(r.key.route, (counts.get(r.key.route) ?? 0) + 1)
      for (const [route, n] of counts) metrics.unknownUnresolved.set({ route }, n)
      // the ones that expire before the next round: released (and counted) just before they do
      expiry.consider(records, intervalMs * 1.5)
    } catch (e) {
      log.warn('could not count unresolved unknown outcomes; the gauge keeps its last value', { error: (e as Error).message })
    } finally {
      busy = false
    }
  }
  for (const route of routes) metrics.unknownUnresolved.set({ route }, 0)
  void refresh()
  const timer = setInterval(refresh, intervalMs)
  timer.unref()
  return () => { clearInterval(timer); expiry.stop() }
}
