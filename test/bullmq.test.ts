/**
 * examples/bullmq against Redis (REDIS_URL, default redis://127.0.0.1:6379), a gateway and the
 * sample payments service started in this process:
 * - the lost-lease timeline (examples/bullmq/run.ts) with a 500 ms lockDuration: worker A (a child
 *   process) claims the job and its event loop is blocked before it sends the charge; the lock
 *   expires, worker B (this process) recovers the stalled job and charges with a higher
 *   attemptsStarted; only then is A released, so its charge (old token, same key) is refused 412.
 *   The ledger holds one charge and the gateway counts one stale rejection.
 * - a retry after a lost ack: attemptsStarted grows on a retry too, and the retry's charge is
 *   replayed, not applied again.
 * - a job whose key was spent on another request (422): dead-lettered at once, not retried.
 * Every run uses its own BullMQ prefix and leaves no key behind.
 */
import { fileURLToPath } from 'node:url'
import { randomUUID } from 'node:crypto'
import { Redis } from 'ioredis'
import { Queue } from 'bullmq'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { startPayments } from '../examples/payments/server.js'
import { gatewayConfig, runBullmqExample } from '../examples/bullmq/run.js'
import { createChargeWorker, type ChargeJobData, type ChargeReply } from '../examples/bullmq/worker.js'
import { startTestGateway, type TestGateway } from './helpers/gateway.js'
import { metric, metrics, send } from './helpers/http.js'
import { until } from './helpers/wait.js'
import { keyHash } from '../src/client/index.js'

const REDIS_URL = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379'
const viteNode = fileURLToPath(new URL('../node_modules/vite-node/vite-node.mjs', import.meta.url))
const blockedWorker = fileURLToPath(new URL('../examples/bullmq/blocked-worker.ts', import.meta.url))

const staleRejections = async (adminUrl: string) => metric(await metrics(adminUrl), 'fencegate_fencing_rejections_total', { route: 'payments', reason: 'stale' })

describe('examples/bullmq: job.attemptsStarted as the fencing token, job.id as the key', () => {
  let payments: Awaited<ReturnType<typeof startPayments>>
  let gateway: TestGateway
  let redis: Redis

  beforeAll(async () => {
    payments = await startPayments(0)
    gateway = await startTestGateway(gatewayConfig(payments.url))
    redis = new Redis(REDIS_URL)
  })
  afterAll(async () => {
    redis?.disconnect()
    await gateway?.close()
    await payments?.close()
  })

  it('refuses the blocked worker\'s late charge after the stalled job was taken over: one charge in the ledger', async () => {
    const before = await staleRejections(gateway.adminUrl)
    const lines: string[] = []
    const r = await runBullmqExample({
      redisUrl: REDIS_URL,
      gateway: { url: gateway.url, adminUrl: gateway.adminUrl },
      paymentsUrl: payments.url,
      workerACommand: [process.execPath, viteNode, blockedWorker],
      lockDurationMs: 500,
      stalledIntervalMs: 250,
      stepTimeoutMs: 20_000,
      out: { write: (s: string) => lines.push(s) },
    })
    const report = lines.join('')
    expect(r.failures, report).toEqual([])
    expect(r.ok).toBe(true)

    // A claimed first (generation 1) and was blocked; B charged with a later generation
    expect(r.aToken).toBe(1)
    expect(r.bReplies.length).toBeGreaterThanOrEqual(1)
    const bFirst = r.bReplies[0]
    expect(bFirst).toMatchObject({ status: 201, replayed: false, jobId: r.jobId, decision: { action: 'done', case: 'applied' } })
    expect(bFirst.token).toBeGreaterThanOrEqual(2)
    const highest = Math.max(...r.bReplies.map((x) => x.token))

    // A's charge after its release: old token, same key → refused before the key's stored response
    expect(r.aReply).toMatchObject({ status: 412, token: 1, jobId: r.jobId, decision: { action: 'stop', case: 'stale-fencing-token' } })
    expect(r.aReply!.body).toMatchObject({ type: 'urn:fencegate:problem:stale-fencing-token', resource: `bullmq-job:${r.jobId}`, token: '1', highestToken: String(highest) })
    expect(r.aBullmq.some((m) => /lock/i.test(m))).toBe(true) // BullMQ told A it had lost the lock, after the fact

    // one charge, B's, in the payments service's own ledger
    const ledger = (await send(`${payments.url}/accounts/${r.account}/charges`)).json().charges
    expect(ledger).toHaveLength(1)
    expect(ledger[0]).toMatchObject({ account: r.account, amount: 1250, idempotencyKey: r.jobId, fencingToken: String(bFirst.token) })
    expect(r.ledger).toEqual(ledger)

    // the gateway counted it
    expect(r.staleRejections).toBe(1)
    expect((await staleRejections(gateway.adminUrl)) - before).toBe(1)

    // nothing left in Redis under the run's prefix
    expect(r.leftoverKeys).toBe(0)
    expect(await redis.keys(`${r.prefix}:*`)).toEqual([])
  }, 60_000)

  // retried once: BullMQ has been seen completing the job on its first attempt here (one run in
  // five), a race in the queue not yet understood; a gateway that forwards twice fails both tries
  it('a retry after a lost ack has a higher attemptsStarted and gets the first charge replayed', { retry: 1, timeout: 30_000 }, async () => {
    const prefix = `fg-bullmq-test-${randomUUID().slice(0, 8)}`
    const connection = { url: REDIS_URL, maxRetriesPerRequest: null }
    const queue = new Queue<ChargeJobData>('charges', { connection, prefix })
    const replies: ChargeReply[] = []
    const worker = createChargeWorker({
      gateway: gateway.url, queue: 'charges', connection, prefix,
      onReply: (reply, job) => {
        replies.push(reply)
        if (job.attemptsStarted === 1) throw new Error('the ack is lost after the charge went through')
      },
    })
    worker.on('error', () => {})
    try {
      const jobId = `charge-${randomUUID()}`
      const account = `acct-${randomUUID().slice(0, 8)}`
      await queue.add('charge', { account, amount: 990, currency: 'eur' }, { jobId, attempts: 3, backoff: { type: 'fixed', delay: 100 } })
      const job = await until(async () => {
        const j = await queue.getJob(jobId)
        return j && (await j.isCompleted()) ? j : undefined
      }, { timeoutMs: 20_000, intervalMs: 25, message: 'the retried job to complete' })
      expect(job.attemptsStarted).toBe(2)
      expect(job.attemptsMade).toBe(2)
      expect(replies.map((x) => [x.token, x.status, x.replayed, x.decision.case])).toEqual([[1, 201, false, 'applied'], [2, 201, true, 'replayed']])
      expect(replies[1].body).toEqual(replies[0].body)
      const ledger = (await send(`${payments.url}/accounts/${account}/charges`)).json().charges
      expect(ledger).toHaveLength(1)
      expect(ledger[0]).toMatchObject({ idempotencyKey: jobId, fencingToken: '1' })
    } finally {
      await worker.close()
      await queue.obliterate({ force: true }).catch(() => {})
      await queue.close()
      const keys = await redis.keys(`${prefix}:*`)
      if (keys.length) await redis.del(...keys)
    }
    expect(await redis.keys(`${prefix}:*`)).toEqual([])
  })

  it('a 422 idempotency-key-reused is dead-lettered: failed at once (UnrecoverableError), not retried, the key hash in the reason', async () => {
    const prefix = `fg-bullmq-test-${randomUUID().slice(0, 8)}`
    const connection = { url: REDIS_URL, maxRetriesPerRequest: null }
    const queue = new Queue<ChargeJobData>('charges', { connection, prefix })
    const replies: ChargeReply[] = []
    const worker = createChargeWorker({ gateway: gateway.url, queue: 'charges', connection, prefix, onReply: (reply) => { replies.push(reply) } })
    worker.on('error', () => {})
    try {
      const jobId = `charge-${randomUUID()}`
      const account = `acct-${randomUUID().slice(0, 8)}`
      // the key was spent on another request before: the job's charge reuses it
      const first = await send(`${gateway.url}/accounts/${account}/charges`, { method: 'POST', headers: { 'content-type': 'application/json', 'fencing-token': '1', 'idempotency-key': jobId }, body: JSON.stringify({ amount: 1, currency: 'eur' }) })
      expect(first.status).toBe(201)
      await queue.add('charge', { account, amount: 990, currency: 'eur' }, { jobId, attempts: 3, backoff: { type: 'fixed', delay: 100 } })
      const job = await until(async () => {
        const j = await queue.getJob(jobId)
        return j && (await j.isFailed()) ? j : undefined
      }, { timeoutMs: 20_000, intervalMs: 25, message: 'the job to fail' })
      expect(replies.map((x) => [x.status, x.decision.action, x.decision.case])).toEqual([[422, 'dead-letter', 'idempotency-key-reused']])
      expect(job.attemptsMade).toBe(1)
      expect(job.failedReason).toContain(keyHash(jobId))
      const ledger = (await send(`${payments.url}/accounts/${account}/charges`)).json().charges
      expect(ledger).toHaveLength(1)
    } finally {
      await worker.close()
      await queue.obliterate({ force: true }).catch(() => {})
      await queue.close()
      const keys = await redis.keys(`${prefix}:*`)
      if (keys.length) await redis.del(...keys)
    }
  })
})
