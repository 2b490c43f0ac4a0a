/**
 * The lease service on the proxy listener (contract §3a): `{leases.path}/{resource}` — POST
 * acquires, PUT renews, DELETE releases (both by `Fencing-Token`), GET reads. Its tokens are the
 * ones the fence checks: the store grants them above the resource's high-water mark and raises it
 * (src/store/contract/leases.ts). Reached before the route table by one string prefix compare
 * (src/gateway.ts); a route with no lease traffic pays that compare only.
 *
 * Bad input is a 4xx problem and nothing is written to the store; a store that cannot answer is
 * 503 store-unavailable (or store-state-lost) with Retry-After: no token is issued on a guess.
 * Each decision is counted in `fencegate_leases_total` and written to the attempt log on the
 * resource's timeline (./answers.ts `leaseEntry`).
 */
import type { IncomingMessage, ServerResponse } from 'node:http'
import type { Config } from '../config/schema.js'
import { MIN_TTL_MS } from '../config/leases.js'
import { formatDuration, parseDuration } from '../config/units.js'
import { Problem, stateLost } from '../problems.js'
import { storeProblem } from '../refuse.js'
import { bearerToken, sameToken } from '../bearer.js'
import { BodyLimit } from '../body.js'
import { StoreError, type Store, type StateWatch } from '../store/index.js'
import type { Metrics } from '../telemetry/metrics.js'
import type { AuditQueue } from '../audit/queue.js'
import { saneRequestId } from '../front-door.js'
import { newId } from '../ids.js'
import { parseFencingToken } from '../fencing/token.js'
import { invalid, leaseBody, leaseEntry, leaseHeld, staleLease, type LeaseFacts } from './answers.js'
import { resourceMatcher, resourceOf } from './resources.js'
import { LeaseTtl } from './ttl.js'

/** Largest request body a lease call reads, bytes. */
const MAX_BODY = 16 * 1024
const bodyLimit = new BodyLimit(MAX_BODY)
/** Longest holder name, characters. */
const MAX_HOLDER = 200
/** The methods of a lease call, as an Allow header lists them. */
const METHODS = ['GET', 'HEAD', 'POST', 'PUT', 'DELETE']
const ALLOW = METHODS.join(', ')

/** One decision to count and write to the attempt log; `at` the instant the store was asked, or a lease's end (found by the takeover). */
interface Decision { result: string; resource: string; lease?: { token: bigint; holder?: string; until?: number }; highest?: bigint; at: number }

/** A status and a JSON body (a lease), or a problem. */
type Answer = { status: number; body?: Record<string, string | number>; headers?: Record<string, string> } | Problem
/** One answer with the decisions it makes (none for a refusal). */
interface Answered { answer: Answer; decisions: Decision[] }

export class LeaseService {
  /** the prefix every lease call starts with: `leases.path` */
  readonly prefix: string
  readonly #allowed: (resource: string) => boolean
  readonly #token?: string
  readonly #ttl: LeaseTtl
  readonly #idHeader: string

  constructor(private readonly config: Config, private readonly store: Store, private readonly metrics: Metrics, private readonly audit?: AuditQueue, private readonly watch?: StateWatch) {
    const l = config.leases!
    this.prefix = l.path
    this.#allowed = resourceMatcher(l.resources)
    this.#token = l.token
    this.#ttl = new LeaseTtl(config, store.audit)
    this.#idHeader = config.log.requestIdHeader.toLowerCase()
  }

  /** Whether a request target that starts with `prefix` is a lease call (the prefix ends there, or at "/" or "?"). */
  owns(target: string): boolean {
    const c = target.charCodeAt(this.prefix.length)
    return Number.isNaN(c) || c === 47 || c === 63
  }

  /**
   * Answers one lease call. A store that cannot answer is its 503 (../refuse.ts `storeProblem`).
   * @throws anything else (a bug), unanswered: the gateway logs it and answers 500 (../gateway.ts)
   */
  async handle(incoming: IncomingMessage, outgoing: ServerResponse): Promise<void> {
    const started = performance.now()
    const requestId = saneRequestId(incoming.headers[this.#idHeader]) ?? newId()
    const method = incoming.method ?? 'GET'
    let answered: Answered
    try {
      answered = await this.#answer(incoming, method)
    } catch (e) {
      if (e instanceof StoreError) answered = { answer: storeProblem(e), decisions: [] }
      else if (e instanceof Problem) answered = { answer: e, decisions: [] }
      else throw e
    }
    const { answer, decisions } = answered
    const status = answer.status
    if (answer instanceof Problem) {
      answer.respond(outgoing, requestId, this.#idHeader)
    } else {
      const text = answer.body ? JSON.stringify(answer.body) : ''
      outgoing.writeHead(status, { ...(text ? { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) } : {}), 'cache-control': 'no-store', [this.#idHeader]: requestId, ...answer.headers })
      outgoing.end(text)
    }
    const facts: LeaseFacts = { method, status, requestId, durationMs: performance.now() - started }
    for (const e of decisions) {
      this.metrics.leases.inc({ result: e.result })
      this.audit?.push(leaseEntry(e.result, e.resource, facts, e.lease, e.highest, e.at))
    }
  }

  async #answer(incoming: IncomingMessage, method: string): Promise<Answered> {
    const undecided = (answer: Answer): Answered => ({ answer, decisions: [] })
    const target = incoming.url ?? ''
    const q = target.indexOf('?')
    const rest = (q < 0 ? target : target.slice(0, q)).slice(this.prefix.length + 1)
    const resource = resourceOf(rest)
    if (typeof resource !== 'string') return undecided(invalid(resource.malformed))
    if (!this.#allowed(resource)) return undecided(new Problem('no-route', `No lease is granted on ${JSON.stringify(resource)}: it matches none of leases.resources.`))
    if (!METHODS.includes(method)) return undecided(new Problem('method-not-allowed', `A lease is acquired with POST, renewed with PUT, released with DELETE and read with GET, not ${method}.`, {}, { allow: ALLOW }))
    const auth = this.#authorized(incoming.headers.authorization)
    const reading = method === 'GET' || method === 'HEAD'
    if (auth === 'wrong' || (auth === 'none' && !reading)) {
      return undecided(new Problem('lease-token-required', `Lease calls on this gateway need "Authorization: Bearer <leases.token>"${auth === 'wrong' ? '; the token given is not it' : ''}.`, {}, { 'www-authenticate': auth === 'wrong' ? 'Bearer realm="fencegate leases", error="invalid_token"' : 'Bearer realm="fencegate leases"' }))
    }
    if (this.watch?.lost) return undecided(stateLost())
    // each decision is stamped with the instant the store was asked: a 409 held is then before the lease's end it saw
    const now = Date.now()
    if (reading) {
      const l = await this.store.readLease(resource, now)
      if (!l) return undecided(new Problem('lease-not-found', `No live lease on ${resource}: none was granted, or it was released or ended.`, { resource }))
      return undecided({ status: 200, body: leaseBody(l, auth === 'ok') })
    }
    if (method === 'POST') {
      const asked = await readAcquire(incoming)
      if (asked instanceof Problem) return undecided(asked)
      const max = this.config.leases!.maxTtl
      if (asked.ttl !== undefined && (asked.ttl < MIN_TTL_MS || asked.ttl > max)) return undecided(invalid(`"ttl" must be between ${formatDuration(MIN_TTL_MS)} and leases.maxTtl (${formatDuration(max)}), not ${formatDuration(asked.ttl)}.`))
      const ttl = asked.ttl ?? await this.#ttl.defaultFor(resource, now)
      const g = await this.store.acquireLease(resource, asked.holder, ttl, now)
      if (!g.granted) {
        return { answer: leaseHeld(g.held), decisions: [{ result: 'held', resource, lease: { token: g.held.token, holder: g.held.holder, until: g.held.expiresAt }, at: now }] }
      }
      const l = g.lease
      const decisions: Decision[] = []
      if (g.previous?.expired) decisions.push({ result: 'expired', resource, lease: { token: g.previous.token, holder: g.previous.holder, until: g.previous.expiresAt }, at: Math.min(g.previous.expiresAt, now) })
      decisions.push({ result: 'granted', resource, lease: { token: l.token, holder: l.holder, until: l.expiresAt }, at: now })
      return { answer: { status: 201, body: leaseBody(l), headers: { 'fencing-token': l.token.toString() } }, decisions }
    }
    const token = tokenOf(incoming.headers['fencing-token'])
    if (token instanceof Problem) return undecided(token)
    const renewing = method === 'PUT'
    const c = renewing ? await this.store.renewLease(resource, token, now) : await this.store.releaseLease(resource, token, now)
    if (!c.done) return { answer: staleLease(resource, token, c.highest), decisions: [{ result: 'stale', resource, lease: { token }, highest: c.highest, at: now }] }
    const decided: Decision = { result: renewing ? 'renewed' : 'released', resource, lease: { token, holder: c.lease.holder, until: renewing ? c.lease.expiresAt : now }, at: now }
    return { answer: renewing ? { status: 200, body: leaseBody(c.lease) } : { status: 204 }, decisions: [decided] }
  }

  /** `ok`: the token given; `none`: none given (or none configured: every call is `ok`); `wrong`: another. */
  #authorized(header: string | undefined): 'ok' | 'none' | 'wrong' {
    if (this.#token === undefined) return 'ok'
    if (header === undefined) return 'none'
    const given = bearerToken(header)
    return given !== undefined && sameToken(given, this.#token) ? 'ok' : 'wrong'
  }
}

/** The Fencing-Token of a renewal or release: 428 when missing, 400 when malformed. */
function tokenOf(v: string | string[] | undefined): bigint | Problem {
  if (v === undefined) return new Problem('fencing-token-required', 'A renewal or release names its lease by "Fencing-Token: N", the token its grant answered.')
  const t = typeof v === 'string' ? parseFencingToken(v) : undefined
  if (t === undefined) return new Problem('fencing-token-malformed', 'Fencing-Token must be one decimal integer from 0 to 9223372036854775807, without sign, spaces or leading zeros.')
  return t
}

/** The body of an acquisition: `{"holder": "...", "ttl": "30s"}` (ttl optional), read whole up to MAX_BODY. */
async function readAcquire(incoming: IncomingMessage): Promise<{ holder: string; ttl?: number } | Problem> {
  const read = await bodyLimit.read(incoming)
  if (read === undefined) return new Problem('body-too-large', `A lease request's body is at most ${MAX_BODY} bytes.`)
  let body: unknown
  try { body = JSON.parse(read.toString('utf8') || 'null') } catch { return invalid('The body is not JSON: send {"holder": "worker-7", "ttl": "30s"} (ttl optional).') }
  if (body === null || typeof body !== 'object' || Array.isArray(body)) return invalid('The body must be a JSON object: {"holder": "worker-7", "ttl": "30s"} (ttl optional).')
  const { holder, ttl } = body as { holder?: unknown; ttl?: unknown }
  // eslint-disable-next-line no-control-regex
  if (typeof holder !== 'string' || holder.length === 0 || holder.length > MAX_HOLDER || /[\u0000-\u001f\u007f]/.test(holder)) {
    return invalid(`"holder" is required: who takes the lease, 1 to ${MAX_HOLDER} characters without control characters (a worker's name, host and pid).`)
  }
  if (ttl === undefined) return { holder }
  const ms = typeof ttl === 'string' ? parseDuration(ttl) : undefined
  if (ms === undefined) return invalid(`"ttl" must be a duration with its unit, e.g. "30s" or "2m", not ${JSON.stringify(ttl)}.`)
  return { holder, ttl: ms }
}
