/**
 * A payment job's charge through fencegate, as the broker examples' workers send it:
 *
 *   POST {gateway}/accounts/{account}/charges  {"amount", "currency"}
 *        Fencing-Token: <the delivery's claim generation>
 *        Idempotency-Key: job-<id>     one key per job, the same on every delivery
 *        X-Job-Id: <id>                the fenced resource: job:{header.X-Job-Id}
 *
 * Written on fencegate/client: `fencedFetch` adds the token and key, `send` asks again while the
 * answer says so, and its decision table (docs/requests.md, "What a client should do") says what
 * the worker does with the last answer.
 *
 * The job, not the account, is the fenced resource, and its token comes from the BROKER: a
 * delivery count orders the deliveries of one message, not two jobs writing one account
 * (docs/exactly-once.md, "Where the generation comes from"). A worker that fences the account
 * takes its token from the gateway's lease service instead (examples/relay).
 */
import { Agent, fetch as undiciFetch } from 'undici'
import { fencedFetch, keyHash, send, type Decision, type FetchLike } from '../src/client/index.js'

/**
 * fetch on a fresh connection per request: a worker frozen with SIGSTOP must not wake up holding
 * a pooled socket the server closed while it slept.
 */
const fresh = new Agent({ pipelining: 0, keepAliveTimeout: 1 })
export const freshFetch: FetchLike = (input, init) =>
  undiciFetch(input, { ...(init as object), dispatcher: fresh }) as unknown as Promise<Response>

export interface ChargeJob {
  id: string
  account: string
  /** minor units */
  amount: number
  currency: string
}

export interface ChargeReply {
  job: string
  /** the Fencing-Token sent */
  token: number
  /** 1 for the first request of this delivery, 2 for the next, ... */
  attempt: number
  status: number
  replayed: boolean
  body: any
  /** what the client decided (fencegate/client's table): action and case */
  decision: Pick<Decision, 'action' | 'case'> & { retryAfterMs?: number }
  /** epoch ms: the request was sent, its answer came */
  sentAt: number
  doneAt: number
}

/** The gateway config of the broker examples: SQLite store in `dir`, the payments routes fenced per job. */
export function brokerGatewayConfig(dir: string, paymentsUrl: string, routes: (url: string, resource: string) => string): string {
  return `listen: 127.0.0.1:0
admin:
  listen: 127.0.0.1:0
store:
  kind: sqlite
  path: ${dir}/fencegate.db
shutdown:
  grace: 2s
${routes(paymentsUrl, 'job:{header.X-Job-Id}')}`
}

/** The job's Idempotency-Key: one per job, the same on every delivery. */
export const jobKey = (job: Pick<ChargeJob, 'id'>) => `job-${job.id}`

/**
 * Sends the job's charge with the delivery's token through fencegate/client's `send`: asked
 * again with the same key and token while the decision is retry-after (409 request-in-flight,
 * after Retry-After) or backoff (503, 502, 504, no answer), at most `tries` requests and 10 s
 * of waiting. `onReply` sees every answer with its decision; the last one is returned.
 */
export async function chargeUntilSettled(gateway: string, job: ChargeJob, token: number, onReply: (r: ChargeReply) => void, tries = 20): Promise<ChargeReply> {
  let sentAt = 0
  const timed: FetchLike = (input, init) => { sentAt = Date.now(); return freshFetch(input, init) }
  let attempt = 0
  let last: ChargeReply | undefined
  await send(fencedFetch({ gateway, token, key: jobKey(job), fetch: timed }), `/accounts/${encodeURIComponent(job.account)}/charges`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-job-id': job.id },
    body: JSON.stringify({ amount: job.amount, currency: job.currency }),
  }, {
    maxAttempts: tries,
    maxWaitMs: 10_000,
    onAnswer: (d, a) => {
      last = { job: job.id, token, attempt: ++attempt, status: a.status, replayed: a.replayed, body: a.body, decision: { action: d.action, case: d.case, ...(d.retryAfterMs !== undefined && { retryAfterMs: d.retryAfterMs }) }, sentAt, doneAt: Date.now() }
      onReply(last)
    },
  })
  return last!
}

/** What a dead-lettered job carries for an operator: the decision and the key hash (`fencegate resolve --key-hash`). */
export const deadLetterFields = (job: ChargeJob, r: ChargeReply) => ({ job: job.id, decision: r.decision, status: r.status, problem: r.body?.type, keyHash: keyHash(jobKey(job)) })
