/**
 * `fencegate/client`: the worker's side of fencegate. Tokens from the gateway's lease service
 * (`withLease`, contract §3a) or from the broker's delivery (`jetstreamGeneration`, …), writes
 * with Fencing-Token and Idempotency-Key (`fencedFetch`, `send`), and one decision per answer
 * (`decide`, `DECISIONS`; docs/requests.md, "What a client should do").
 */
export { DECISIONS, PROBLEM_PREFIX, decide, isRetry, problemName, retryAfterMs, type Action, type Answer, type Decision, type Rule } from './decisions.js'
export { fencedFetch, keyHash, send, type FencedFetchOptions, type FetchLike, type SendOptions, type Sent } from './send.js'
export { LEASES_PATH, acquireLease, leaseUrl, readLease, releaseLease, renewLease, type LeaseAnswer, type LeaseBody, type LeaseService } from './lease-api.js'
export { LeaseLostError, LeaseUnavailableError, withLease, type Lease, type LeaseEvent, type WithLeaseOptions } from './with-lease.js'
export { bullmqGeneration, jetstreamGeneration, rabbitmqGeneration } from './brokers.js'
