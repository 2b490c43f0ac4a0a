/**
 * The relay example's worker: claims ONE job from the queue (examples/relay/queue.ts), performs
 * its charge on the sample payments service THROUGH fencegate, and acks it.
 *
 *   POST {gateway}/accounts/{account}/charges  {"amount", "currency"}
 *        Fencing-Token: <claim generation>   Idempotency-Key: <job id>
 *
 * While it works it renews its lease every `renewMs`. It does not look at its lease before
 * writing: no check made before a write protects against a pause right after it
 * (docs/exactly-once.md §3); the gateway checks the token at the door instead.
 *
 * Options (flag, or environment variable):
 *   --queue URL               RELAY_QUEUE_URL      the queue
 *   --gateway URL             RELAY_GATEWAY_URL    fencegate
 *   --name NAME               RELAY_WORKER         worker name (default: worker-<pid>)
 *   --lease-ms MS             RELAY_LEASE_MS       lease asked for on claim (default 30000)
 *   --renew-ms MS             RELAY_RENEW_MS       renewal period (default lease / 3)
 *   --pause-before-ack MS     RELAY_PAUSE_BEFORE_ACK_MS   wait this long between the charge and
 *                                                   the ack (a slow step; default 0). The relay
 *                                                   run freezes the worker with SIGSTOP here.
 *   --charge-again            RELAY_CHARGE_AGAIN=1 after the pause, send the charge once more
 *                                                   with the same key and token before acking, as
 *                                                   a worker does that re-runs its step after a
 *                                                   hiccup (the seed timeline's retry)
 *   --claim-timeout MS        RELAY_CLAIM_TIMEOUT_MS  give up when nothing is claimable (default 10000)
 *
 * Output: one JSON line per event on stdout (claimed, renewed, lease-lost, charge, pausing,
 * resumed, acked, ack-refused, error). Exit codes: 0 acked; 3 the ack was refused (the job was
 * taken over); 4 nothing to claim; 1 an error.
 */
import { parseArgs } from 'node:util'
import { call, sleep } from './http.js'
import { isMain } from '../is-main.js'

export interface ChargePayload { account: string; amount: number; currency: string }

function options() {
  const { values } = parseArgs({ options: {
    queue: { type: 'string' }, gateway: { type: 'string' }, name: { type: 'string' },
    'lease-ms': { type: 'string' }, 'renew-ms': { type: 'string' }, 'pause-before-ack': { type: 'string' },
    'charge-again': { type: 'boolean' }, 'claim-timeout': { type: 'string' },
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
  const leaseMs = num(values['lease-ms'] ?? env.RELAY_LEASE_MS, 30_000, '--lease-ms') || 30_000
  return {
    queue: queue.replace(/\/+$/, ''),
    gateway: gateway.replace(/\/+$/, ''),
    name: values.name ?? env.RELAY_WORKER ?? `worker-${process.pid}`,
    leaseMs,
    renewMs: num(values['renew-ms'] ?? env.RELAY_RENEW_MS, Math.max(1, Math.floor(leaseMs / 3)), '--renew-ms') || Math.max(1, Math.floor(leaseMs / 3)),
    pauseBeforeAckMs: num(values['pause-before-ack'] ?? env.RELAY_PAUSE_BEFORE_ACK_MS, 0, '--pause-before-ack'),
    chargeAgain: values['charge-again'] ?? env.RELAY_CHARGE_AGAIN === '1',
    claimTimeoutMs: num(values['claim-timeout'] ?? env.RELAY_CLAIM_TIMEOUT_MS, 10_000, '--claim-timeout'),
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

  // 2. renew the lease while working
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
    // 3. the effect, through the gateway
    const p = job.payload
    const charge = async (attempt: number) => {
      const path = `/accounts/${encodeURIComponent(p.account)}/charges`
      const headers = { 'fencing-token': String(generation), 'idempotency-key': job.id }
      const r = await call('POST', `${o.gateway}${path}`, { amount: p.amount, currency: p.currency }, headers)
      emit('charge', { job: job.id, generation, attempt, path, status: r.status, replayed: r.headers['idempotent-replayed'] === 'true', contentType: r.headers['content-type'], body: r.json ?? r.text })
      return r
    }
    await charge(1)

    // 4. optionally a slow step before the ack (where the relay run freezes the process)
    if (o.pauseBeforeAckMs > 0) {
      emit('pausing', { job: job.id, generation, ms: o.pauseBeforeAckMs })
      const t0 = Date.now()
      await sleep(o.pauseBeforeAckMs)
      const pausedMs = Date.now() - t0
      emit('resumed', { job: job.id, generation, pausedMs, lateByMs: pausedMs - o.pauseBeforeAckMs })
      if (o.chargeAgain) await charge(2)
    }

    // 5. ack
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
