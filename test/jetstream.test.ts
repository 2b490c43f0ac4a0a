/**
 * examples/jetstream against the real NATS JetStream (NATS_URL, default 127.0.0.1:4222). Every
 * run uses a stream of its own and deletes it. Needs `npm run build` (the workers are child
 * processes run from dist/; npm test builds first).
 * - the seed's timeline (examples/jetstream/run.ts) with ack_wait 1 s: A charges and is frozen
 *   before its ack, JetStream redelivers to B (deliveryCount 2), B's charge is replayed, A's late
 *   charge with deliveryCount 1 is refused 412; one charge; the key's timeline from the attempt log.
 * - many workers: 8 worker processes, 200 jobs, ack_wait 1 s, each delivery paused past ack_wait
 *   (its event loop blocked) with chance 0.15 and its ack dropped with chance 0.1: every job's
 *   effect applied once at the upstream, every write that came after a higher token was accepted
 *   refused 412, every redelivery after a completed first attempt replayed, and the gateway's
 *   counts equal to the broker's deliveries and redeliveries.
 */
import { randomBytes } from 'node:crypto'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { connect, type NatsConnection } from '@nats-io/transport-node'
import { jetstream, jetstreamManager } from '@nats-io/jetstream'
import { runJetStream, createStream, names } from '../examples/jetstream/run.js'
import { brokerGatewayConfig, type ChargeReply } from '../examples/charge.js'
import { paymentsRoutes } from '../examples/payments/routes.js'
import { startPayments } from '../examples/payments/server.js'
import { distPath, startChild, stopChildren, type Child, type ChildEvent } from '../examples/children.js'
import { startTestGateway, type TestGateway } from './helpers/gateway.js'
import { send } from './helpers/http.js'
import { until } from './helpers/wait.js'

const NATS_URL = process.env.NATS_URL ?? '127.0.0.1:4222'

let nc: NatsConnection
beforeAll(async () => { nc = await connect({ servers: NATS_URL }) })
afterAll(async () => { await stopChildren(); await nc?.close() })

const streamGone = async (stream: string) => {
  const jsm = await jetstreamManager(nc)
  const all: string[] = []
  for await (const s of jsm.streams.names()) all.push(s)
  return !all.includes(stream)
}

describe('examples/jetstream: the seed timeline on JetStream', () => {
  it('A charges and freezes before its ack, B gets deliveryCount 2 and a replay, A\'s late charge is refused 412; one charge', async () => {
    const lines: string[] = []
    const r = await runJetStream({ natsUrl: NATS_URL, ackWaitMs: 1000, out: { write: (s: string) => lines.push(s) } })
    const output = lines.join('')
    expect(r.failures, output).toEqual([])
    expect(r.ok).toBe(true)
    expect(r.tokens).toEqual({ a: 1, b: 2 })
    // fencegate/client's decisions: applied → done, replayed → done, stale → stop (no ack)
    expect(r.charges.a1).toMatchObject({ status: 201, replayed: false, token: 1, decision: { action: 'done', case: 'applied' } })
    expect(r.charges.b).toMatchObject({ status: 201, replayed: true, token: 2, decision: { action: 'done', case: 'replayed' } })
    expect(r.charges.b!.body).toEqual(r.charges.a1!.body)
    expect(r.charges.a2).toMatchObject({ status: 412, token: 1, decision: { action: 'stop', case: 'stale-fencing-token' }, body: { type: 'urn:fencegate:problem:stale-fencing-token', resource: 'job:9', token: '1', highestToken: '2' } })
    expect(r.broker).toMatchObject({ deliveries: 2, ackPending: 0, pending: 0 })
    expect(r.ledger).toHaveLength(1)
    expect(r.ledger![0]).toMatchObject({ account: r.account, fencingToken: '1', idempotencyKey: 'job-9' })

    // the attempt log: the key's timeline, and the advice in JetStream's words
    expect(r.timeline.entries.map((e: any) => `${e.token} ${e.outcome} ${e.status}`)).toEqual(['1 forwarded 201', '2 replayed 201', '1 stale 412'])
    const lr = r.leases.routes[0]
    expect(lr.generations).toMatchObject({ resources: 1, total: 2, handovers: 1 })
    const js = lr.advice.brokers.find((b: any) => b.broker === 'NATS JetStream')
    expect(js.settings).toEqual({ ack_wait: expect.any(String), 'ack_wait (API, ns)': lr.advice.minimumLeaseMs * 1e6, 'msg.working() every': expect.any(String), max_deliver: -1 })
    expect(r.leasesText).toContain('in the broker\'s words')
    // the output ends with the key's timeline, then the verdict
    const tail = output.trimEnd().split('\n').slice(-3).join('\n')
    expect(tail).toMatch(/412 {2}stale {2}token 1 {2}refused \d+ ms after token 2 took over/)
    expect(tail).toContain('The timeline held on JetStream')
    expect(output).toContain('SIGSTOP')
    expect(await streamGone(r.broker.stream as string)).toBe(true)
  }, 120_000)
})

describe('many workers on one JetStream consumer, paused past ack_wait and dropping acks', () => {
  const JOBS = 200
  const WORKERS = 8
  const run = randomBytes(4).toString('hex')
  const { stream, subject, consumer } = names(run)
  let payments: Awaited<ReturnType<typeof startPayments>>
  let gw: TestGateway

  beforeAll(async () => {
    payments = await startPayments(0)
    gw = await startTestGateway(brokerGatewayConfig('@DIR@', payments.url, paymentsRoutes))
    await createStream(nc, run, 1000)
  })
  afterAll(async () => {
    await (await jetstreamManager(nc)).streams.delete(stream).catch(() => {})
    await gw?.close()
    await payments?.close()
  })

  it('every job charged once, every stale write refused, every late redelivery replayed, and the gateway\'s counts are the broker\'s', async () => {
    const accounts = Array.from({ length: 10 }, (_, i) => `acct-${run}-${i}`)
    const js = jetstream(nc)
    for (let i = 0; i < JOBS; i++) await js.publish(subject, JSON.stringify({ id: `${run}-${i}`, account: accounts[i % accounts.length], amount: 100 + i, currency: 'eur' }))

    const workers: Child[] = Array.from({ length: WORKERS }, (_, i) => startChild(`worker ${i}`, distPath('examples/jetstream/worker.js'),
      ['--nats', NATS_URL, '--stream', stream, '--consumer', consumer, '--gateway', gw.url, '--name', `w${i}`, '--pause-chance', '0.15', '--drop-ack-chance', '0.1']))
    const jsm = await jetstreamManager(nc)
    // done when JetStream has every message acked, then the workers finish what they hold
    await until(async () => {
      const info = await jsm.consumers.info(stream, consumer)
      return info.num_pending === 0 && info.num_ack_pending === 0
    }, { timeoutMs: 120_000, intervalMs: 250, message: () => `every job acked; workers said: ${workers.map((w) => w.stderr || w.events.at(-1)?.event).join(', ')}` })
    await Promise.all(workers.map((w) => w.stop(10_000)))
    for (const w of workers) expect(w.exitCode, `${w.name}: ${w.stderr}`).toBe(0)
    const info = await jsm.consumers.info(stream, consumer)

    const events = workers.flatMap((w) => w.events)
    const of = (name: string) => events.filter((e) => e.event === name)
    const claims = of('claimed')
    const charges = of('charge') as (ChargeReply & ChildEvent)[]

    // each delivery the broker made reached a worker and its charge reached the gateway
    expect(claims).toHaveLength(info.delivered.consumer_seq)
    const tokensByJob = new Map<string, number[]>()
    for (const c of claims) tokensByJob.set(c.job, [...(tokensByJob.get(c.job) ?? []), c.token])
    expect(tokensByJob.size).toBe(JOBS)
    for (const [job, tokens] of tokensByJob) expect(tokens.sort((a, b) => a - b), job).toEqual(tokens.map((_, i) => i + 1))
    const redeliveries = info.delivered.consumer_seq - JOBS
    expect(redeliveries).toBe([...tokensByJob.values()].reduce((n, t) => n + t.length - 1, 0))

    // the faults happened
    expect(of('blocked').length).toBeGreaterThan(0)
    expect(of('ack-dropped').length).toBeGreaterThan(0)

    // the upstream: one effect per job, with the job's first accepted token
    const ledger = (await Promise.all(accounts.map(async (a) => (await send(`${payments.url}/accounts/${a}/charges`)).json().charges))).flat()
    const effects = new Map<string, number>()
    for (const c of ledger) effects.set(c.idempotencyKey, (effects.get(c.idempotencyKey) ?? 0) + 1)
    expect(effects.size).toBe(JOBS)
    expect([...effects.values()].every((n) => n === 1)).toBe(true)

    // every write, judged by what had completed before it was sent
    for (const w of charges) {
      const before = charges.filter((x) => x.job === w.job && x.status === 201 && x.doneAt < w.sentAt)
      const staleNow = before.some((x) => x.token > w.token)
      if (staleNow) expect(w, 'a write sent after a higher token was accepted').toMatchObject({ status: 412, body: { type: 'urn:fencegate:problem:stale-fencing-token' } })
      else if (before.length) expect(w, 'a write sent after the job\'s first attempt completed').toMatchObject({ status: 201, replayed: true })
      if (w.status === 409) expect(w.body.type).toBe('urn:fencegate:problem:request-in-flight')
      else expect([201, 412]).toContain(w.status)
      // the client's decision for each answer is the table's
      const want = w.status === 409 ? 'retry-after request-in-flight' : w.status === 412 ? 'stop stale-fencing-token' : w.replayed ? 'done replayed' : 'done applied'
      expect(`${w.decision.action} ${w.decision.case}`, JSON.stringify(w)).toBe(want)
    }
    const stale = charges.filter((c) => c.status === 412)
    const replayed = charges.filter((c) => c.status === 201 && c.replayed)
    const inFlight = charges.filter((c) => c.status === 409)
    expect(stale.length).toBeGreaterThan(0)
    expect(replayed.length).toBeGreaterThan(0)
    expect(charges.filter((c) => c.status === 201 && !c.replayed)).toHaveLength(JOBS)
    // a stale delivery never acked: its job was acked by a later one; nothing was dead-lettered
    expect(of('dead-letter')).toEqual([])
    for (const a of of('abandoned')) expect(claims.some((c) => c.job === a.job && c.token > a.token)).toBe(true)

    // the gateway's report: its counts are the workers' answers, its generations the broker's deliveries
    await gw.audit.flush()
    const audit = (await send(`${gw.adminUrl}/audit?route=payments`)).json().routes[0]
    expect(audit).toMatchObject({ attempts: charges.length, keys: JOBS, forwarded: JOBS, replayed: replayed.length, stale: stale.length, inFlightConflicts: inFlight.length })
    const leases = (await send(`${gw.adminUrl}/leases?route=payments`)).json().routes[0]
    expect(leases.generations).toMatchObject({ resources: JOBS, total: info.delivered.consumer_seq, handovers: redeliveries })
    expect(leases.stale.count).toBe(stale.length)
  }, 150_000)
})
