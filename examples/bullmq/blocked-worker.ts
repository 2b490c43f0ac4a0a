/**
 * Worker A of the BullMQ example, as its own process: a charge worker (worker.ts) whose event
 * loop is blocked right after it claims a job and BEFORE it sends the charge — the way a long
 * synchronous computation, a GC pause or a stuck native call blocks a real one. While blocked it
 * cannot renew the job's lock, so the lock expires, another worker's stalled checker moves the
 * job back to wait, and another worker claims it with a higher attemptsStarted. When the file
 * FG_RELEASE appears (or FG_BLOCK_MAX_MS has passed) the loop ends and A sends its charge with
 * the token it was given — now stale.
 *
 * It handles one job, then closes and exits. Every step is one JSON line on stdout:
 *   {"event":"ready"}                                     connected, waiting for a job
 *   {"event":"claimed","jobId":…,"attemptsStarted":1}     event loop blocked from here
 *   {"event":"unblocked","jobId":…,"blockedMs":…}
 *   {"event":"reply","reply":{…ChargeReply}}             what the gateway answered
 *   {"event":"bullmq","kind":"error"|"lockRenewalFailed","message":…}   what BullMQ said
 *
 * Environment: FG_GATEWAY, FG_QUEUE, FG_RELEASE (all required), FG_REDIS_URL (default
 * redis://127.0.0.1:6379), FG_PREFIX (default "bull"), FG_LOCK_MS, FG_STALLED_MS,
 * FG_BLOCK_MAX_MS (default 60000). Run: node dist/examples/bullmq/blocked-worker.js
 */
import { existsSync } from 'node:fs'
import { createChargeWorker, StaleClaimError } from './worker.js'

const env = (name: string): string => {
  const v = process.env[name]
  if (!v) throw new Error(`${name} is required`)
  return v
}
const optionalNumber = (name: string): number | undefined => (process.env[name] ? Number(process.env[name]) : undefined)

const emit = (event: string, fields: Record<string, unknown> = {}) => process.stdout.write(`${JSON.stringify({ event, ...fields })}\n`)

const release = env('FG_RELEASE')
const blockMaxMs = optionalNumber('FG_BLOCK_MAX_MS') ?? 60_000
const nap = new Int32Array(new SharedArrayBuffer(4))

/** Blocks this thread (no timers, no I/O, no lock renewal) until the release file exists. */
function blockEventLoop(): number {
  const start = Date.now()
  while (!existsSync(release) && Date.now() - start < blockMaxMs) Atomics.wait(nap, 0, 0, 10) // sleeps without spinning a core
  return Date.now() - start
}

let handled = false
const worker = createChargeWorker({
  gateway: env('FG_GATEWAY'),
  queue: env('FG_QUEUE'),
  connection: { url: process.env.FG_REDIS_URL ?? 'redis://127.0.0.1:6379', maxRetriesPerRequest: null },
  prefix: process.env.FG_PREFIX || undefined,
  name: 'worker-a',
  lockDuration: optionalNumber('FG_LOCK_MS'),
  stalledInterval: optionalNumber('FG_STALLED_MS'),
  beforeCharge: (job) => {
    emit('claimed', { jobId: job.id, attemptsStarted: job.attemptsStarted })
    const blockedMs = blockEventLoop()
    emit('unblocked', { jobId: job.id, blockedMs })
  },
  onReply: (reply) => { handled = true; emit('reply', { reply }) },
})
worker.on('error', (e) => emit('bullmq', { kind: 'error', message: e.message }))
worker.on('lockRenewalFailed', (ids) => emit('bullmq', { kind: 'lockRenewalFailed', message: `could not renew the lock of ${ids.join(', ')}` }))
worker.on('failed', (job, e) => {
  if (e instanceof StaleClaimError) emit('bullmq', { kind: 'failed', message: e.message })
})

await worker.waitUntilReady()
emit('ready')
// one job, then leave: poll rather than hook 'completed'/'failed', which a lost lock may never emit
while (!handled) await new Promise((r) => setTimeout(r, 20))
await new Promise((r) => setTimeout(r, 100)) // let BullMQ try (and fail) to finish the job it lost
await worker.close()
process.exit(0)
