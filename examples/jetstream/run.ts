/**
 * `npm run example:jetstream`: the seed's timeline on a real NATS JetStream (NATS_URL, default
 * 127.0.0.1:4222), with real processes.
 *
 *   payments   node dist/examples/payments/server.js 0    the naive sample service (applies every charge)
 *   fencegate  node dist/src/cli.js --config <tmp>/fencegate.yaml   SQLite store, the payments
 *              routes fenced per job (job:{header.X-Job-Id}), idempotency required
 *   a stream FG_<run> and a durable pull consumer with a short ack_wait (default 2 s): the lease
 *   worker A, worker B   node dist/examples/jetstream/worker.js   msg.working() every ack_wait / 3
 *
 *   A takes job 9 (deliveryCount 1) and charges                               → 201
 *   A is frozen with SIGSTOP before its ack: no working(), no ack; ack_wait runs out
 *   JetStream delivers job 9 again, to B (deliveryCount 2); B charges         → 201 replayed, no second charge
 *   B acks                                                                     → the message is done
 *   A gets SIGCONT and sends its charge again with deliveryCount 1            → 412 stale-fencing-token; A does not ack
 *   the ledger holds one charge; the stream is deleted; `fencegate audit`, `fencegate leases` and,
 *   last, job 9's timeline from the attempt log
 *
 * Exit 0 when every step held, 1 otherwise. Every child process is stopped on the way out and the
 * stream deleted, also on an error or Ctrl-C.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { randomBytes } from 'node:crypto'
import { connect, nanos, type NatsConnection } from '@nats-io/transport-node'
import { AckPolicy, jetstream, jetstreamManager } from '@nats-io/jetstream'
import { distPath, killChildrenOnExit, startChild, stopChildren } from '../children.js'
import { checkLedger, narrator, newResult, readAttemptLog, startServices, type BrokerRunResult, type Out } from '../broker-run.js'
import { isMain } from '../is-main.js'

export interface JetStreamRunOptions {
  /** default NATS_URL or 127.0.0.1:4222 */
  natsUrl?: string
  /** the consumer's ack_wait, ms (default 2000) */
  ackWaitMs?: number
  /** where the readable report goes; default process.stdout, null for silence */
  out?: Out
}

/** The stream and consumer of a run, made unique so that runs sharing a server do not meet. */
export const names = (run: string) => ({ stream: `FG_${run}`, subject: `fg.${run}.charges`, consumer: 'charges' })

/** Creates the run's stream and its durable pull consumer (explicit acks, no delivery limit). */
export async function createStream(nc: NatsConnection, run: string, ackWaitMs: number): Promise<void> {
  const jsm = await jetstreamManager(nc)
  const n = names(run)
  await jsm.streams.add({ name: n.stream, subjects: [n.subject] })
  await jsm.consumers.add(n.stream, { durable_name: n.consumer, ack_policy: AckPolicy.Explicit, ack_wait: nanos(ackWaitMs), max_deliver: -1 })
}

/** what a Ctrl-C has to remove besides the child processes */
let onSignal = async () => {}

export async function runJetStream(options: JetStreamRunOptions = {}): Promise<BrokerRunResult> {
  const natsUrl = options.natsUrl ?? process.env.NATS_URL ?? '127.0.0.1:4222'
  const ackWaitMs = options.ackWaitMs ?? 2000
  const run = randomBytes(4).toString('hex')
  const r = newResult(mkdtempSync(join(tmpdir(), 'fencegate-jetstream-')), run, '9')
  const n = narrator(options.out === undefined ? process.stdout : options.out, r)
  const { stream, subject, consumer } = names(run)
  let nc: NatsConnection | undefined
  const dropStream = async () => {
    if (!nc) return
    await (await jetstreamManager(nc)).streams.delete(stream).catch(() => {})
    await nc.close()
    nc = undefined
  }
  onSignal = async () => { await dropStream(); rmSync(r.dir, { recursive: true, force: true }) }
  try {
    n.say(`fencegate JetStream example: real processes, NATS ${natsUrl}, temp folder ${r.dir}`)
    const s = await startServices(r)
    nc = await connect({ servers: natsUrl, name: `fencegate-example-${run}` })
    await createStream(nc, run, ackWaitMs)
    const jsm = await jetstreamManager(nc)
    n.say(`  payments service  ${s.paymentsUrl}   (naive: applies every charge it receives)`)
    n.say(`  fencegate         ${s.gatewayUrl}   (admin ${s.adminUrl}; SQLite store; resource job:{header.X-Job-Id})`)
    n.say(`  JetStream         stream ${stream} (subject ${subject}), pull consumer "${consumer}": ack_wait ${ackWaitMs} ms (the lease), max_deliver -1; nats-server ${nc.info?.version}`)

    const job = { id: r.jobId, account: r.account, amount: 1250, currency: 'eur' }
    const ack = await jetstream(nc).publish(subject, JSON.stringify(job))
    n.step('Producer → JetStream', `job ${job.id} published (stream sequence ${ack.seq}): charge ${job.account} 12.50 eur`)

    const worker = (label: string, extra: string[]) => startChild(`worker ${label}`, distPath('examples/jetstream/worker.js'),
      ['--nats', natsUrl, '--stream', stream, '--consumer', consumer, '--gateway', s.gatewayUrl, '--name', label, '--jobs', '1', ...extra])
    const pauseMs = Math.floor(ackWaitMs / 2)
    const a = worker('A', ['--pause-before-ack', String(pauseMs), '--charge-again'])
    const aClaim = await a.event('claimed', () => true, 20_000)
    r.tokens.a = aClaim.token
    const aReady = a.events.find((e) => e.event === 'ready')
    n.step('JetStream → Worker A', `job ${aClaim.job}, deliveryCount ${aClaim.token}; A renews with msg.working() every ${aReady?.renewMs} ms   (pid ${a.proc.pid})`)
    n.expect(aClaim.token === 1, `the first delivery's count is 1 (got ${aClaim.token})`)

    const a1 = r.charges.a1 = await a.event('charge') as any
    n.step('Worker A → fencegate → Payments', `POST /accounts/${job.account}/charges  (Fencing-Token: ${a1.token}, Idempotency-Key: job-${a1.job}, X-Job-Id: ${a1.job})`)
    n.say(`    → ${a1.status}${a1.replayed ? ', Idempotent-Replayed: true' : ''}`)
    n.show(a1.body)
    n.expect(a1.status === 201 && !a1.replayed, 'A\'s charge was forwarded and applied (201, not replayed)')

    await a.event('pausing')
    a.freeze()
    const frozenAt = Date.now()
    n.step('Worker A', `takes a ${pauseMs} ms pause before its ack — frozen there with SIGSTOP (pid ${a.proc.pid}): no msg.working(), no ack`)

    // B asks for a message now; JetStream hands job 9 over only once A's ack_wait has run out
    const b = worker('B', [])
    const bClaim = await b.event('claimed', () => true, ackWaitMs + 15_000)
    r.tokens.b = bClaim.token
    n.step('JetStream → Worker B', `job ${bClaim.job} again, ${Date.now() - frozenAt} ms after A froze (ack_wait ${ackWaitMs} ms): deliveryCount ${bClaim.token}   (pid ${b.proc.pid})`)
    n.expect(bClaim.token === 2 && bClaim.redelivered === true, `the redelivery's count is 2 (got ${bClaim.token})`)
    // ack_wait counts from A's last msg.working(), at most one renewal period before the freeze
    n.expect(Date.now() - frozenAt >= ackWaitMs - (aReady?.renewMs ?? 0) - 100, 'JetStream waited for A\'s ack_wait (from its last msg.working()) to run out before redelivering')

    const bc = r.charges.b = await b.event('charge') as any
    n.step('Worker B → fencegate', `the same charge: POST /accounts/${job.account}/charges  (Fencing-Token: ${bc.token}, Idempotency-Key: job-${bc.job})`)
    n.say(`    → ${bc.status}${bc.replayed ? ', Idempotent-Replayed: true' : ''}`)
    n.show(bc.body)
    n.expect(bc.status === 201 && bc.replayed === true, 'B got A\'s stored response replayed (201, Idempotent-Replayed: true); the payments service was not called')
    const bAck = await b.event('acked')
    n.step('Worker B → JetStream', `ack (delivery ${bAck.token}, confirmed by the server: ${bAck.confirmed})`)
    n.expect(bAck.confirmed === true, 'JetStream confirmed B\'s ack')
    await b.exited

    a.thaw()
    n.step('Worker A', `SIGCONT after ${Date.now() - frozenAt} ms frozen: wakes up, still holding delivery ${aClaim.token} of job ${job.id} as it believes`)
    const a2 = r.charges.a2 = await a.event('charge', (e) => e.again === true) as any
    n.step('Worker A → fencegate', `sends its charge again: POST /accounts/${job.account}/charges  (Fencing-Token: ${a2.token}, Idempotency-Key: job-${a2.job})`)
    n.say(`    → ${a2.status}`)
    n.show(a2.body)
    n.expect(a2.status === 412 && a2.body?.type === 'urn:fencegate:problem:stale-fencing-token', 'A\'s late write was refused: 412 stale-fencing-token, not forwarded')
    n.expect(a2.body?.token === String(aClaim.token) && a2.body?.highestToken === String(bClaim.token), `token ${aClaim.token} refused, highestToken ${bClaim.token}`)
    const aEnd = await a.waitFor('its last word', (_l, e) => (e && ['abandoned', 'acked', 'nak'].includes(e.event) ? e : undefined))
    n.say(`    A ${aEnd.event === 'abandoned' ? 'does not ack: a later delivery has written (JetStream would take an old delivery\'s ack as the message\'s)' : `answered with ${aEnd.event}`}`)
    n.expect(aEnd.event === 'abandoned', 'A left the message to the later delivery (no ack after 412)')
    await a.exited

    const info = await jsm.consumers.info(stream, consumer)
    r.broker = { stream, deliveries: info.delivered.consumer_seq, ackPending: info.num_ack_pending, pending: info.num_pending, redelivered: info.num_redelivered }
    n.step('JetStream', `consumer "${consumer}": ${info.delivered.consumer_seq} deliveries of 1 message, ${info.num_ack_pending} awaiting an ack, ${info.num_pending} waiting`)
    n.expect(info.delivered.consumer_seq === 2 && info.num_ack_pending === 0 && info.num_pending === 0, 'two deliveries, and the message is done')

    await checkLedger(s, r, n)
    await readAttemptLog(s, r, n)
  } catch (e) {
    r.failures.push((e as Error).message)
    n.say()
    n.say(`ERROR: ${(e as Error).message}`)
  } finally {
    await stopChildren()
    await dropStream()
    rmSync(r.dir, { recursive: true, force: true })
  }
  r.ok = r.failures.length === 0
  n.say()
  n.say(r.ok
    ? `The timeline held on JetStream: one charge, B's redelivery replayed, A's late write refused at the gateway (412, ${r.charges.a2?.body?.supersededForMs} ms after B's token took over).`
    : `The timeline did NOT hold: ${r.failures.join('; ')}`)
  return r
}

if (isMain(import.meta.url)) {
  killChildrenOnExit(() => onSignal())
  const result = await runJetStream()
  if (process.env.FG_RESULT_FILE) writeFileSync(process.env.FG_RESULT_FILE, `${JSON.stringify(result, null, 2)}\n`)
  process.exitCode = result.ok ? 0 : 1
}
