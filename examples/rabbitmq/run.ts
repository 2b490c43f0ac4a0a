/**
 * `npm run example:rabbitmq`: the seed's timeline on a real RabbitMQ quorum queue (AMQP_URL,
 * default amqp://guest:guest@127.0.0.1:5672), with real processes.
 *
 *   payments, fencegate   as in examples/jetstream/run.ts (SQLite store, resource job:{header.X-Job-Id})
 *   a quorum queue fg-<run>-charges; worker A, worker B: node dist/examples/rabbitmq/worker.js,
 *   prefetch 1, heartbeat 1 s; Fencing-Token x-delivery-count + 1
 *
 *   A takes job 9 (no x-delivery-count: token 1) and charges                  → 201
 *   A is frozen with SIGSTOP before basic.ack; its heartbeats stop, and the broker closes its
 *   connection after two missed ones: the ack is lost with the channel, the delivery goes back
 *   RabbitMQ delivers job 9 again, to B (x-delivery-count 1: token 2)          → 201 replayed, no second charge
 *   B acks                                                                     → the queue is empty
 *   A gets SIGCONT and sends its charge again with token 1                    → 412 stale-fencing-token
 *   the ledger holds one charge; the queue is deleted; `fencegate audit`, `fencegate leases` and,
 *   last, job 9's timeline from the attempt log
 *
 * A worker that is alive but slow is what consumer_timeout is for; the broker evaluates it about
 * once a minute, so it makes no quick timeline. Where the broker takes a per-consumer timeout
 * (x-consumer-timeout, 3.12 and later), A registers with one of a minute as well.
 *
 * Exit 0 when every step held, 1 otherwise.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { randomBytes } from 'node:crypto'
import amqp, { type ChannelModel } from 'amqplib'
import { distPath, killChildrenOnExit, startChild, stopChildren } from '../children.js'
import { checkLedger, narrator, newResult, readAttemptLog, startServices, type BrokerRunResult, type Out } from '../broker-run.js'
import { hasConsumerTimeout } from './worker.js'
import { isMain } from '../is-main.js'

export interface RabbitRunOptions {
  /** default AMQP_URL or amqp://guest:guest@127.0.0.1:5672 */
  amqpUrl?: string
  /** where the readable report goes; default process.stdout, null for silence */
  out?: Out
}

/** The run's quorum queue, made unique so that runs sharing a broker do not meet. */
export const queueName = (run: string) => `fg-${run}-charges`

/** Declares the run's quorum queue (durable, as quorum queues are). */
export async function declareQueue(conn: ChannelModel, queue: string): Promise<void> {
  const ch = await conn.createChannel()
  await ch.assertQueue(queue, { durable: true, arguments: { 'x-queue-type': 'quorum' } })
  await ch.close()
}

/** Publishes `job` to `queue` and waits for the broker's confirm. */
export async function publishJob(conn: ChannelModel, queue: string, job: object): Promise<void> {
  const ch = await conn.createConfirmChannel()
  ch.sendToQueue(queue, Buffer.from(JSON.stringify(job)), { persistent: true, contentType: 'application/json' })
  await ch.waitForConfirms()
  await ch.close()
}

/** what a Ctrl-C has to remove besides the child processes */
let onSignal = async () => {}

export async function runRabbitMQ(options: RabbitRunOptions = {}): Promise<BrokerRunResult> {
  const amqpUrl = options.amqpUrl ?? process.env.AMQP_URL ?? 'amqp://guest:guest@127.0.0.1:5672'
  const run = randomBytes(4).toString('hex')
  const r = newResult(mkdtempSync(join(tmpdir(), 'fencegate-rabbitmq-')), run, '9')
  const n = narrator(options.out === undefined ? process.stdout : options.out, r)
  const queue = queueName(run)
  let conn: ChannelModel | undefined
  const dropQueue = async () => {
    if (!conn) return
    await conn.createChannel().then((ch) => ch.deleteQueue(queue)).catch(() => {})
    await conn.close().catch(() => {})
    conn = undefined
  }
  onSignal = async () => { await dropQueue(); rmSync(r.dir, { recursive: true, force: true }) }
  try {
    n.say(`fencegate RabbitMQ example: real processes, ${amqpUrl.replace(/\/\/[^@]*@/, '//')}, temp folder ${r.dir}`)
    const s = await startServices(r)
    conn = await amqp.connect(amqpUrl)
    conn.on('error', () => {})
    const version = String(conn.connection.serverProperties.version)
    const perConsumer = hasConsumerTimeout(version)
    await declareQueue(conn, queue)
    n.say(`  payments service  ${s.paymentsUrl}   (naive: applies every charge it receives)`)
    n.say(`  fencegate         ${s.gatewayUrl}   (admin ${s.adminUrl}; SQLite store; resource job:{header.X-Job-Id})`)
    n.say(`  RabbitMQ ${version}    quorum queue ${queue}; workers: prefetch 1, heartbeat 1 s; ${perConsumer ? 'x-consumer-timeout 60000 per consumer' : 'no per-consumer timeout before 3.12 (x-consumer-timeout): consumer_timeout is node-wide'}`)

    const job = { id: r.jobId, account: r.account, amount: 1250, currency: 'eur' }
    await publishJob(conn, queue, job)
    n.step('Producer → RabbitMQ', `job ${job.id} published to ${queue} (confirmed): charge ${job.account} 12.50 eur`)

    const worker = (label: string, extra: string[]) => startChild(`worker ${label}`, distPath('examples/rabbitmq/worker.js'),
      ['--amqp', amqpUrl, '--queue', queue, '--gateway', s.gatewayUrl, '--name', label, '--jobs', '1', '--heartbeat', '1', ...extra])
    const a = worker('A', ['--pause-before-ack', '1000', '--charge-again', ...(perConsumer ? ['--consumer-timeout', '60000'] : [])])
    const aClaim = await a.event('claimed', () => true, 20_000)
    r.tokens.a = aClaim.token
    n.step('RabbitMQ → Worker A', `job ${aClaim.job}, headers ${JSON.stringify(aClaim.headers ?? {})}: token ${aClaim.token}   (pid ${a.proc.pid})`)
    n.expect(aClaim.token === 1 && aClaim.redelivered === false, `a first delivery has no x-delivery-count: token 1 (got ${aClaim.token})`)

    const a1 = r.charges.a1 = await a.event('charge') as any
    n.step('Worker A → fencegate → Payments', `POST /accounts/${job.account}/charges  (Fencing-Token: ${a1.token}, Idempotency-Key: job-${a1.job}, X-Job-Id: ${a1.job})`)
    n.say(`    → ${a1.status}${a1.replayed ? ', Idempotent-Replayed: true' : ''}`)
    n.show(a1.body)
    n.expect(a1.status === 201 && !a1.replayed, 'A\'s charge was forwarded and applied (201, not replayed)')

    await a.event('pausing')
    a.freeze()
    const frozenAt = Date.now()
    n.step('Worker A', `takes a pause before basic.ack — frozen there with SIGSTOP (pid ${a.proc.pid}): no heartbeats, no ack`)

    const b = worker('B', [])
    const bClaim = await b.event('claimed', () => true, 20_000)
    r.tokens.b = bClaim.token
    n.step('RabbitMQ → Worker B', `job ${bClaim.job} again, ${Date.now() - frozenAt} ms after A froze (the broker closed A's connection after missed heartbeats; the unacked delivery went back): headers ${JSON.stringify(bClaim.headers ?? {})}, token ${bClaim.token}   (pid ${b.proc.pid})`)
    n.expect(bClaim.token === 2 && bClaim.redelivered === true, `the redelivery carries x-delivery-count 1: token 2 (got ${bClaim.token})`)

    const bc = r.charges.b = await b.event('charge') as any
    n.step('Worker B → fencegate', `the same charge: POST /accounts/${job.account}/charges  (Fencing-Token: ${bc.token}, Idempotency-Key: job-${bc.job})`)
    n.say(`    → ${bc.status}${bc.replayed ? ', Idempotent-Replayed: true' : ''}`)
    n.show(bc.body)
    n.expect(bc.status === 201 && bc.replayed === true, 'B got A\'s stored response replayed (201, Idempotent-Replayed: true); the payments service was not called')
    await b.event('acked')
    n.step('Worker B → RabbitMQ', 'basic.ack')
    await b.exited

    a.thaw()
    n.step('Worker A', `SIGCONT after ${Date.now() - frozenAt} ms frozen: wakes up, still holding job ${job.id} with token ${aClaim.token} as it believes`)
    const a2 = r.charges.a2 = await a.event('charge', (e) => e.again === true) as any
    n.step('Worker A → fencegate', `sends its charge again: POST /accounts/${job.account}/charges  (Fencing-Token: ${a2.token}, Idempotency-Key: job-${a2.job})`)
    n.say(`    → ${a2.status}`)
    n.show(a2.body)
    n.expect(a2.status === 412 && a2.body?.type === 'urn:fencegate:problem:stale-fencing-token', 'A\'s late write was refused: 412 stale-fencing-token, not forwarded')
    n.expect(a2.body?.token === String(aClaim.token) && a2.body?.highestToken === String(bClaim.token), `token ${aClaim.token} refused, highestToken ${bClaim.token}`)
    await a.exited
    const lost = a.events.find((e) => e.event === 'connection-closed')
    n.say(`    A's connection: ${lost ? `closed by the broker (${lost.error})` : 'still open'}; it has nothing to ack`)
    n.expect(lost !== undefined, 'the broker had closed A\'s connection: its ack was lost with it')

    const q = await (await conn.createChannel()).checkQueue(queue)
    r.broker = { queue, version, messages: q.messageCount, consumers: q.consumerCount }
    n.step('RabbitMQ', `${queue}: ${q.messageCount} message(s) ready, ${q.consumerCount} consumer(s)`)
    n.expect(q.messageCount === 0, 'the job is done: nothing left in the queue')

    await checkLedger(s, r, n)
    await readAttemptLog(s, r, n)
  } catch (e) {
    r.failures.push((e as Error).message)
    n.say()
    n.say(`ERROR: ${(e as Error).message}`)
  } finally {
    await stopChildren()
    await dropQueue()
    rmSync(r.dir, { recursive: true, force: true })
  }
  r.ok = r.failures.length === 0
  n.say()
  n.say(r.ok
    ? `The timeline held on RabbitMQ: one charge, B's redelivery replayed, A's late write refused at the gateway (412, ${r.charges.a2?.body?.supersededForMs} ms after B's token took over).`
    : `The timeline did NOT hold: ${r.failures.join('; ')}`)
  return r
}

if (isMain(import.meta.url)) {
  killChildrenOnExit(() => onSignal())
  const result = await runRabbitMQ()
  if (process.env.FG_RESULT_FILE) writeFileSync(process.env.FG_RESULT_FILE, `${JSON.stringify(result, null, 2)}\n`)
  process.exitCode = result.ok ? 0 : 1
}
