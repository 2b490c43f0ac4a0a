/**
 * `npm run example:bullmq`: the lost-lease timeline with BullMQ on Redis and real processes.
 *
 *   sample payments service and fencegate start in this process (memory store), a queue gets a
 *   unique prefix in Redis (REDIS_URL, default redis://127.0.0.1:6379)
 *   worker A (its own process, blocked-worker.ts) claims the job: attemptsStarted 1, then its
 *     event loop is blocked before it sends the charge, so it cannot renew the job's lock
 *   the lock expires; worker B (this process) runs the stalled checker, which moves the job back
 *     to wait, and claims it: attemptsStarted 2 → charge, Fencing-Token 2        → 201
 *   A's event loop is released; A sends its charge, Fencing-Token 1, same key   → 412 stale
 *   ledger: exactly one charge; fencegate_fencing_rejections_total{reason="stale"} +1
 *
 * The Redis keys of the run are removed at the end. Exit 0 when the timeline held, 1 otherwise.
 */
import { spawn, type ChildProcess } from 'node:child_process'
import { randomUUID } from 'node:crypto'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { createInterface } from 'node:readline'
import { fileURLToPath } from 'node:url'
import { Queue, type Job } from 'bullmq'
import { Redis } from 'ioredis'
import { request } from 'undici'
import { startPayments, type Charge } from '../payments/server.js'
import { paymentsRoutes } from '../payments/routes.js'
import { parseConfig } from '../../src/config/load.js'
import { startGateway } from '../../src/server.js'
import { createLogger } from '../../src/log.js'
import { createChargeWorker, type ChargeJobData, type ChargeReply } from './worker.js'
import { isMain } from '../is-main.js'

export interface BullmqExampleOptions {
  redisUrl?: string
  /** an already running fencegate whose route fences `bullmq-job:{header.Idempotency-Key}` (see gatewayConfig); default: one started here */
  gateway?: { url: string; adminUrl: string }
  /** the payments service behind `gateway` (for reading the ledger); required with `gateway` */
  paymentsUrl?: string
  /** how worker A's process is started; default: node on blocked-worker.js beside this file */
  workerACommand?: string[]
  /** BullMQ lockDuration for both workers (default 1000 ms) */
  lockDurationMs?: number
  /** BullMQ stalledInterval for both workers (default 500 ms) */
  stalledIntervalMs?: number
  /** give up waiting for any one step after this long (default 20 s) */
  stepTimeoutMs?: number
  /** where the narrative goes; default process.stdout, null for silence */
  out?: { write(text: string): unknown } | null
}

export interface BullmqExampleResult {
  ok: boolean
  failures: string[]
  account: string
  jobId: string
  prefix: string
  /** attemptsStarted when A claimed the job */
  aToken: number | undefined
  /** every reply worker B got (normally one: 201 with token 2) */
  bReplies: ChargeReply[]
  /** what the gateway answered A after it was released */
  aReply: ChargeReply | undefined
  /** what BullMQ told A (lock renewal failures, refused moveToFailed) */
  aBullmq: string[]
  ledger: Charge[]
  /** fencegate_fencing_rejections_total{reason="stale"} during the run, when the admin listener answered */
  staleRejections: number | undefined
  /** Redis keys under the run's prefix left after cleanup (should be 0) */
  leftoverKeys: number
}

/** The gateway config the example needs: the job is the fenced resource, its id the key. */
export const gatewayConfig = (paymentsUrl: string, store = '  kind: memory\n') => `listen: 127.0.0.1:0
admin:
  listen: 127.0.0.1:0
store:
${store}${paymentsRoutes(paymentsUrl, 'bullmq-job:{header.Idempotency-Key}')}`

const staleCount = async (adminUrl: string): Promise<number | undefined> => {
  try {
    const r = await request(`${adminUrl}/metrics`)
    const text = await r.body.text()
    if (r.statusCode !== 200) return undefined
    const line = text.split('\n').find((l) => l.startsWith('fencegate_fencing_rejections_total{') && l.includes('route="payments"') && l.includes('reason="stale"'))
    return line ? Number(line.slice(line.lastIndexOf(' ') + 1)) : 0
  } catch {
    return undefined
  }
}

/** Resolves when `check` returns a value other than undefined; rejects after `ms` with `what`. */
async function until<T>(what: string, ms: number, check: () => T | undefined | Promise<T | undefined>): Promise<T> {
  const deadline = Date.now() + ms
  for (;;) {
    const v = await check()
    if (v !== undefined) return v
    if (Date.now() > deadline) throw new Error(`timed out after ${ms} ms waiting for ${what}`)
    await new Promise((r) => setTimeout(r, 25))
  }
}

/** Worker A's process and the JSON lines it printed. */
function startWorkerA(command: string[], env: Record<string, string>) {
  const child: ChildProcess = spawn(command[0], command.slice(1), { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] })
  const events: Array<Record<string, any>> = []
  let stderr = ''
  child.stderr!.on('data', (d) => { stderr += d })
  createInterface({ input: child.stdout! }).on('line', (line) => {
    try { events.push(JSON.parse(line)) } catch { stderr += `${line}\n` }
  })
  const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)))
  const find = (event: string) => events.find((e) => e.event === event)
  return {
    child, events, exited, find,
    stderr: () => stderr,
    /** the event, once printed; throws when A exited first */
    wait: (event: string, ms: number) => until(`worker A's "${event}"`, ms, () => {
      const e = find(event)
      if (e) return e
      if (child.exitCode !== null || child.signalCode !== null) throw new Error(`worker A exited (${child.exitCode ?? child.signalCode}) before "${event}": ${stderr}`)
      return undefined
    }),
  }
}

export async function runBullmqExample(o: BullmqExampleOptions = {}): Promise<BullmqExampleResult> {
  const out = o.out === undefined ? process.stdout : o.out
  const say = (text = '') => { out?.write(`${text}\n`) }
  const redisUrl = o.redisUrl ?? process.env.REDIS_URL ?? 'redis://127.0.0.1:6379'
  const lockDuration = o.lockDurationMs ?? 1000
  const stalledInterval = o.stalledIntervalMs ?? 500
  const stepMs = o.stepTimeoutMs ?? 20_000
  const run = randomUUID().slice(0, 8)
  const prefix = `fg-bullmq-${run}`
  const queueName = 'charges'
  const account = `acct-${run}`
  const jobId = `charge-${run}`
  const connection = { url: redisUrl, maxRetriesPerRequest: null }
  const dir = mkdtempSync(join(tmpdir(), 'fg-bullmq-'))
  const releaseFile = join(dir, 'release')
  const failures: string[] = []
  const check = (ok: boolean, what: string) => { say(`   ${ok ? 'ok ' : 'NOT'} ${what}`); if (!ok) failures.push(what) }

  const cleanups: Array<() => Promise<unknown>> = []
  const result: BullmqExampleResult = { ok: false, failures, account, jobId, prefix, aToken: undefined, bReplies: [], aReply: undefined, aBullmq: [], ledger: [], staleRejections: undefined, leftoverKeys: 0 }
  try {
    let gateway = o.gateway
    let paymentsUrl = o.paymentsUrl
    if (!gateway) {
      const payments = await startPayments(0)
      cleanups.push(() => payments.close())
      paymentsUrl = payments.url
      const running = await startGateway(parseConfig(gatewayConfig(payments.url), join(dir, 'fencegate.yaml')), createLogger({ write: () => true } as unknown as NodeJS.WritableStream))
      cleanups.push(() => running.close())
      gateway = { url: running.url, adminUrl: running.adminUrl }
      say(`payments service on ${payments.url}, fencegate on ${running.url} (admin ${running.adminUrl})`)
    }
    if (!paymentsUrl) throw new Error('paymentsUrl is required with gateway')
    const staleBefore = await staleCount(gateway.adminUrl)

    const queue = new Queue<ChargeJobData>(queueName, { connection, prefix })
    cleanups.push(async () => {
      await queue.obliterate({ force: true }).catch(() => {})
      await queue.close()
      // obliterate leaves a few queue-level keys (events stream, id counter, ...): remove all of the run's
      const redis = new Redis(redisUrl)
      try {
        const keys = await redis.keys(`${prefix}:*`)
        if (keys.length) await redis.del(...keys)
        result.leftoverKeys = (await redis.keys(`${prefix}:*`)).length
      } finally {
        redis.disconnect()
      }
    })
    say(`queue "${queueName}" in Redis ${redisUrl} under prefix ${prefix}; lockDuration ${lockDuration} ms, stalledInterval ${stalledInterval} ms`)
    say()

    const here = fileURLToPath(import.meta.url)
    const command = o.workerACommand ?? [process.execPath, join(here, '..', 'blocked-worker.js')]
    const a = startWorkerA(command, {
      FG_GATEWAY: gateway.url, FG_QUEUE: queueName, FG_PREFIX: prefix, FG_REDIS_URL: redisUrl, FG_RELEASE: releaseFile,
      FG_LOCK_MS: String(lockDuration), FG_STALLED_MS: String(stalledInterval),
    })
    cleanups.push(async () => {
      if (a.child.exitCode === null && a.child.signalCode === null) {
        writeFileSync(releaseFile, '') // let it out of its loop first, so it can close its connections
        const t = setTimeout(() => a.child.kill('SIGKILL'), 5_000)
        await a.exited
        clearTimeout(t)
      }
    })
    await a.wait('ready', stepMs)

    // 1. A claims the job and blocks before charging
    await queue.add('charge', { account, amount: 1250, currency: 'eur' }, { jobId, attempts: 3, backoff: { type: 'fixed', delay: 200 } })
    const claimed = await a.wait('claimed', stepMs)
    result.aToken = claimed.attemptsStarted
    say(`1. worker A (pid ${a.child.pid}) claims job ${jobId}: attemptsStarted ${claimed.attemptsStarted}; its event loop is now blocked, before it sends the charge`)

    // 2. B starts; its stalled checker finds the lock gone, moves the job back to wait, and B claims it
    const stalled: string[] = []
    const b = createChargeWorker({
      gateway: gateway.url, queue: queueName, connection, prefix, name: 'worker-b',
      lockDuration, stalledInterval, maxStalledCount: 5,
      onReply: (reply) => { result.bReplies.push(reply) },
    })
    cleanups.push(() => b.close())
    b.on('error', (e) => say(`   (worker B: ${e.message})`))
    b.on('stalled', (id) => stalled.push(id))
    const done = await until(`job ${jobId} to complete`, stepMs, async () => {
      const job = await queue.getJob(jobId)
      return job && (await job.isCompleted()) ? job as Job<ChargeJobData, ChargeReply> : undefined
    })
    say(`2. A's lock expired; the stalled checker moved the job back to wait${stalled.includes(jobId) ? ' (worker B saw "stalled")' : ''}; worker B claimed it`)
    for (const r of result.bReplies) say(`   worker B → POST /accounts/${account}/charges  Fencing-Token: ${r.token}  Idempotency-Key: ${r.jobId}  → ${r.status}${r.replayed ? ' (replayed)' : ''}`)
    say(`   job ${jobId} completed; attemptsStarted ${done.attemptsStarted}, stalledCounter ${done.stalledCounter}, attemptsMade ${done.attemptsMade}`)

    // 3. A wakes up and sends its charge with its old claim generation
    writeFileSync(releaseFile, '')
    const replied = await a.wait('reply', stepMs)
    result.aReply = replied.reply as ChargeReply
    const unblocked = a.find('unblocked')
    say(`3. worker A's event loop is released after ${unblocked?.blockedMs ?? '?'} ms; it sends its charge`)
    say(`   worker A → POST /accounts/${account}/charges  Fencing-Token: ${result.aReply.token}  Idempotency-Key: ${result.aReply.jobId}  → ${result.aReply.status}`)
    say(`   ${JSON.stringify(result.aReply.body)}`)
    let timer: NodeJS.Timeout | undefined
    const code = await Promise.race([a.exited, new Promise<'timeout'>((r) => { timer = setTimeout(() => r('timeout'), stepMs) })])
    clearTimeout(timer)
    if (code === 'timeout') a.child.kill('SIGKILL')
    result.aBullmq = a.events.filter((e) => e.event === 'bullmq').map((e) => `${e.kind}: ${e.message}`)
    for (const m of result.aBullmq) say(`   (worker A, BullMQ ${m})`)

    // 4. the ledger and the gateway's count
    const ledger = await request(`${gateway.url}/accounts/${encodeURIComponent(account)}/charges`)
    result.ledger = ((await ledger.body.json()) as { charges: Charge[] }).charges
    const staleAfter = await staleCount(gateway.adminUrl)
    result.staleRejections = staleBefore === undefined || staleAfter === undefined ? undefined : staleAfter - staleBefore
    say(`4. ledger (GET /accounts/${account}/charges): ${result.ledger.length} charge(s)`)
    for (const c of result.ledger) say(`   ${JSON.stringify(c)}`)
    if (result.staleRejections !== undefined) say(`   fencegate_fencing_rejections_total{route="payments",reason="stale"} +${result.staleRejections}`)
    say()

    const bOk = result.bReplies.filter((r) => r.status === 201)
    check(result.aToken === 1, `worker A claimed the job first, with attemptsStarted 1 (got ${result.aToken})`)
    check(bOk.length >= 1 && bOk.every((r) => r.token > 1), `worker B charged with a higher attemptsStarted (${result.bReplies.map((r) => `${r.token}→${r.status}`).join(', ') || 'no reply'})`)
    const body = result.aReply.body as Record<string, unknown>
    check(result.aReply.status === 412 && body?.type === 'urn:fencegate:problem:stale-fencing-token', `worker A's late charge was refused 412 stale-fencing-token (got ${result.aReply.status})`)
    check(result.ledger.length === 1 && result.ledger[0].idempotencyKey === jobId && Number(result.ledger[0].fencingToken) > 1, 'the ledger holds exactly one charge, the one worker B sent')
    if (result.staleRejections !== undefined) check(result.staleRejections >= 1, 'fencegate counted the stale rejection')
  } catch (e) {
    failures.push((e as Error).message)
    say(`failed: ${(e as Error).message}`)
  } finally {
    for (const c of cleanups.reverse()) await c().catch((e) => { failures.push(`cleanup: ${(e as Error).message}`) })
    rmSync(dir, { recursive: true, force: true })
  }
  if (result.leftoverKeys > 0) failures.push(`${result.leftoverKeys} Redis key(s) under ${prefix} were left behind`)
  result.ok = failures.length === 0
  say(result.ok ? 'The timeline held: the stale worker was refused at the door, one charge in the ledger.' : `The timeline did not hold:\n${failures.map((f) => `  - ${f}`).join('\n')}`)
  return result
}

if (isMain(import.meta.url)) {
  const r = await runBullmqExample()
  process.exitCode = r.ok ? 0 : 1
}
