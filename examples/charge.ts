/**
 * A payment job's charge through fencegate, as the broker examples' workers send it:
 *
 *   POST {gateway}/accounts/{account}/charges  {"amount", "currency"}
 *        Fencing-Token: <the delivery's claim generation>
 *        Idempotency-Key: job-<id>     one key per job, the same on every delivery
 *        X-Job-Id: <id>                the fenced resource: job:{header.X-Job-Id}
 *
 * The job, not the account, is the fenced resource: a broker's delivery count orders the
 * deliveries of one message, not two jobs writing one account (docs/exactly-once.md, "Where the
 * generation comes from"). Every request opens its own connection: a worker frozen with SIGSTOP
 * must not wake up holding a pooled socket the server closed while it slept.
 */
import { call, sleep } from './relay/http.js'

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

/** One charge request; `attempt` only labels it. Rejects on a socket error. */
export async function charge(gateway: string, job: ChargeJob, token: number, attempt: number): Promise<ChargeReply> {
  const sentAt = Date.now()
  const r = await call('POST', `${gateway}/accounts/${encodeURIComponent(job.account)}/charges`, { amount: job.amount, currency: job.currency }, {
    'fencing-token': String(token),
    'idempotency-key': `job-${job.id}`,
    'x-job-id': job.id,
  })
  return { job: job.id, token, attempt, status: r.status, replayed: r.headers['idempotent-replayed'] === 'true', body: r.json ?? r.text, sentAt, doneAt: Date.now() }
}

/**
 * Charges, and asks again while the gateway answers 409 request-in-flight (an earlier delivery's
 * request is still at the upstream) after a short wait that grows to 1 s (Retry-After is whole
 * seconds, and such requests are short), at most `tries` times in all.
 * `onReply` sees every answer.
 */
export async function chargeUntilSettled(gateway: string, job: ChargeJob, token: number, onReply: (r: ChargeReply) => void, tries = 20): Promise<ChargeReply> {
  for (let attempt = 1; ; attempt++) {
    const r = await charge(gateway, job, token, attempt)
    onReply(r)
    if (r.status !== 409 || r.body?.type !== 'urn:fencegate:problem:request-in-flight' || attempt >= tries) return r
    await sleep(Math.min(1000, 100 * attempt))
  }
}
