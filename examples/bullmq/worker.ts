/**
 * A BullMQ worker that charges the sample payments service THROUGH fencegate, on
 * fencegate/client (`fencedFetch`, `send`, and its decision table).
 *
 *   Fencing-Token:   bullmqGeneration(job): job.attemptsStarted, the job's claim generation.
 *                    The route fences the JOB, so the token comes from the broker (BullMQ's
 *                    lock is the lease); fencing an account would take a lease from the gateway
 *   Idempotency-Key: job.id                one key per job, reused on every attempt
 *
 * The processor's answer per decision (docs/requests.md, "What a client should do"): done →
 * return (the job completes); stop (412) → StaleClaimError (a later claim of the job has
 * written; BullMQ refuses this worker's moveToFailed since it no longer holds the lock);
 * retry-after / backoff past the client's bound → a plain Error, so BullMQ retries per the job's
 * `attempts`, with a higher attemptsStarted and the same key; surface (409 outcome-unknown, a
 * stored 5xx) and dead-letter (422, 400, 428) → UnrecoverableError: failed at once, no retry,
 * with the key hash for `fencegate resolve --key-hash`.
 *
 * What `job.attemptsStarted` counts (BullMQ 6, checked against its Lua scripts): the job hash's
 * `ats` field, which `prepareJobForProcessing` (run by moveToActive, and by moveToFinished when a
 * worker fetches its next job) increments with HINCRBY in the same script that sets the job's
 * lock, before the job is handed to a worker. The processor sees the value after the increment:
 * 1 on the first start, 2 on the next, and so on. It grows on EVERY move to active — a first
 * start, a retry after a failure (`attempts`/backoff), a stalled job moved back to wait by the
 * stalled checker (lock expired) and picked up again, a job moved back by a rate limit or a
 * DelayedError — so each holder of the job's lock sees a higher number than every earlier holder.
 * That is what a fencing token needs. It does NOT grow on lock renewals, and it is per job, not
 * per queue or per account: so the gateway route fences the JOB (resource
 * `bullmq-job:{header.Idempotency-Key}`), not the account. Two things break the monotony and so
 * get a job's writes refused (412) after them: `job.retry(state, { resetAttemptsStarted: true })`
 * (reprocessJob deletes `ats`), and removing a job and adding a new one under the same custom
 * jobId. `attemptsMade` is not a claim generation (it counts finished attempts: a stalled start
 * does not increment it), and `stalledCounter` counts only stalls.
 *
 * `job.id` as the key: BullMQ's automatic ids ("1", "2", ...) are unique only within a queue, so
 * give jobs custom ids that are unique across everything that writes through the route (here
 * `charge-<uuid>`), or scope the route's keys (`idempotency.scope`).
 */
import { UnrecoverableError, Worker, type ConnectionOptions, type Job } from 'bullmq'
import { bullmqGeneration, fencedFetch, keyHash, send, type Decision } from '../../src/client/index.js'
import { freshFetch } from '../charge.js'

export interface ChargeJobData {
  account: string
  /** minor units */
  amount: number
  currency: string
}

export interface ChargeReply {
  jobId: string
  /** the Fencing-Token sent: job.attemptsStarted */
  token: number
  status: number
  replayed: boolean
  body: unknown
  /** fencegate/client's decision on the answer */
  decision: Pick<Decision, 'action' | 'case'>
}

/** The gateway refused the write because a later claim of the job has written: this worker lost the job. */
export class StaleClaimError extends Error {
  constructor(readonly reply: ChargeReply) {
    super(`job ${reply.jobId}: claim ${reply.token} is stale, a later claim of the job has written (412)`)
    this.name = 'StaleClaimError'
  }
}

/** POSTs the job's charge to `gateway` with the job's claim generation and id; asks again while the decision says so. */
export async function chargeThroughGateway(gateway: string, job: Pick<Job<ChargeJobData>, 'id' | 'attemptsStarted' | 'data'>): Promise<ChargeReply> {
  if (!job.id) throw new Error('the job has no id')
  const { account, amount, currency } = job.data
  const token = bullmqGeneration(job)
  const f = fencedFetch({ gateway, token, key: job.id, fetch: freshFetch })
  const r = await send(f, `/accounts/${encodeURIComponent(account)}/charges`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ amount, currency }),
  }, { maxAttempts: 5, maxWaitMs: 10_000 })
  return { jobId: job.id, token, status: r.status, replayed: r.replayed, body: r.body, decision: { action: r.decision.action, case: r.decision.case } }
}

export interface ChargeWorkerOptions {
  /** fencegate's proxy URL, e.g. http://127.0.0.1:8080 */
  gateway: string
  queue: string
  connection: ConnectionOptions
  /** BullMQ key prefix (default "bull") */
  prefix?: string
  /** BullMQ worker name (stored on the job as processedBy) */
  name?: string
  lockDuration?: number
  stalledInterval?: number
  maxStalledCount?: number
  /** runs after the job is claimed and before the charge is sent (where a pause hurts most) */
  beforeCharge?: (job: Job<ChargeJobData>) => void | Promise<void>
  /** every reply from the gateway, whatever its status */
  onReply?: (reply: ChargeReply, job: Job<ChargeJobData>) => void
}

/** A worker whose processor sends the charge and ends the job by the client's decision (see the top). */
export function createChargeWorker(o: ChargeWorkerOptions): Worker<ChargeJobData, ChargeReply> {
  return new Worker<ChargeJobData, ChargeReply>(o.queue, async (job) => {
    await o.beforeCharge?.(job)
    const reply = await chargeThroughGateway(o.gateway, job)
    o.onReply?.(reply, job)
    const action = reply.decision.action
    if (action === 'done') return reply
    if (action === 'stop') throw new StaleClaimError(reply)
    if (action === 'surface' || action === 'dead-letter') throw new UnrecoverableError(`job ${reply.jobId}: ${reply.decision.case} (${reply.status}), ${action}; key hash ${keyHash(reply.jobId)}`)
    throw new Error(`job ${reply.jobId}: the gateway answered ${reply.status} (${reply.decision.case}), asked again later: ${JSON.stringify(reply.body)}`)
  }, {
    connection: o.connection,
    // BullMQ merges its defaults with Object.assign: an explicit undefined would override them
    ...(o.prefix !== undefined && { prefix: o.prefix }),
    ...(o.name !== undefined && { name: o.name }),
    ...(o.lockDuration !== undefined && { lockDuration: o.lockDuration }),
    ...(o.stalledInterval !== undefined && { stalledInterval: o.stalledInterval }),
    ...(o.maxStalledCount !== undefined && { maxStalledCount: o.maxStalledCount }),
  })
}
