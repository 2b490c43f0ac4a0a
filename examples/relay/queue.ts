/**
 * The relay example's job queue: a small lease-based queue over HTTP (node:http, no
 * dependencies), the lock service of docs/exactly-once.md §3.
 *
 *   POST /jobs             {"id"?, "payload"}           → 201 the job          (409: the id exists)
 *   POST /claim            {"worker", "leaseMs"?}       → 200 {"job": {"id", "payload"}, "generation", "leaseMs", "leaseUntil", "previous"?}
 *                                                          204 nothing claimable
 *   POST /jobs/{id}/renew  {"worker", "generation"}     → 200 {"leaseUntil"}    409 {"error": "stale-generation" | "lease-expired" | "done"}
 *   POST /jobs/{id}/ack    {"worker", "generation"}     → 200 {"state": "done"} 409 {"error": "stale-generation"}
 *   POST /jobs/{id}/dead-letter {"worker", "generation", "reason", "keyHash"}
 *                                                       → 200 {"state": "dead"} (never claimed again)  409 as ack
 *   GET  /jobs/{id}, GET /jobs                          → the job(s), with claims, refusals, claimable
 *
 * - A claim hands the oldest claimable job (queued, or leased with its lease expired) to a worker
 *   for `leaseMs`, under a new **claim generation**. Generations come from ONE counter for the
 *   whole queue, so they grow on every claim of a job and are also comparable across jobs: a job
 *   for an account claimed later always carries a higher token than any earlier claim, which is
 *   what a fencing token needs (one monotonic source per resource, docs/exactly-once.md §4).
 * - Renewing needs the current generation and an unexpired lease; once a lease has expired the
 *   job is claimable again and the old holder has lost it, even if nobody has claimed it yet.
 * - An ack completes the job only from the holder of the current generation. A stale ack (an older
 *   generation: the lease was taken over) is refused with 409, printed as an `ack-refused` event
 *   and kept in the job's `refusals`.
 * - Everything, the generation counter included, lives in this process's memory: restarting the
 *   queue forgets the jobs and starts the counter again at `--first-generation`. A real queue
 *   persists the counter (a restart that hands out lower tokens would get every write refused as
 *   stale by a gateway whose store remembers the higher ones).
 *
 * Every event is one JSON line on stdout; the first is {"event": "listening", "url": ...}.
 * Run alone: node dist/examples/relay/queue.js [--port 0] [--first-generation 1]
 */
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { parseArgs } from 'node:util'
import { readJson, sendJson } from './http.js'
import { isMain } from '../is-main.js'

export interface Claim { generation: number; worker: string; at: number; leaseUntil: number }
export interface Refusal { op: 'ack' | 'renew'; worker: string; generation: number; currentGeneration: number | null; reason: string; at: number }

export interface Job {
  id: string
  payload: unknown
  state: 'queued' | 'leased' | 'done' | 'dead'
  /** the generation of the latest claim (null before the first) */
  generation: number | null
  holder: string | null
  leaseUntil: number | null
  claims: Claim[]
  refusals: Refusal[]
  /** set when done: the claim that acked */
  doneBy: { worker: string; generation: number; at: number } | null
  /** set when dead-lettered: by whom and why (the client's decision case, the key hash) */
  deadLetter?: { worker: string; generation: number; reason: string; keyHash?: string; at: number }
}

export interface QueueOptions {
  port?: number
  host?: string
  /** the first claim generation handed out (default 1) */
  firstGeneration?: number
  /** default lease when a claim names none (default 30 000 ms) */
  defaultLeaseMs?: number
  /** where events go (default: JSON lines on stdout) */
  emit?: (event: Record<string, unknown>) => void
}

const JOB = /^\/jobs\/([^/?]+)(?:\/(renew|ack|dead-letter))?$/

/** Starts the queue; resolves with its URL and a close function. */
export async function startQueue(o: QueueOptions = {}): Promise<{ url: string; jobs: Map<string, Job>; close(): Promise<void> }> {
  const emit = o.emit ?? ((e) => process.stdout.write(`${JSON.stringify({ time: new Date().toISOString(), ...e })}\n`))
  const jobs = new Map<string, Job>()
  let next = o.firstGeneration ?? 1
  let seq = 0
  const defaultLease = o.defaultLeaseMs ?? 30_000

  const expired = (j: Job, now: number) => j.state === 'leased' && j.leaseUntil !== null && j.leaseUntil <= now
  const view = (j: Job, now = Date.now()) => ({
    ...j,
    claimable: j.state === 'queued' || expired(j, now),
    leaseRemainingMs: j.state === 'leased' && j.leaseUntil !== null ? Math.max(0, j.leaseUntil - now) : null,
  })

  const refuse = (res: http.ServerResponse, j: Job, r: Omit<Refusal, 'at' | 'currentGeneration'>) => {
    const refusal: Refusal = { ...r, currentGeneration: j.generation, at: Date.now() }
    j.refusals.push(refusal)
    emit({ event: `${r.op}-refused`, job: j.id, worker: r.worker, generation: r.generation, currentGeneration: j.generation, reason: r.reason })
    sendJson(res, 409, { error: r.reason, job: j.id, generation: r.generation, currentGeneration: j.generation, holder: j.holder, state: j.state })
  }

  const server = http.createServer(async (req, res) => {
    try {
      const url = req.url ?? '/'
      const now = Date.now()
      if (req.method === 'GET' && url === '/jobs') return sendJson(res, 200, { jobs: [...jobs.values()].map((j) => view(j, now)) })
      if (req.method === 'POST' && url === '/jobs') {
        const b = (await readJson(req)) ?? {}
        const id = b.id === undefined ? `job-${++seq}` : String(b.id)
        if (jobs.has(id)) return sendJson(res, 409, { error: 'exists', job: id })
        const j: Job = { id, payload: b.payload ?? null, state: 'queued', generation: null, holder: null, leaseUntil: null, claims: [], refusals: [], doneBy: null }
        jobs.set(id, j)
        emit({ event: 'enqueued', job: id })
        return sendJson(res, 201, view(j, now))
      }
      if (req.method === 'POST' && url === '/claim') {
        const b = (await readJson(req)) ?? {}
        const worker = String(b.worker ?? 'anonymous')
        const leaseMs = Number.isSafeInteger(b.leaseMs) && b.leaseMs > 0 ? b.leaseMs as number : defaultLease
        const j = [...jobs.values()].find((x) => x.state === 'queued' || expired(x, now))
        if (!j) { res.writeHead(204); res.end(); return }
        const previous = j.state === 'leased' ? { worker: j.holder, generation: j.generation, expiredMsAgo: now - (j.leaseUntil ?? now) } : undefined
        if (previous) emit({ event: 'lease-expired', job: j.id, worker: previous.worker, generation: previous.generation, expiredMsAgo: previous.expiredMsAgo })
        const generation = next++
        Object.assign(j, { state: 'leased', generation, holder: worker, leaseUntil: now + leaseMs })
        j.claims.push({ generation, worker, at: now, leaseUntil: now + leaseMs })
        emit({ event: 'claimed', job: j.id, worker, generation, leaseMs, ...(previous ? { previous } : {}) })
        return sendJson(res, 200, { job: { id: j.id, payload: j.payload }, generation, leaseMs, leaseUntil: j.leaseUntil, ...(previous ? { previous } : {}) })
      }
      const m = JOB.exec(url)
      if (m) {
        let id: string
        try { id = decodeURIComponent(m[1]) } catch { return sendJson(res, 400, { error: 'bad-id' }) }
        const j = jobs.get(id)
        if (!j) return sendJson(res, 404, { error: 'no-such-job', job: id })
        if (req.method === 'GET' && !m[2]) return sendJson(res, 200, view(j, now))
        if (req.method === 'POST' && m[2]) {
          const b = (await readJson(req)) ?? {}
          const worker = String(b.worker ?? 'anonymous')
          const generation = Number(b.generation)
          if (!Number.isSafeInteger(generation)) return sendJson(res, 400, { error: 'generation must be an integer' })
          if (m[2] === 'renew') {
            if (j.state === 'done') return refuse(res, j, { op: 'renew', worker, generation, reason: 'done' })
            if (generation !== j.generation) return refuse(res, j, { op: 'renew', worker, generation, reason: 'stale-generation' })
            if (expired(j, now)) return refuse(res, j, { op: 'renew', worker, generation, reason: 'lease-expired' })
            const leaseMs = Number.isSafeInteger(b.leaseMs) && b.leaseMs > 0 ? b.leaseMs as number : (j.claims.at(-1)!.leaseUntil - j.claims.at(-1)!.at)
            j.leaseUntil = now + leaseMs
            return sendJson(res, 200, { job: j.id, generation, leaseUntil: j.leaseUntil })
          }
          if (m[2] === 'dead-letter') {
            if (generation !== j.generation) return refuse(res, j, { op: 'ack', worker, generation, reason: 'stale-generation' })
            Object.assign(j, { state: 'dead', holder: null, leaseUntil: null, deadLetter: { worker, generation, reason: String(b.reason ?? ''), keyHash: b.keyHash, at: now } })
            emit({ event: 'dead-lettered', job: j.id, worker, generation, reason: b.reason, keyHash: b.keyHash })
            return sendJson(res, 200, { job: j.id, state: 'dead', generation })
          }
          // ack: only the current generation completes the job (its lease may have run out as long
          // as nobody claimed the job since: the generation is still the current one)
          if (generation !== j.generation) return refuse(res, j, { op: 'ack', worker, generation, reason: 'stale-generation' })
          if (j.state === 'done') return sendJson(res, 200, { job: j.id, state: 'done', generation, duplicate: true })
          Object.assign(j, { state: 'done', holder: null, leaseUntil: null, doneBy: { worker, generation, at: now } })
          emit({ event: 'acked', job: j.id, worker, generation })
          return sendJson(res, 200, { job: j.id, state: 'done', generation })
        }
      }
      sendJson(res, 404, { error: 'not-found', try: ['POST /jobs', 'POST /claim', 'POST /jobs/{id}/renew', 'POST /jobs/{id}/ack', 'GET /jobs/{id}'] })
    } catch (e) {
      sendJson(res, 400, { error: 'bad-request', detail: (e as Error).message })
    }
  })
  await new Promise<void>((resolve, reject) => { server.once('error', reject); server.listen(o.port ?? 0, o.host ?? '127.0.0.1', resolve) })
  const a = server.address() as AddressInfo
  const url = `http://${a.address}:${a.port}`
  emit({ event: 'listening', url })
  return { url, jobs, close: () => new Promise((r) => { server.closeAllConnections(); server.close(() => r()) }) }
}

if (isMain(import.meta.url)) {
  const { values } = parseArgs({ options: { port: { type: 'string' }, 'first-generation': { type: 'string' } } })
  const q = await startQueue({ port: Number(values.port ?? process.env.RELAY_QUEUE_PORT ?? 0), firstGeneration: Number(values['first-generation'] ?? 1) })
  const stop = () => { q.close().then(() => process.exit(0)) }
  process.once('SIGTERM', stop)
  process.once('SIGINT', stop)
}
