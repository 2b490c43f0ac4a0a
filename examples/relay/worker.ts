/**
 * The relay example's worker: claims a job from the queue (examples/relay/queue.ts), performs its
 * charge on the sample payments service THROUGH fencegate, and acks it; on fencegate/client.
 *
 *   POST {gateway}/accounts/{account}/charges  {"amount", "currency"}
 *        Fencing-Token: <the lease's token>   Idempotency-Key: <job id>
 *
 * Two leases, two jobs. The queue's claim (its generation) says which worker holds the JOB, and
 * only the current one's ack counts. The Fencing-Token comes from the gateway's lease service:
 * the route fences the ACCOUNT (account:{param.account}), a resource many jobs share, so the
 * token must be a generation of the account — `withLease('account:<id>', …)`, which renews the
 * lease while the charge runs and releases it after. A queue's claim generation would not do:
 * it orders the claims of one job, not two jobs writing one account.
 *
 * What it does with the answer is fencegate/client's decision (docs/requests.md, "What a client
 * should do"): done → ack; stop (412: a newer lease holder has written, or the lease was lost
 * and the request aborted) → no ack, the job goes back to the queue when its claim runs out and
 * runs again under a newer lease, same key; retry-after / backoff past the client's bound → no
 * ack either; surface and dead-letter → the queue's dead-letter, with the key hash.
 *
 * It does not look at its lease before writing: no check made before a write protects against a
 * pause right after it (docs/exactly-once.md §3); the gateway checks the token at the door.
 *
 * Options (flag, or environment variable):
 *   --queue URL               RELAY_QUEUE_URL      the queue
 *   --gateway URL             RELAY_GATEWAY_URL    fencegate (its lease service too)
 *   --name NAME               RELAY_WORKER         worker name, the lease's holder (default: worker-<pid>)
 *   --lease-ms MS             RELAY_LEASE_MS       queue claim and fencegate lease (default 30000; at least 1000)
 *   --renew-ms MS             RELAY_RENEW_MS       queue claim renewal period (default lease / 3)
 *   --pause-before-ack MS     RELAY_PAUSE_BEFORE_ACK_MS   wait this long between the charge and
 *                                                   the ack, still under the lease (a slow step;
 *                                                   default 0). The relay run freezes the worker
 *                                                   with SIGSTOP here.
 *   --charge-again            RELAY_CHARGE_AGAIN=1 after the pause, send the charge once more
 *                                                   with the same key and token before acking, as
 *                                                   a worker does that re-runs its step after a
 *                                                   hiccup (the seed timeline's retry)
 *   --jobs N                  RELAY_JOBS           handle N jobs, then exit (default 1)
 *   --claim-timeout MS        RELAY_CLAIM_TIMEOUT_MS  give up when nothing is claimable (default 10000)
 *
 * Output: one JSON line per event on stdout (claimed, renewed, lease-lost, lease, charge,
 * pausing, resumed, acked, ack-refused, abandoned, dead-letter, error). Exit codes: 0 every job
 * acked; 3 a job was left to the queue (stop, a retry bound, or an ack refused); 4 nothing to
 * claim; 1 an error.
 */
import { parseArgs } from 'node:util'
import { call, sleep } from './http.js'
import { isMain } from '../is-main.js'
import { keyHash, withLease, type Sent } from '../../src/client/index.js'
import { freshFetch } from '../charge.js'

export interface ChargePayload { account: string; amount: number; currency: string }

function options() {
  const { values } = parseArgs({ options: {
    queue: { type: 'string' }, gateway: { type: 'string' }, name: { type: 'string' },
    'lease-ms': { type: 'string' }, 'renew-ms': { type: 'string' }, 'pause-before-ack': { type: 'string' },
    'charge-again': { type: 'boolean' }, 'claim-timeout': { type: 'string' }, jobs: { type: 'string' },
  } })
  const env = process.env
  const num = (v: string | undefined, d: number, what: string) => {
    if (v === undefined || v === '') return d
    const n = Number(v)
    if (!Number.isSafeInteger(n) || n < 0) throw new Error(`${what} must be a whole number of ms, not ${JSON.stringify(v)}`)
    return n
  }
  const queue = values.queue ?? env.RELAY_QUEUE_URL
  const gateway = values.gateway ?? env.RELAY_GATEWAY_URL
  if (!queue || !gateway) throw new Error('--queue URL and --gateway URL (or RELAY_QUEUE_URL, RELAY_GATEWAY_URL) are required')
  const leaseMs = Math.max(1000, num(values['lease-ms'] ?? env.RELAY_LEASE_MS, 30_000, '--lease-ms') || 30_000)
  return {
    queue: queue.replace(/\/+$/, ''),
    gateway: gateway.replace(/\/+$/, ''),
    name: values.name ?? env.RELAY_WORKER ?? `worker-${process.pid}`,
    leaseMs,
    renewMs: num(values['renew-ms'] ?? env.RELAY_RENEW_MS, Math.max(1, Math.floor(leaseMs / 3)), '--renew-ms') || Math.max(1, Math.floor(leaseMs / 3)),
    pauseBeforeAckMs: num(values['pause-before-ack'] ?? env.RELAY_PAUSE_BEFORE_ACK_MS, 0, '--pause-before-ack'),
    chargeAgain: values['charge-again'] ?? env.RELAY_CHARGE_AGAIN === '1',
    claimTimeoutMs: num(values['claim-timeout'] ?? env.RELAY_CLAIM_TIMEOUT_MS, 10_000, '--claim-timeout'),
    jobs: num(values.jobs ?? env.RELAY_JOBS, 1, '--jobs') || 1,
  }
}

async function main(): Promise<number> {
  let o: ReturnType<typeof options>
  try {
    o = options()
  } catch (e) {
    process.stderr.write(`worker: ${(e as Error).message}\n`)
    return 2
  }
  const emit = (event: string, fields: Record<string, unknown> = {}) =>
    process.stdout.write(`${JSON.stringify({ time: new Date().toISOString(), worker: o.name, pid: process.pid, event, ...fields })}\n`)

  let exit = 0
  for (let n = 0; n < o.jobs; n++) {
    const code = await oneJob(o, emit)
    if (code === 4) return n === 0 ? 4 : exit
    if (code !== 0) exit = code
  }
  return exit
}

type Emit = (event: string, fields?: Record<string, unknown>) => void

/** Claims one job, charges under the account's lease, and acks it (or not) by the decision. */
async function oneJob(o: ReturnType<typeof options>, emit: Emit): Promise<number> {
  // 1. claim (poll until a job is claimable)
  const deadline = Date.now() + o.claimTimeoutMs
  let claim: { job: { id: string; payload: ChargePayload }; generation: number; leaseMs: number; previous?: unknown }
  for (;;) {
    const r = await call('POST', `${o.queue}/claim`, { worker: o.name, leaseMs: o.leaseMs })
    if (r.status === 200) { claim = r.json; break }
    if (r.status !== 204) throw new Error(`claim: queue answered ${r.status} ${r.text}`)
    if (Date.now() > deadline) { emit('nothing-to-claim', { waitedMs: o.claimTimeoutMs }); return 4 }
    await sleep(100)
  }
  const { job, generation } = claim
  emit('claimed', { job: job.id, generation, leaseMs: claim.leaseMs, ...(claim.previous ? { previous: claim.previous } : {}) })

  // 2. renew the queue's claim while working
  let leaseLost = false
  let renewing = false
  const renew = setInterval(() => {
    if (renewing || leaseLost) return
    renewing = true
    call('POST', `${o.queue}/jobs/${encodeURIComponent(job.id)}/renew`, { worker: o.name, generation, leaseMs: o.leaseMs })
      .then((r) => {
        if (r.status === 200) emit('renewed', { job: job.id, generation })
        else { leaseLost = true; emit('lease-lost', { job: job.id, generation, status: r.status, answer: r.json ?? r.text }) }
      }, (e) => emit('renew-failed', { job: job.id, generation, error: (e as Error).message }))
      .finally(() => { renewing = false })
  }, o.renewMs)

  try {
    // 3. the effect, through the gateway, under the account's lease
    const p = job.payload
    const path = `/accounts/${encodeURIComponent(p.account)}/charges`
    let last: Sent | undefined
    try {
      last = await withLease(`account:${p.account}`, async (lease) => {
        const charge = async (attempt: number) => {
          const sentAt = Date.now()
          const r = await lease.send(path, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ amount: p.amount, currency: p.currency }) }, { maxAttempts: 5, maxWaitMs: 10_000 })
          emit('charge', { job: job.id, generation, token: Number(lease.token), attempt, path, status: r.status, replayed: r.replayed, body: r.body, decision: { action: r.decision.action, case: r.decision.case }, sentAt, doneAt: Date.now() })
          return r
        }
        let r = await charge(1)
        // 4. optionally a slow step before the ack (where the relay run freezes the process)
        if (o.pauseBeforeAckMs > 0) {
          emit('pausing', { job: job.id, generation, token: Number(lease.token), ms: o.pauseBeforeAckMs })
          const t0 = Date.now()
          await sleep(o.pauseBeforeAckMs)
          const pausedMs = Date.now() - t0
          emit('resumed', { job: job.id, generation, pausedMs, lateByMs: pausedMs - o.pauseBeforeAckMs })
          if (o.chargeAgain) r = await charge(2)
        }
        return r
      }, {
        gateway: o.gateway, key: job.id, holder: o.name, ttl: o.leaseMs, waitMs: 20_000, fetch: freshFetch,
        onEvent: ({ event: type, decision, ...rest }) => emit('lease', { job: job.id, generation, type, ...rest, decision: decision && { action: decision.action, case: decision.case, status: decision.status } }),
      })
    } catch (e) {
      emit('abandoned', { job: job.id, generation, error: (e as Error).message })
      return 3
    }

    // 5. by the decision: ack, leave it to the queue, or dead-letter it
    const action = last.decision.action
    if (action === 'surface' || action === 'dead-letter') {
      const d = await call('POST', `${o.queue}/jobs/${encodeURIComponent(job.id)}/dead-letter`, { worker: o.name, generation, reason: last.decision.case, keyHash: keyHash(job.id) })
      emit('dead-letter', { job: job.id, generation, decision: last.decision, keyHash: keyHash(job.id), status: d.status })
      return 3
    }
    if (action !== 'done') {
      emit('abandoned', { job: job.id, generation, decision: { action, case: last.decision.case }, highestToken: (last.body as { highestToken?: string })?.highestToken })
      return 3
    }
    const a = await call('POST', `${o.queue}/jobs/${encodeURIComponent(job.id)}/ack`, { worker: o.name, generation })
    if (a.status === 200) { emit('acked', { job: job.id, generation }); return 0 }
    emit('ack-refused', { job: job.id, generation, status: a.status, answer: a.json ?? a.text })
    return 3
  } finally {
    clearInterval(renew)
  }
}

if (isMain(import.meta.url)) {
  process.exitCode = await main().catch((e) => {
    process.stdout.write(`${JSON.stringify({ time: new Date().toISOString(), pid: process.pid, event: 'error', error: (e as Error).message })}\n`)
    return 1
  })
}
