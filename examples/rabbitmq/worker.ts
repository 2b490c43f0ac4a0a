/**
 * A payment worker on a RabbitMQ quorum queue (amqplib): prefetch 1, charges through fencegate
 * (examples/charge.ts) and acks.
 *
 *   lease            there is no renewal: the delivery is the worker's while its channel lives
 *                    and it acks within consumer_timeout (node-wide; per consumer
 *                    x-consumer-timeout from 3.12). A frozen worker loses its connection after
 *                    two missed heartbeats (--heartbeat), and its deliveries go back to the queue.
 *   Fencing-Token    rabbitmqGeneration(headers) (fencegate/client): x-delivery-count + 1 (absent
 *                    on the first delivery, so 1 then), or x-acquired-count + 1 where the broker
 *                    sends it (4.3+). The token fences the JOB (resource job:{header.X-Job-Id}),
 *                    so it comes from the broker: a quorum queue counts each message's deliveries.
 *   Idempotency-Key  job-<id>, the same on every delivery
 *
 * What it does with the answer is fencegate/client's decision (docs/requests.md, "What a client
 * should do"): done (201, a replay, 409 response-not-stored) → ack. stop (412) → nothing: a
 * later delivery has written, so this one's channel is already gone. retry-after and backoff are
 * waited out with the same token and key; past their bound → nack with requeue. surface (409
 * outcome-unknown, a stored 5xx) and dead-letter (422, 400, 428) → nack without requeue (to the
 * queue's dead-letter exchange, when it has one), the key hash printed for `fencegate resolve`.
 *
 * Options (flags; AMQP_URL for --amqp, default amqp://guest:guest@127.0.0.1:5672):
 *   --queue NAME --gateway URL    (required)
 *   --name NAME                   worker name (default worker-<pid>)
 *   --jobs N                      handle N deliveries, then exit (default: until SIGTERM)
 *   --heartbeat S                 AMQP heartbeat, seconds (default 1)
 *   --consumer-timeout MS         x-consumer-timeout on basic.consume (only where the broker has it)
 *   --pause-before-ack MS         wait between the charge and the ack (the timeline freezes here)
 *   --charge-again                after that pause, send the charge once more with the same token
 *   --close-before-ack            a lost ack: close the channel after the charge, before basic.ack
 *
 * Output: one JSON line per event on stdout (ready, claimed, charge, pausing, resumed, acked,
 * ack-failed, channel-closed-before-ack, abandoned, nack, dead-letter, connection-closed, error).
 */
import { parseArgs } from 'node:util'
import amqp, { type ConsumeMessage, type MessagePropertyHeaders } from 'amqplib'
import { rabbitmqGeneration } from '../../src/client/index.js'
import { chargeUntilSettled, deadLetterFields, type ChargeJob } from '../charge.js'
import { sleep } from '../relay/http.js'
import { isMain } from '../is-main.js'

/**
 * The claim generation of a quorum-queue delivery: 1 + x-acquired-count when the broker sends it
 * (4.3 and later count every delivery there, and x-delivery-count only failed ones), else
 * 1 + x-delivery-count (absent on a first delivery). Grows with every redelivery of the message.
 */
export function deliveryToken(headers: MessagePropertyHeaders | undefined): number {
  return rabbitmqGeneration(headers)
}

/** Whether the broker takes x-consumer-timeout per consumer: RabbitMQ 3.12 and later. */
export function hasConsumerTimeout(version: string | undefined): boolean {
  const [major, minor] = (version ?? '').split('.').map(Number)
  return major > 3 || (major === 3 && minor >= 12)
}

let name = `worker-${process.pid}`
const emit = (event: string, fields: Record<string, unknown> = {}) =>
  process.stdout.write(`${JSON.stringify({ time: Date.now(), worker: name, pid: process.pid, event, ...fields })}\n`)

async function main(): Promise<number> {
  const { values: o } = parseArgs({ options: {
    amqp: { type: 'string' }, queue: { type: 'string' }, gateway: { type: 'string' }, name: { type: 'string' },
    jobs: { type: 'string' }, heartbeat: { type: 'string' }, 'consumer-timeout': { type: 'string' },
    'pause-before-ack': { type: 'string' }, 'charge-again': { type: 'boolean' }, 'close-before-ack': { type: 'boolean' },
  } })
  name = o.name ?? name
  if (!o.queue || !o.gateway) throw new Error('--queue and --gateway are required')
  const gateway = o.gateway.replace(/\/+$/, '')
  const jobs = o.jobs ? Number(o.jobs) : Infinity
  const pauseBeforeAck = Number(o['pause-before-ack'] ?? 0)
  const url = new URL(o.amqp ?? process.env.AMQP_URL ?? 'amqp://guest:guest@127.0.0.1:5672')
  url.searchParams.set('heartbeat', o.heartbeat ?? '1')
  const conn = await amqp.connect(url.toString())
  let closed = false
  conn.on('error', (e: Error) => emit('connection-closed', { error: e.message }))
  conn.on('close', () => { closed = true })
  const version = conn.connection.serverProperties.version
  const ch = await conn.createChannel()
  ch.on('error', (e: Error) => emit('channel-error', { error: e.message }))
  await ch.prefetch(1)

  let handled = 0
  let busy: Promise<void> = Promise.resolve()
  const done = new Promise<void>((resolve) => {
    process.once('SIGTERM', () => resolve())
    const handle = async (m: ConsumeMessage) => {
      const job = JSON.parse(m.content.toString('utf8')) as ChargeJob
      const token = deliveryToken(m.properties.headers)
      const fields = { job: job.id, token, deliveryTag: m.fields.deliveryTag }
      emit('claimed', { ...fields, redelivered: m.fields.redelivered, headers: m.properties.headers })
      let r = await chargeUntilSettled(gateway, job, token, (reply) => emit('charge', { ...reply }))
      if (o['close-before-ack']) {
        await ch.close().catch(() => {})
        emit('channel-closed-before-ack', fields)
      } else {
        if (pauseBeforeAck > 0) {
          emit('pausing', { ...fields, ms: pauseBeforeAck })
          const t0 = Date.now()
          await sleep(pauseBeforeAck)
          emit('resumed', { ...fields, pausedMs: Date.now() - t0 })
          if (o['charge-again']) r = await chargeUntilSettled(gateway, job, token, (reply) => emit('charge', { ...reply, again: true }))
        }
        try {
          const action = r.decision.action
          if (action === 'done') { ch.ack(m); emit('acked', { ...fields, connectionClosed: closed }) }
          else if (action === 'stop') emit('abandoned', { ...fields, highestToken: r.body?.highestToken, decision: r.decision, connectionClosed: closed })
          else if (action === 'surface' || action === 'dead-letter') { ch.nack(m, false, false); emit('dead-letter', { ...fields, ...deadLetterFields(job, r) }) }
          else { ch.nack(m, false, true); emit('nack', { ...fields, status: r.status, decision: r.decision }) }
        } catch (e) {
          emit('ack-failed', { ...fields, error: (e as Error).message })
        }
      }
      if (++handled >= jobs) resolve()
    }
    const consumeArgs = o['consumer-timeout'] && hasConsumerTimeout(version) ? { 'x-consumer-timeout': Number(o['consumer-timeout']) } : undefined
    ch.consume(o.queue!, (m) => { if (m) busy = busy.then(() => handle(m)).catch((e) => { emit('error', { error: (e as Error).message }) }) }, { noAck: false, arguments: consumeArgs })
      .then(() => emit('ready', { rabbitmq: version, consumerArguments: consumeArgs ?? {} }), (e) => { emit('error', { error: (e as Error).message }); resolve() })
  })
  await done
  await busy
  // the channel first: its close follows its acks on the wire; a connection close can overtake them
  if (!closed) { await ch.close().catch(() => {}); await conn.close().catch(() => {}) }
  return 0
}

if (isMain(import.meta.url)) {
  process.exitCode = await main().catch((e) => { emit('error', { error: (e as Error).message }); return 1 })
}
