/**
 * A seedable history checker for fencegate (issue "Promises that hold in the corners").
 *
 * - `Rng`: a small seeded PRNG (sfc32, seeded through splitmix32). `hostileSeed()` takes
 *   HOSTILE_SEED from the environment, else a random one; tests print it when they fail.
 * - `Leases`: the lease service of the simulation. Each resource has a holder and a claim
 *   generation; taking a lease (over) hands out generation N+1, which is the fencing token.
 * - `startLedger()`: the upstream, a real node:http server that applies every write it receives
 *   (deliberately naive, like the bundled payments service) and records each applied effect:
 *   resource, token, idempotency key, body, and the exact bytes it answered. The request header
 *   `x-ledger-fault` makes it misbehave: answer slowly, apply late, reset before or after
 *   applying, answer 503 (not done) or 500 (done, failed).
 * - `runWorkload()`: simulated workers that take leases, write with their generation as the
 *   fencing token and a fresh idempotency key per write, pause past their lease (a GC pause),
 *   lose acks and retry with the same key, abort requests mid-flight, send a request twice at
 *   once. Every attempt and what came back is recorded.
 * - `sendAttempt()`: one request as the workload sends it, for a test's own retries (a client
 *   coming back later with a key it was answered for), checked with the rest.
 * - `checkHistory()`: verifies the recorded history against the ledger:
 *     stale-write-applied        per resource, the applied tokens never decrease
 *     key-applied-twice          under `unknownOutcome: reject` no key is applied twice
 *     duplicate-not-counted      under `retry`, every extra application is counted in
 *                                fencegate_duplicate_forwards_total (and none under `reject`)
 *     replay-differs             every replay is byte-identical to the key's first response
 *     replay-without-effect      a replay of a response the upstream never gave
 *     answered-twice             at most one non-replayed stored answer per key
 *     no-effect-for-answer       every non-replayed 2xx (and stored 500) is exactly one effect
 *     effect-answered-twice      ... and no effect is answered for twice
 *     refused-but-applied        a key whose every attempt was refused before forwarding has
 *                                no effect
 *     bad-stale-refusal          a 412 names a highest token above the refused one
 */
import http from 'node:http'
import type { AddressInfo, Socket } from 'node:net'
import { sleep, until } from '../helpers/wait.js'
import { Agent, request } from 'undici'

// ------------------------------------------------------------------------------------ PRNG

/** HOSTILE_SEED (an unsigned 32-bit integer) when set, else a random seed. */
export function hostileSeed(): number {
  const env = process.env.HOSTILE_SEED
  if (env !== undefined && env !== '') {
    const n = Number(env)
    if (!Number.isInteger(n) || n < 0 || n > 0xffffffff) throw new Error(`HOSTILE_SEED must be an integer 0..4294967295, got ${JSON.stringify(env)}`)
    return n
  }
  return Math.floor(Math.random() * 2 ** 32) >>> 0
}

function splitmix32(seed: number): () => number {
  let a = seed >>> 0
  return () => {
    a = (a + 0x9e3779b9) | 0
    let t = a ^ (a >>> 16)
    t = Math.imul(t, 0x21f0aaad)
    t ^= t >>> 15
    t = Math.imul(t, 0x735a2d97)
    return (t ^ (t >>> 15)) >>> 0
  }
}

/** sfc32: small, fast, good enough for choosing faults; the same seed gives the same choices. */
export class Rng {
  #a: number; #b: number; #c: number; #d: number
  constructor(readonly seed: number) {
    const s = splitmix32(seed)
    this.#a = s(); this.#b = s(); this.#c = s(); this.#d = s()
    for (let i = 0; i < 12; i++) this.next()
  }

  /** uniform in [0, 1) */
  next(): number {
    let a = this.#a | 0, b = this.#b | 0, c = this.#c | 0, d = this.#d | 0
    const t = (((a + b) | 0) + d) | 0
    d = (d + 1) | 0
    a = b ^ (b >>> 9)
    b = (c + (c << 3)) | 0
    c = (c << 21) | (c >>> 11)
    c = (c + t) | 0
    this.#a = a; this.#b = b; this.#c = c; this.#d = d
    return (t >>> 0) / 4294967296
  }

  /** integer in [lo, hi] */
  int(lo: number, hi: number): number { return lo + Math.floor(this.next() * (hi - lo + 1)) }
  chance(p: number): boolean { return this.next() < p }
  pick<T>(xs: readonly T[]): T { return xs[Math.floor(this.next() * xs.length)] }
  weighted<T>(entries: readonly (readonly [T, number])[]): T {
    const total = entries.reduce((s, [, w]) => s + w, 0)
    let x = this.next() * total
    for (const [v, w] of entries) { if ((x -= w) < 0) return v }
    return entries[entries.length - 1][0]
  }

  /** An independent stream for `label` (a worker, a store): its choices do not depend on the others'. */
  fork(label: number): Rng { return new Rng((this.seed ^ Math.imul(label + 1, 0x9e3779b1)) >>> 0) }
}

// ---------------------------------------------------------------------------------- leases

export interface Lease { resource: string; worker: number; gen: bigint }

/**
 * The lease service: one holder per resource at a time, for `ms`. Every grant (a takeover, or
 * the same worker taking it again) hands out the next claim generation, the fencing token.
 * Generations start just below 2^53, so tokens cross the point where JS numbers stop being exact.
 */
export class Leases {
  readonly #m = new Map<string, { gen: bigint; holder: number; until: number }>()
  constructor(readonly ms: number, readonly base = 9007199254740990n) {}

  acquire(resource: string, worker: number): Lease | undefined {
    const now = Date.now()
    const e = this.#m.get(resource)
    if (e && e.until > now && e.holder !== worker) return undefined
    const gen = e ? e.gen + 1n : this.base
    this.#m.set(resource, { gen, holder: worker, until: now + this.ms })
    return { resource, worker, gen }
  }

  /** What a careful worker checks before each write (and then pauses anyway). */
  valid(l: Lease): boolean {
    const e = this.#m.get(l.resource)
    return !!e && e.gen === l.gen && e.until > Date.now()
  }

  release(l: Lease): void {
    const e = this.#m.get(l.resource)
    if (e && e.gen === l.gen) e.until = 0
  }
}

// ---------------------------------------------------------------------------------- ledger

export interface Effect {
  /** application order, from 1 */
  seq: number
  at: number
  route: string
  /** `${route}:${res}` from the path /ROUTE/RES/... */
  resource: string
  token: string
  key: string
  body: string
  fault: string
  /** the status and exact body bytes the ledger answered (or would have, before a reset) */
  status: number
  response: Buffer
}

export interface Ledger {
  url: string
  effects: Effect[]
  /** requests being handled (read, delayed, applied and waiting to answer) */
  readonly pending: number
  /** requests applied whose answer is still being held back (fault `slow`) */
  readonly holding: number
  /** resolves once no request is being handled (late applies done) */
  idle(timeoutMs?: number): Promise<void>
  close(): Promise<void>
}

/**
 * Faults, by the request header `x-ledger-fault: NAME[:MS]`:
 *   none            apply, answer 201
 *   slow:MS         apply, answer 201 after MS
 *   late:MS         wait MS, apply, answer 201 (the check-to-apply window)
 *   reset-after     apply, then reset the connection without answering
 *   reset-before    reset the connection without applying
 *   busy            answer 503 without applying (not done: the claim is released)
 *   fail            apply, answer 500 (done, failed: stored and replayed)
 * The answer is JSON {effect, resource, token, key, status} with `x-ledger-effect: SEQ`.
 */
export async function startLedger(): Promise<Ledger> {
  const effects: Effect[] = []
  const sockets = new Set<Socket>()
  let pending = 0
  let holding = 0
  const server = http.createServer(async (req, res) => {
    pending++
    try {
      const chunks: Buffer[] = []
      try {
        for await (const c of req) chunks.push(c as Buffer)
      } catch {
        return // cut off mid-body: nothing applied
      }
      if (req.destroyed && !req.complete) return
      const fault = String(req.headers['x-ledger-fault'] ?? 'none')
      const [kind, arg] = fault.split(':')
      const ms = Number(arg ?? 0)
      const m = /^\/([^/?]+)\/([^/?]+)/.exec(req.url ?? '')
      const route = m?.[1] ?? '?'
      const resource = `${route}:${m?.[2] ?? '?'}`
      const token = String(req.headers['fencing-token'] ?? '')
      const key = String(req.headers['idempotency-key'] ?? '')
      const apply = (status: number): Effect => {
        const seq = effects.length + 1
        const response = Buffer.from(JSON.stringify({ effect: seq, resource, token, key, status }))
        const e: Effect = { seq, at: Date.now(), route, resource, token, key, body: Buffer.concat(chunks).toString('utf8'), fault, status, response }
        effects.push(e)
        return e
      }
      const answer = (e: Effect) => {
        if (res.destroyed) return
        res.writeHead(e.status, { 'content-type': 'application/json', 'content-length': e.response.length, 'x-ledger-effect': String(e.seq) })
        res.end(e.response)
      }
      switch (kind) {
        case 'busy': {
          const b = Buffer.from('{"busy":true}')
          res.writeHead(503, { 'content-type': 'application/json', 'content-length': b.length, 'retry-after': '0' })
          res.end(b)
          return
        }
        case 'reset-before':
          req.socket.resetAndDestroy()
          return
        case 'reset-after':
          apply(201)
          req.socket.resetAndDestroy()
          return
        case 'late': {
          await sleep(ms)
          answer(apply(201))
          return
        }
        case 'slow': {
          const e = apply(201)
          holding++
          try { await sleep(ms) } finally { holding-- }
          answer(e)
          return
        }
        case 'fail':
          answer(apply(500))
          return
        default:
          answer(apply(201))
      }
    } finally {
      pending--
    }
  })
  server.on('connection', (s) => { sockets.add(s); s.once('close', () => sockets.delete(s)) })
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r))
  const port = (server.address() as AddressInfo).port
  return {
    url: `http://127.0.0.1:${port}`,
    effects,
    get pending() { return pending },
    get holding() { return holding },
    idle: async (timeoutMs = 10_000) => {
      await until(() => pending === 0, { timeoutMs, intervalMs: 10, message: () => `the ledger to finish its requests (${pending} still in hand)` })
    },
    close: () => new Promise((r) => { for (const s of sockets) s.destroy(); server.close(() => r()) }),
  }
}

// -------------------------------------------------------------------------------- workload

export interface Attempt {
  worker: number
  route: string
  /** `${route}:${res}`, as the ledger names it */
  resource: string
  token: string
  key: string
  attempt: number
  fault: string
  /** the client gave up on the request this many ms after sending it */
  abortAfter?: number
  start: number
  end: number
  /** 0 when no response came (client abort, connection error) */
  status: number
  error?: string
  replayed: boolean
  body: Buffer
  headers: Record<string, string | string[] | undefined>
  /** the problem type's last part, when the gateway answered with a problem */
  problem?: string
  /** `reason` of a 409 outcome-unknown */
  reason?: string
  highestToken?: string
  /** the worker dropped this answer on the floor (a lost ack) and retried */
  lostAck?: boolean
  /** sent at the same time as the attempt before it, with the same key */
  double?: boolean
}

export interface FaultSpec { name: string; weight: number; ms?: [number, number] }

export interface WorkloadOptions {
  /** the gateway's (or, for the self-test, the ledger's) base URL; several: each attempt picks one (replicas behind a balancer) */
  url: string | string[]
  /** route names; requests go to /ROUTE/RES/charge */
  routes: string[]
  resources: number
  workers: number
  /** the number of keys (writes) to make; with `until`, the least */
  ops: number
  /** keep making writes (past `ops`) until this returns true */
  until?: () => boolean
  rng: Rng
  leases: Leases
  faults: FaultSpec[]
  /** per attempt: abort it 1-40 ms after sending */
  pAbort: number
  /** per write: pause past the worker's lease after checking it */
  pPause: number
  /** per answer: drop it and retry with the same key */
  pLostAck: number
  /** per lease, after its writes: give it back (else it runs out); default 0.7 */
  pRelease?: number
  /** per attempt: send the same request twice at once (a client retrying too early); default 0 */
  pDouble?: number
  maxAttempts: number
  /** give up on a key after this long (a gateway being restarted does not count as attempts) */
  keyDeadlineMs: number
  /** keys are `${keyPrefix}-w${worker}-${n}` */
  keyPrefix: string
  dispatcher: Agent
}

const PROBLEM_PREFIX = 'urn:fencegate:problem:'

function parseProblem(a: Attempt): void {
  const ct = String(a.headers['content-type'] ?? '')
  if (!ct.startsWith('application/problem+json')) return
  try {
    const p = JSON.parse(a.body.toString('utf8'))
    if (typeof p.type === 'string' && p.type.startsWith(PROBLEM_PREFIX)) a.problem = p.type.slice(PROBLEM_PREFIX.length)
    else a.problem = String(p.type)
    if (p.reason !== undefined) a.reason = String(p.reason)
    if (p.highestToken !== undefined) a.highestToken = String(p.highestToken)
  } catch {
    a.problem = 'unparseable-problem'
  }
}

const refused = (e: unknown) => {
  const err = e as { code?: string; cause?: { code?: string } }
  return err.code === 'ECONNREFUSED' || err.cause?.code === 'ECONNREFUSED'
}

/** One request of the workload: what it writes, and how (a fault for the ledger, a client giving up after `abortAfter` ms). */
export interface AttemptSpec {
  worker: number
  route: string
  res: string
  token: string
  key: string
  body: string
  attempt: number
  fault: string
  abortAfter?: number
}

/**
 * Sends one attempt (POST BASE/ROUTE/RES/charge with its fencing token, idempotency key and
 * ledger fault) and records what came back; a test may send its own attempts this way (a client
 * retrying a key later) and check them with the workload's.
 */
export async function sendAttempt(base: string, s: AttemptSpec, dispatcher: Agent): Promise<Attempt> {
  const { worker, route, res, token, key, body, attempt, fault, abortAfter } = s
  const a: Attempt = {
    worker, route, resource: `${route}:${res}`, token, key, attempt, fault, abortAfter,
    start: Date.now(), end: 0, status: 0, replayed: false, body: Buffer.alloc(0), headers: {},
  }
  const ac = abortAfter !== undefined ? new AbortController() : undefined
  const timer = ac ? setTimeout(() => ac.abort(), abortAfter) : undefined
  try {
    const r = await request(`${base}/${route}/${res}/charge`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        'fencing-token': token,
        'idempotency-key': key,
        'x-ledger-fault': fault,
        'x-request-id': `${key}.${attempt}`,
      },
      body,
      signal: ac?.signal,
      dispatcher,
    })
    a.headers = r.headers
    a.body = Buffer.from(await r.body.arrayBuffer())
    a.status = r.statusCode
    a.replayed = r.headers['idempotent-replayed'] === 'true'
    parseProblem(a)
  } catch (e) {
    const err = e as Error & { code?: string }
    a.status = 0
    a.error = `${err.code ?? err.name}: ${err.message}`
    if (refused(e)) a.error = `ECONNREFUSED: ${err.message}`
  } finally {
    clearTimeout(timer)
    a.end = Date.now()
  }
  return a
}

/** Runs the workers until `ops` keys are written (and `until()`); resolves with every attempt made. */
export async function runWorkload(o: WorkloadOptions): Promise<Attempt[]> {
  const history: Attempt[] = []
  let taken = 0
  const more = () => taken < o.ops || (o.until !== undefined && !o.until())
  const take = () => { if (!more()) return false; taken++; return true }

  const send = async (w: number, rng: Rng, route: string, res: string, token: string, key: string, body: string, attempt: number): Promise<Attempt> => {
    const f = rng.weighted(o.faults.map((x) => [x, x.weight] as const))
    const fault = f.ms ? `${f.name}:${rng.int(f.ms[0], f.ms[1])}` : f.name
    const abortAfter = rng.chance(o.pAbort) ? rng.int(1, 40) : undefined
    const base = typeof o.url === 'string' ? o.url : rng.pick(o.url)
    return sendAttempt(base, { worker: w, route, res, token, key, body, attempt, fault, abortAfter }, o.dispatcher)
  }

  /** Writes one key until it is done, refused as stale, known unknown, or given up. */
  const writeKey = async (w: number, rng: Rng, route: string, res: string, token: string, key: string): Promise<'done' | 'stale' | 'final' | 'gave-up'> => {
    const body = JSON.stringify({ worker: w, key, amount: rng.int(1, 10_000), currency: 'eur' })
    const started = Date.now()
    for (let attempt = 1, counted = 0; ; attempt++) {
      let a: Attempt
      if (rng.chance(o.pDouble ?? 0)) {
        // the same request twice at once: one of them is in flight when the other is claimed
        const both = await Promise.all([send(w, rng, route, res, token, key, body, attempt), send(w, rng, route, res, token, key, body, attempt)])
        both[1].double = true
        history.push(...both)
        a = both[0]
      } else {
        a = await send(w, rng, route, res, token, key, body, attempt)
        history.push(a)
      }
      if (!a.error?.startsWith('ECONNREFUSED')) counted++
      const timeUp = counted >= o.maxAttempts || Date.now() - started > o.keyDeadlineMs
      const answered = a.status >= 200 && a.status < 300 || (a.status === 500 && a.problem === undefined)
      if (answered) {
        if (!timeUp && rng.chance(o.pLostAck)) { a.lostAck = true; await sleep(rng.int(0, 20)); continue }
        return 'done'
      }
      if (a.status === 412) return 'stale'
      if (a.status === 409 && a.problem !== 'request-in-flight') return 'final' // outcome-unknown, response-not-stored
      if (a.status === 422 || a.status === 400 || a.status === 428 || a.status === 404) return 'final'
      if (timeUp) return 'gave-up'
      // 409 in flight, 429/502/503/504, or no answer: retry the same request with the same key
      await sleep(a.problem === 'request-in-flight' ? rng.int(100, 300) : a.error?.startsWith('ECONNREFUSED') ? rng.int(80, 150) : rng.int(5, 60))
    }
  }

  const worker = async (w: number) => {
    const rng = o.rng.fork(w)
    let n = 0
    while (more()) {
      const route = rng.pick(o.routes)
      const res = `r${rng.int(1, o.resources)}`
      const lease = o.leases.acquire(`${route}:${res}`, w)
      if (!lease) { await sleep(rng.int(2, 15)); continue }
      const writes = rng.int(1, 4)
      for (let i = 0; i < writes; i++) {
        if (!o.leases.valid(lease)) break // a careful worker checks its lease before writing ...
        if (!take()) break
        if (rng.chance(o.pPause)) await sleep(o.leases.ms + rng.int(20, 150)) // ... and then pauses past it
        const out = await writeKey(w, rng, route, res, String(lease.gen), `${o.keyPrefix}-w${w}-${n++}`)
        if (out === 'stale') break // the lease was lost: take a new one
        if (rng.chance(0.2)) await sleep(rng.int(1, 10))
      }
      if (rng.chance(o.pRelease ?? 0.7)) o.leases.release(lease)
    }
  }
  await Promise.all(Array.from({ length: o.workers }, (_, w) => worker(w)))
  return history
}

// --------------------------------------------------------------------------------- checker

export type Policy = 'reject' | 'retry'

export interface Violation { kind: string; detail: string }

export interface Report {
  violations: Violation[]
  stats: Record<string, number>
}

export interface CheckOptions {
  /** unknownOutcome per route name */
  policies: Record<string, Policy>
  /** fencegate_duplicate_forwards_total per route, when known (one gateway process) */
  duplicateForwards?: Record<string, number>
}

/** Statuses the gateway treats as "not done": the claim is released, nothing is stored. */
const RELEASED = new Set([429, 502, 503, 504])
/** Problems that mean nothing of this attempt was forwarded. */
const REFUSALS = new Set([
  'stale-fencing-token', 'fencing-token-required', 'fencing-token-malformed', 'fencing-resource-missing',
  'idempotency-key-required', 'idempotency-key-malformed', 'idempotency-key-reused', 'request-in-flight',
  'outcome-unknown', 'response-not-stored', 'serialize-timeout', 'store-unavailable', 'store-state-lost', 'no-route',
])
/** Response headers a replay may legitimately differ in from the first answer. */
const PER_RESPONSE = new Set(['via', 'x-request-id', 'idempotent-replayed', 'connection', 'keep-alive', 'transfer-encoding'])

const endToEnd = (h: Attempt['headers']) =>
  JSON.stringify(Object.entries(h).filter(([k]) => !PER_RESPONSE.has(k.toLowerCase())).map(([k, v]) => [k.toLowerCase(), v]).sort())

/** An answer that came from the upstream (not a gateway problem), not a replay, and stored for the key. */
const storedAnswer = (a: Attempt) => a.status > 0 && a.problem === undefined && !a.replayed && !RELEASED.has(a.status)

const show = (a: Attempt) => `${a.key}#${a.attempt}${a.double ? 'b' : ''} token ${a.token} fault ${a.fault}${a.abortAfter !== undefined ? ` abort@${a.abortAfter}ms` : ''} -> ${a.status || a.error}${a.replayed ? ' (replay)' : ''}${a.problem ? ` ${a.problem}` : ''}`

export function checkHistory(history: Attempt[], effects: Effect[], opts: CheckOptions): Report {
  const violations: Violation[] = []
  const v = (kind: string, detail: string) => violations.push({ kind, detail })

  // 1. no stale write applied: per resource, the applied tokens never decrease
  const highest = new Map<string, Effect>()
  for (const e of [...effects].sort((x, y) => x.seq - y.seq)) {
    const h = highest.get(e.resource)
    if (h && BigInt(e.token) < BigInt(h.token)) {
      v('stale-write-applied', `${e.resource}: effect #${e.seq} (key ${e.key}, token ${e.token}) applied after effect #${h.seq} (key ${h.key}, token ${h.token})`)
    } else {
      highest.set(e.resource, e)
    }
  }

  // 2. applications per key
  const byKey = new Map<string, Effect[]>()
  for (const e of effects) {
    let l = byKey.get(e.key)
    if (!l) byKey.set(e.key, (l = []))
    l.push(e)
  }
  const extras: Record<string, number> = {}
  for (const [key, l] of byKey) {
    const route = l[0].route
    if (l.length < 2) continue
    if ((opts.policies[route] ?? 'reject') === 'reject') {
      v('key-applied-twice', `${route}: key ${key} applied ${l.length} times (effects ${l.map((e) => `#${e.seq} ${e.fault}`).join(', ')})`)
    } else {
      extras[route] = (extras[route] ?? 0) + l.length - 1
    }
  }
  if (opts.duplicateForwards) {
    for (const [route, policy] of Object.entries(opts.policies)) {
      const counted = opts.duplicateForwards[route] ?? 0
      if (policy === 'retry' && (extras[route] ?? 0) > counted) {
        v('duplicate-not-counted', `${route}: ${extras[route]} extra applications, fencegate_duplicate_forwards_total says ${counted}`)
      }
      if (policy === 'reject' && counted > 0) v('duplicate-not-counted', `${route}: unknownOutcome reject, yet fencegate_duplicate_forwards_total is ${counted}`)
    }
  }

  // 3. answers and replays per key
  const attemptsByKey = new Map<string, Attempt[]>()
  for (const a of history) {
    let l = attemptsByKey.get(a.key)
    if (!l) attemptsByKey.set(a.key, (l = []))
    l.push(a)
  }
  const effectBySeq = new Map(effects.map((e) => [e.seq, e]))
  const answeredFor = new Map<number, Attempt>()
  for (const [key, attempts] of attemptsByKey) {
    const stored = attempts.filter(storedAnswer)
    if (stored.length > 1) v('answered-twice', `key ${key}: ${stored.length} non-replayed stored answers: ${stored.map(show).join('; ')}`)
    const first = stored[0]
    const replays = attempts.filter((a) => a.replayed)
    for (const r of replays) {
      if (first) {
        if (r.status !== first.status || !r.body.equals(first.body) || endToEnd(r.headers) !== endToEnd(first.headers)) {
          v('replay-differs', `key ${key}: ${show(r)} differs from ${show(first)}: ${r.status} ${r.body.toString()} ${endToEnd(r.headers)} vs ${first.status} ${first.body.toString()} ${endToEnd(first.headers)}`)
        }
      } else {
        const mine = byKey.get(key) ?? []
        if (!mine.some((e) => e.status === r.status && e.response.equals(r.body))) {
          v('replay-without-effect', `key ${key}: ${show(r)} replays ${r.body.toString()}, which the ledger never answered for this key (effects ${mine.map((e) => `#${e.seq}`).join(', ') || 'none'})`)
        }
        if (!r.body.equals(replays[0].body) || r.status !== replays[0].status || endToEnd(r.headers) !== endToEnd(replays[0].headers)) {
          v('replay-differs', `key ${key}: replays differ: ${show(r)} vs ${show(replays[0])}`)
        }
      }
    }
    // 4. every non-replayed 2xx (or stored 500) is exactly one effect
    for (const a of stored) {
      if (!(a.status >= 200 && a.status < 300) && a.status !== 500) continue
      const seq = Number(a.headers['x-ledger-effect'])
      const e = effectBySeq.get(seq)
      if (!e) { v('no-effect-for-answer', `${show(a)}: no effect #${a.headers['x-ledger-effect']} in the ledger`); continue }
      if (e.key !== a.key || e.token !== a.token || e.resource !== a.resource || !e.response.equals(a.body)) {
        v('no-effect-for-answer', `${show(a)}: answered with effect #${seq}, which is ${e.key} token ${e.token} on ${e.resource}: ${e.response.toString()}`)
      }
      const other = answeredFor.get(seq)
      if (other) v('effect-answered-twice', `effect #${seq} answered to ${show(other)} and to ${show(a)}`)
      answeredFor.set(seq, a)
    }
    // 5. refused every time, never applied
    if (attempts.every((a) => a.problem !== undefined && REFUSALS.has(a.problem)) && byKey.has(key)) {
      v('refused-but-applied', `key ${key}: every attempt refused (${attempts.map(show).join('; ')}), yet applied: ${byKey.get(key)!.map((e) => `#${e.seq}`).join(', ')}`)
    }
  }
  // 6. a 412 is only given to a token below the mark
  for (const a of history) {
    if (a.status !== 412) continue
    if (a.highestToken === undefined || !(BigInt(a.token) < BigInt(a.highestToken))) v('bad-stale-refusal', `${show(a)}: highestToken ${a.highestToken}`)
  }

  const count = (f: (a: Attempt) => boolean) => history.filter(f).length
  const stats: Record<string, number> = {
    attempts: history.length,
    keys: attemptsByKey.size,
    effects: effects.length,
    answered2xx: count((a) => storedAnswer(a) && a.status < 300),
    replays: count((a) => a.replayed),
    lostAcks: count((a) => !!a.lostAck),
    doubles: count((a) => !!a.double),
    stale412: count((a) => a.status === 412),
    inFlight409: count((a) => a.problem === 'request-in-flight'),
    unknown409: count((a) => a.problem === 'outcome-unknown'),
    crash409: count((a) => a.problem === 'outcome-unknown' && a.reason === 'crash'),
    timeouts504: count((a) => a.status === 504),
    upstream502: count((a) => a.status === 502),
    serialize503: count((a) => a.problem === 'serialize-timeout'),
    noAnswer: count((a) => a.status === 0),
    refusedConn: count((a) => !!a.error?.startsWith('ECONNREFUSED')),
    extraApplications: Object.values(extras).reduce((s, n) => s + n, 0),
  }
  return { violations, stats }
}

/** The report as text for a failure message: the seed, the counts, the first violations. */
export function formatReport(r: Report, seed: number, label: string, max = 15): string {
  const kinds = new Map<string, number>()
  for (const x of r.violations) kinds.set(x.kind, (kinds.get(x.kind) ?? 0) + 1)
  return [
    `${label}: ${r.violations.length} violations (rerun with HOSTILE_SEED=${seed})`,
    `  by kind: ${[...kinds].map(([k, n]) => `${k}=${n}`).join(' ') || 'none'}`,
    `  stats: ${Object.entries(r.stats).map(([k, n]) => `${k}=${n}`).join(' ')}`,
    ...r.violations.slice(0, max).map((x) => `  - ${x.kind}: ${x.detail}`),
  ].join('\n')
}
