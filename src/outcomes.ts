/**
 * The words of contract §6 that the request path, the stores and the attempt log all speak:
 * what became of a request (`outcome`), what the idempotency check found (`result`), and why an
 * outcome is unknown (`reason`). Plain types, so store/ and audit/ can share them without
 * importing each other or the HTTP layer.
 */

/** The request outcomes of contract §6, the `outcome` metric label. */
export type Outcome =
  | 'forwarded' | 'replayed' | 'stale' | 'token_missing' | 'token_malformed' | 'key_missing'
  | 'key_malformed' | 'key_reused' | 'in_flight' | 'outcome_unknown' | 'upstream_error'
  | 'store_error' | 'no_route' | 'bad_request' | 'serialize_timeout' | 'gateway_error'

/** The idempotency result of contract §6 (`result` label), set on every path that has one. */
export type IdempotencyResult = 'stored' | 'replayed' | 'in_flight' | 'key_reused' | 'released' | 'not_stored'

/** Why an outcome is unknown (contract §6 `reason`). */
export type UnknownReason = 'timeout' | 'reset' | 'client_abort' | 'crash'
