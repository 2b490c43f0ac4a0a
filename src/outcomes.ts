/**
 * The words of contract §6 that the request path, the stores and the attempt log all speak:
 * what became of a request (`outcome`), what the idempotency check found (`result`), why an
 * outcome is unknown and why fencing refused (`reason`). Each value set is one `const` tuple and
 * its type is derived from it, so the metric label lists (src/telemetry/metrics.ts) are these
 * tuples. Plain values, so store/ and audit/ can share them without importing each other or the
 * HTTP layer.
 */

/** The request outcomes of contract §6, the `outcome` metric label. */
export const OUTCOMES = [
  'forwarded', 'replayed', 'stale', 'token_missing', 'token_malformed', 'key_missing',
  'key_malformed', 'key_reused', 'in_flight', 'outcome_unknown', 'upstream_error',
  'store_error', 'no_route', 'bad_request', 'serialize_timeout', 'gateway_error',
] as const
export type Outcome = typeof OUTCOMES[number]

/** The idempotency result of contract §6 (`result` label), set on every path that has one. */
export const IDEMPOTENCY_RESULTS = ['stored', 'replayed', 'in_flight', 'key_reused', 'released', 'not_stored'] as const
export type IdempotencyResult = typeof IDEMPOTENCY_RESULTS[number]

/** Why an outcome is unknown (contract §6 `reason` of `fencegate_unknown_outcomes_total`). */
export const UNKNOWN_REASONS = ['timeout', 'reset', 'client_abort', 'crash'] as const
export type UnknownReason = typeof UNKNOWN_REASONS[number]

/** Why fencing refused a request (contract §6 `reason` of `fencegate_fencing_rejections_total`). */
export const FENCING_REASONS = ['stale', 'missing', 'malformed'] as const
export type FencingReason = typeof FENCING_REASONS[number]

/** Which limit a full store reached (the `limit` label of `fencegate_store_full_total`). */
export const STORE_LIMITS = ['max_records', 'max_resources', 'max_attempts', 'disk'] as const
export type StoreLimit = typeof STORE_LIMITS[number]

/**
 * Why a Redis write was refused (503, fencegate_store_writes_refused_total): `replica_shortfall`,
 * fewer replicas than store.replicas acknowledged it; `failover_settling`, its slot's master just
 * took over from a replica and is not trusted yet (src/store/redis/cluster-history.ts).
 */
export const WRITE_REFUSAL_REASONS = ['replica_shortfall', 'failover_settling'] as const
export type WriteRefusalReason = typeof WRITE_REFUSAL_REASONS[number]
