/**
 * examples/rabbitmq against the real RabbitMQ (AMQP_URL, default guest:guest on 127.0.0.1:5672).
 * Every run declares a quorum queue of its own and deletes it. Needs `npm run build` (the workers
 * are child processes run from dist/; npm test builds first).
 * - the seed's timeline (examples/rabbitmq/run.ts): A charges and is frozen before basic.ack; the
 *   broker closes its connection after missed heartbeats, redelivers to B with x-delivery-count 1
 *   (token 2), B's charge is replayed, A's late charge with token 1 is refused 412; one charge.
 * - a lost ack: A closes its channel after the charge and before basic.ack; the delivery comes
 *   back with x-delivery-count 1 and B's charge (token 2) is replayed.
 * - the token from the headers, and which brokers take a per-consumer timeout.
 */
import { randomBytes } from 'node:crypto'
import amqp, { type ChannelModel } from 'amqplib'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { declareQueue, publishJob, queueName, runRabbitMQ } from '../examples/rabbitmq/run.js'
import { deliveryToken, hasConsumerTimeout } from '../examples/rabbitmq/worker.js'
import { brokerGatewayConfig } from '../examples/charge.js'
import { paymentsRoutes } from '../examples/payments/routes.js'
import { startPayments } from '../examples/payments/server.js'
import { distPath, startChild, stopChildren } from '../examples/children.js'
import { startTestGateway } from './helpers/gateway.js'
import { send } from './helpers/http.js'

const AMQP_URL = process.env.AMQP_URL ?? 'amqp://guest:guest@127.0.0.1:5672'

let conn: ChannelModel
beforeAll(async () => { conn = await amqp.connect(AMQP_URL); conn.on('error', () => {}) })
afterAll(async () => { await stopChildren(); await conn?.close() })

/** Whether the queue exists: checkQueue closes its channel with 404 when it does not. */
const queueExists = async (queue: string) => {
  const ch = await conn.createChannel()
  ch.on('error', () => {})
  return ch.checkQueue(queue).then(() => { void ch.close(); return true }, () => false)
}

describe('examples/rabbitmq: the seed timeline on a quorum queue', () => {
  it('A charges and freezes before basic.ack, the broker hands the delivery to B (token 2, replayed), A\'s late charge is refused 412; one charge', async () => {
    const lines: string[] = []
    const r = await runRabbitMQ({ amqpUrl: AMQP_URL, out: { write: (s: string) => lines.push(s) } })
    const output = lines.join('')
    expect(r.failures, output).toEqual([])
    expect(r.ok).toBe(true)
    expect(r.tokens).toEqual({ a: 1, b: 2 })
    // fencegate/client's decisions: applied → done, replayed → done, stale → stop (no ack)
    expect(r.charges.a1).toMatchObject({ status: 201, replayed: false, token: 1, decision: { action: 'done', case: 'applied' } })
    expect(r.charges.b).toMatchObject({ status: 201, replayed: true, token: 2, decision: { action: 'done', case: 'replayed' } })
    expect(r.charges.b!.body).toEqual(r.charges.a1!.body)
    expect(r.charges.a2).toMatchObject({ status: 412, token: 1, decision: { action: 'stop', case: 'stale-fencing-token' }, body: { type: 'urn:fencegate:problem:stale-fencing-token', resource: 'job:9', token: '1', highestToken: '2' } })
    expect(r.broker).toMatchObject({ messages: 0, consumers: 0 })
    expect(r.ledger).toHaveLength(1)
    expect(r.ledger![0]).toMatchObject({ account: r.account, fencingToken: '1', idempotencyKey: 'job-9' })
    expect(r.timeline.entries.map((e: any) => `${e.token} ${e.outcome} ${e.status}`)).toEqual(['1 forwarded 201', '2 replayed 201', '1 stale 412'])
    const rabbit = r.leases.routes[0].advice.brokers.find((b: any) => b.broker === 'RabbitMQ')
    expect(rabbit.settings).toMatchObject({ consumer_timeout: 60_000, 'x-consumer-timeout': 60_000 })
    expect(output).toContain('{"x-delivery-count":1}')
    expect(output.trimEnd().split('\n').slice(-3).join('\n')).toMatch(/412 {2}stale {2}token 1 {2}refused (?:\d+ ms|[\d.]+ s) after token 2 took over[\s\S]*The timeline held on RabbitMQ/)
    expect(await queueExists(r.broker.queue as string)).toBe(false)
  }, 120_000)
})

describe('a lost ack on a quorum queue', () => {
  it('a channel closed before basic.ack sends the delivery back with x-delivery-count 1; the next worker\'s charge is replayed', async () => {
    const payments = await startPayments(0)
    const gw = await startTestGateway(brokerGatewayConfig('@DIR@', payments.url, paymentsRoutes))
    const run = randomBytes(4).toString('hex')
    const queue = queueName(run)
    try {
      await declareQueue(conn, queue)
      const job = { id: `lost-${run}`, account: `acct-${run}`, amount: 990, currency: 'eur' }
      await publishJob(conn, queue, job)
      const worker = (name: string, extra: string[] = []) => startChild(`worker ${name}`, distPath('examples/rabbitmq/worker.js'),
        ['--amqp', AMQP_URL, '--queue', queue, '--gateway', gw.url, '--name', name, '--jobs', '1', ...extra])
      const a = worker('A', ['--close-before-ack'])
      await a.event('channel-closed-before-ack', () => true, 20_000)
      expect(await a.exited).toBe(0)
      const b = worker('B')
      const bClaim = await b.event('claimed', () => true, 20_000)
      expect(bClaim).toMatchObject({ token: 2, redelivered: true, headers: { 'x-delivery-count': 1 } })
      await b.event('acked')
      expect(await b.exited).toBe(0)

      const [aCharge] = a.events.filter((e) => e.event === 'charge')
      const [bCharge] = b.events.filter((e) => e.event === 'charge')
      expect(aCharge).toMatchObject({ token: 1, status: 201, replayed: false, decision: { action: 'done', case: 'applied' } })
      expect(bCharge).toMatchObject({ token: 2, status: 201, replayed: true, body: aCharge.body, decision: { action: 'done', case: 'replayed' } })
      const ledger = (await send(`${payments.url}/accounts/${job.account}/charges`)).json().charges
      expect(ledger).toHaveLength(1)
      expect(ledger[0]).toMatchObject({ idempotencyKey: `job-${job.id}`, fencingToken: '1' })
      const ch = await conn.createChannel()
      expect((await ch.checkQueue(queue)).messageCount).toBe(0)
      await ch.close()
    } finally {
      await stopChildren()
      await conn.createChannel().then(async (ch) => { await ch.deleteQueue(queue); await ch.close() }).catch(() => {})
      await gw.close()
      await payments.close()
    }
    expect(await queueExists(queue)).toBe(false)
  }, 60_000)

  it('the token: x-delivery-count + 1, x-acquired-count + 1 where the broker sends it; x-consumer-timeout from 3.12', () => {
    expect(deliveryToken(undefined)).toBe(1)
    expect(deliveryToken({})).toBe(1)
    expect(deliveryToken({ 'x-delivery-count': 3 })).toBe(4)
    expect(deliveryToken({ 'x-delivery-count': 1, 'x-acquired-count': 5 })).toBe(6)
    expect(['3.10.8', '3.11.28', '3.12.0', '3.13.7', '4.0.1', '4.3.7', ''].map(hasConsumerTimeout)).toEqual([false, false, true, true, true, true, false])
  })
})
