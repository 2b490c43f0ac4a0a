/**
 * A payment worker on a NATS JetStream pull consumer: takes one message at a time, charges
 * through fencegate (examples/charge.ts) and acks.
 *
 *   lease            the consumer's ack_wait; msg.working() resets it every --renew-ms
 *   Fencing-Token    jetstreamGeneration(msg) (fencegate/client): msg.info.deliveryCount, 1 on
 *                    the first delivery, one more on each redelivery, never less for the same
 *                    message (a claim generation). The token fences the JOB (resource
 *                    job:{header.X-Job-Id}), so it comes from the broker: no lease is needed
 *                    beyond the delivery's own ack_wait.
 *   Idempotency-Key  job-<id>, the same on every delivery
 *
 * What it does with the answer is fencegate/client's decision (docs/requests.md, "What a client
 * should do"): done (201, a replay, 409 response-not-stored) → ack. stop (412) → NO ack: a later
 * delivery of the message has written, and JetStream would take this old delivery's ack as the
 * message's (acks name the stream sequence, not the delivery). retry-after and backoff are
 * waited out with the same token and key; past their bound → nak with that delay, for a
 * redelivery. surface (409 outcome-unknown, a stored 5xx) and dead-letter (422, 400, 428) →
 * term: no redelivery, the key hash printed for `fencegate resolve --key-hash`.
 *
 * Options (flags; NATS_URL for --nats):
 *   --nats URL --stream NAME --consumer NAME --gateway URL   (all but --nats required)
 *   --name NAME            worker name (default worker-<pid>)
 *   --renew-ms MS          msg.working() period (default a third of the consumer's ack_wait)
 *   --jobs N               handle N messages, then exit (default: until SIGTERM)
 *   --pause-before-ack MS  wait this long between the charge and the ack (the timeline freezes
 *                          the process here with SIGSTOP)
 *   --charge-again         after that pause, send the charge once more with the same token
 *   --pause-chance P       faults: block the event loop (no working(), no acks) past ack_wait,
 *   --drop-ack-chance P    at a random point, with chance P; skip the ack with chance P
 *
 * Output: one JSON line per event on stdout (ready, claimed, charge, pausing, resumed, blocked,
 * acked, ack-dropped, abandoned, nak, dead-letter, error). Exit 0, or 1 on an error.
 */
import { parseArgs } from 'node:util'
import { connect } from '@nats-io/transport-node'
import { jetstream, type JsMsg } from '@nats-io/jetstream'
import { jetstreamGeneration } from '../../src/client/index.js'
import { chargeUntilSettled, deadLetterFields, type ChargeJob } from '../charge.js'
import { sleep } from '../relay/http.js'
import { isMain } from '../is-main.js'

const { values: o } = parseArgs({ options: {
  nats: { type: 'string' }, stream: { type: 'string' }, consumer: { type: 'string' }, gateway: { type: 'string' },
  name: { type: 'string' }, 'renew-ms': { type: 'string' }, jobs: { type: 'string' },
  'pause-before-ack': { type: 'string' }, 'charge-again': { type: 'boolean' },
  'pause-chance': { type: 'string' }, 'drop-ack-chance': { type: 'string' },
} })
const name = o.name ?? `worker-${process.pid}`
const emit = (event: string, fields: Record<string, unknown> = {}) =>
  process.stdout.write(`${JSON.stringify({ time: Date.now(), worker: name, pid: process.pid, event, ...fields })}\n`)

const nap = new Int32Array(new SharedArrayBuffer(4))
/** Blocks this thread for `ms`: no timers, no I/O, no working(), as a GC pause or a stuck call would. */
const blockEventLoop = (ms: number) => { const end = Date.now() + ms; while (Date.now() < end) Atomics.wait(nap, 0, 0, Math.min(50, end - Date.now())) }

async function main(): Promise<number> {
  if (!o.stream || !o.consumer || !o.gateway) throw new Error('--stream, --consumer and --gateway are required')
  const gateway = o.gateway.replace(/\/+$/, '')
  const jobs = o.jobs ? Number(o.jobs) : Infinity
  const pauseBeforeAck = Number(o['pause-before-ack'] ?? 0)
  const pauseChance = Number(o['pause-chance'] ?? 0)
  const dropAckChance = Number(o['drop-ack-chance'] ?? 0)

  const nc = await connect({ servers: o.nats ?? process.env.NATS_URL ?? '127.0.0.1:4222', name })
  const consumer = await jetstream(nc).consumers.get(o.stream, o.consumer)
  const ackWaitMs = (await consumer.info(true)).config.ack_wait! / 1e6
  const renewMs = Number(o['renew-ms'] ?? Math.max(1, Math.floor(ackWaitMs / 3)))
  let stopping = false
  process.once('SIGTERM', () => { stopping = true })
  emit('ready', { ackWaitMs, renewMs })

  const handle = async (m: JsMsg) => {
    const job = m.json<ChargeJob>()
    const token = jetstreamGeneration(m)
    const fields = { job: job.id, token, seq: m.seq }
    emit('claimed', { ...fields, redelivered: m.redelivered })
    const renew = setInterval(() => m.working(), renewMs)
    // where a random pause falls: before the charge (its write comes late) or before the ack (the ack is late)
    const pauseAt = Math.random() < pauseChance ? (Math.random() < 0.5 ? 'before-charge' : 'before-ack') : undefined
    const pause = (where: string) => {
      if (pauseAt !== where) return
      const ms = Math.round(ackWaitMs * (1.2 + Math.random()))
      blockEventLoop(ms)
      emit('blocked', { ...fields, where, ms })
    }
    try {
      pause('before-charge')
      let r = await chargeUntilSettled(gateway, job, token, (reply) => emit('charge', { ...reply }))
      if (pauseBeforeAck > 0) {
        emit('pausing', { ...fields, ms: pauseBeforeAck })
        const t0 = Date.now()
        await sleep(pauseBeforeAck)
        emit('resumed', { ...fields, pausedMs: Date.now() - t0 })
        if (o['charge-again']) r = await chargeUntilSettled(gateway, job, token, (reply) => emit('charge', { ...reply, again: true }))
      }
      pause('before-ack')
      const action = r.decision.action
      if (action === 'done') {
        if (Math.random() < dropAckChance) return emit('ack-dropped', fields)
        const confirmed = await m.ackAck({ timeout: 2000 }).catch(() => false)
        emit('acked', { ...fields, confirmed })
      } else if (action === 'stop') {
        emit('abandoned', { ...fields, highestToken: r.body?.highestToken, decision: r.decision })
      } else if (action === 'surface' || action === 'dead-letter') {
        m.term(`${r.decision.case}: ${r.status}`)
        emit('dead-letter', { ...fields, ...deadLetterFields(job, r) })
      } else {
        m.nak(r.decision.retryAfterMs)
        emit('nak', { ...fields, status: r.status, decision: r.decision })
      }
    } finally {
      clearInterval(renew)
    }
  }

  let handled = 0
  while (!stopping && handled < jobs) {
    // a long pull: each expiry is a moment where a message and the client's own timeout can cross
    const m = await consumer.next({ expires: 3000 })
    if (!m) continue
    await handle(m)
    handled++
  }
  await nc.drain()
  return 0
}

if (isMain(import.meta.url)) {
  process.exitCode = await main().catch((e) => { emit('error', { error: (e as Error).message }); return 1 })
}
