/**
 * The per-route series of contract §6 that exist at 0 from start-up (./metrics.ts `initRoute`):
 * the gateway's own answers a route can give, by method, and the label values of the settle
 * metrics (contract §4a).
 */
import type { Histogram, LabelValues } from 'prom-client'
import type { RouteConfig } from '../config/schema.js'
import { PROBLEMS, type ProblemName } from '../problems.js'

/** `by` of fencegate_unknown_outcomes_settled_total. */
export const SETTLED_BY = ['probe', 'operator', 'expiry'] as const
/** `as` of fencegate_unknown_outcomes_settled_total. */
export const SETTLED_AS = ['applied', 'not_applied'] as const
/** `answer` of fencegate_settle_probes_total (src/idempotency/settle/send.ts). */
export const PROBE_ANSWER_LABELS = ['applied', 'not_applied', 'undecided', 'error'] as const

/** The methods a route without `match.methods` is counted under at start-up (the config's method list). */
const METHODS = ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS'] as const

/**
 * The answers a route's requests can get from the gateway itself, by method: the problem types
 * (status and outcome from src/problems.ts) its features can produce. Forwarded and replayed
 * answers carry the upstream's status, which no list can hold; they are counted when they happen.
 */
export function gatewayAnswers(r: RouteConfig): { method: string; code: string; outcome: string }[] {
  const methods: readonly string[] = r.match.methods ?? METHODS
  const keyed = new Set<string>(r.idempotency?.methods.filter((m) => methods.includes(m)))
  const out = new Map<string, { method: string; code: string; outcome: string }>()
  const add = (method: string, ...names: ProblemName[]) => {
    for (const name of names) {
      const { status, outcome } = PROBLEMS[name]
      out.set(`${method} ${status} ${outcome}`, { method, code: String(status), outcome })
    }
  }
  for (const method of methods) {
    add(method, 'upstream-unavailable', 'upstream-timeout')
    if (r.fencing) {
      add(method, 'fencing-token-required', 'fencing-token-malformed', 'fencing-resource-missing', 'stale-fencing-token', 'store-unavailable', 'store-state-lost')
      if (r.fencing.serialize) add(method, 'serialize-timeout')
    }
    if (keyed.has(method)) {
      add(method, 'idempotency-key-required', 'idempotency-key-malformed', 'idempotency-key-reused', 'request-in-flight', 'outcome-unknown', 'response-not-stored', 'store-unavailable', 'store-state-lost')
    }
  }
  return [...out.values()]
}

/**
 * `h.zero(labels)` unless the labelset already has observations: prom-client's zero() replaces
 * them (store calls are timed before the routes are set up, a config reload sets routes up again).
 */
export function zeroOnce<T extends string>(h: Histogram<T>, labels: LabelValues<T>): void {
  const present = Object.values((h as unknown as { hashMap: Record<string, { labels: LabelValues<T> }> }).hashMap)
  const keys = Object.keys(labels) as T[]
  if (present.some((v) => keys.every((k) => String(v.labels[k]) === String(labels[k])) && Object.keys(v.labels).length === keys.length)) return
  h.zero(labels)
}

