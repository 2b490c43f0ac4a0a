/**
 * `admission()`: the one step that decides whether a request goes upstream (contract §3, §4). It
 * reads fencing's input (token, resource) and idempotency's (key, scope, body, fingerprint), makes
 * the one store call they need — `fence`, `claim`, or both as `admit` — and applies the
 * contract's precedence in one place:
 *
 *   1. fencing's own refusals (428 no token, 400 malformed token or resource);
 *   2. a stale token (412), even when its key has a stored response;
 *   3. the key's own problem (400 key or scope, 413 body);
 *   4. the claim's result (replay, 409, 422), or forward.
 *
 * One rule for the high-water mark: a request refused for its own mistake (steps 1 and 3) never
 * raises it; the token of such a request is checked for step 2 by reading the mark, not writing
 * it. A request that reaches the check-and-set raises it, whatever its key's record then says:
 * a replay under a newer lease is that lease holder's write.
 *
 * Around it, the request is registered in this process's fencing window tracker
 * (src/fencing/window-tracker.ts) until it ends, for `fencegate_fencing_overtaken_total` and
 * `fencing.serialize: true`; with `serialize: store` it is also registered in the store after
 * its fence, and waits there for older tokens of every gateway (src/fencing/window.ts).
 */
import { randomUUID } from 'node:crypto'
import { setTimeout as sleep } from 'node:timers/promises'
import type { MiddlewareHandler } from 'hono'
import type { GatewayEnv } from './context.js'
import type { RequestFacts } from './facts.js'
import type { CompiledRoute } from './route.js'
import type { Metrics } from './telemetry/metrics.js'
import type { Logger } from './log.js'
import type { ClaimRequest, ClaimResult, FenceRequest, Store } from './store/types.js'
import { Problem } from './problems.js'
import { tooLarge } from './body.js'
import { requestTemplateSource } from './template-fill.js'
import { fenceReader } from './fencing/read.js'
import type { WindowTracker, ResourceWindow } from './fencing/window-tracker.js'
import { storeWindow, type Ticket, type WindowTimes } from './fencing/window.js'
import type { OlderWrites } from './store/types.js'
import { claimReader, type ClaimInput } from './idempotency/read.js'
import { Records, replay } from './idempotency/index.js'


/**
 * @example
 * app.post('/accounts/:account/*', routeEntry(...), admission(route, store, metrics, log, windows), forward(...))
 * @throws Problem 428, 400, 412, 413, 422, 409, 503 serialize-timeout; StoreError when the store
 *   cannot answer (the app's error handler makes it the 503 store-unavailable: fail closed)
 */
export function admission(route: CompiledRoute, store: Store, metrics: Metrics, log: Logger, windows: WindowTracker): MiddlewareHandler<GatewayEnv> {
  const name = route.name
  const readFence = fenceReader(route)
  const readClaim = claimReader(route)
  const records = route.idempotency ? new Records(route, store, metrics, log) : undefined
  const fencingCfg = route.config.fencing
  const serialize = fencingCfg?.serialize ?? false
  const upstreamTimeout = route.config.upstream.timeout
  const serializeWait = fencingCfg?.serializeWait ?? upstreamTimeout
  const lease = route.config.idempotency?.lease
  const waitForInFlight = route.config.idempotency?.inFlight === 'wait'
  const maxBody = route.config.maxRequestBytes
  const count = windows.route(name)
  // `fencing.serialize: store`: the wait across every gateway sharing the store (src/fencing/window.ts)
  const shared = serialize === 'store' ? storeWindow(store, log) : undefined
  const windowTimes: WindowTimes = { serializeWait, upstreamTimeout, lease, waitForInFlight }

  const reject = (reason: 'stale' | 'missing' | 'malformed', p: Problem): never => {
    metrics.fencingRejections.inc({ route: name, reason })
    throw p
  }
  /**
   * The 412. `since`: when the store first accepted `highest` (unknown for a mark from before it
   * was kept); `at`: when this request was checked. Their difference is how late the stale writer
   * came (`supersededForMs`, fencegate_fencing_stale_lateness_seconds, the attempt entry's lateMs).
   */
  const stale = (f: RequestFacts, highest: bigint, since?: number, at = Date.now()): never => {
    f.highest = highest
    const extra: Record<string, string | number> = { resource: f.resource!, token: String(f.token), highestToken: String(highest) }
    let when = ''
    if (since !== undefined) {
      const late = Math.max(0, at - since)
      f.lateMs = late
      extra.supersededForMs = late
      metrics.staleLateness.observe({ route: name }, late / 1000)
      when = ` (token ${highest} took over ${late >= 1000 ? `${(late / 1000).toFixed(1)} s` : `${late} ms`} before this request)`
    }
    return reject('stale', new Problem('stale-fencing-token', `Fencing token ${f.token} is older than ${highest}, the highest accepted for this resource: a newer lease holder has written since${when}.`, extra))
  }
  /** a check-and-set that raised the mark: a new lease generation of the resource began */
  const generation = () => metrics.fencingGenerations.inc({ route: name })

  /**
   * Claims the key (with the fencing check when `fence` is given: one `admit` call) and acts on
   * the result: forwards (`next`) when claimed, else replays or refuses.
   */
  const claimAndGo = async (c: Parameters<MiddlewareHandler<GatewayEnv>>[0], f: RequestFacts, claim: ClaimInput, fence: FenceRequest | undefined, next: () => Promise<void>): Promise<void | Response> => {
    const r = records!
    c.set('body', claim.body)
    f.keyHash = claim.keyHash
    f.fingerprint = claim.fingerprint
    const claimId = randomUUID()
    const req: ClaimRequest = { fingerprint: claim.fingerprint, claimId, leaseMs: lease!, ttlMs: route.idempotency!.ttl, retryUnknown: route.idempotency!.unknownOutcome === 'retry' }
    const deadline = Date.now() + upstreamTimeout
    for (let pause = 10; ; pause = Math.min(pause * 2, 250)) {
      let result: ClaimResult
      if (fence) {
        const check = fence
        const now = Date.now()
        const admitted = await store.admit(check, claim.recordKey, req, now)
        if (!admitted.fence.accepted) stale(f, admitted.fence.highest, admitted.fence.since, now)
        if (admitted.fence.raised) generation()
        f.highest = admitted.fence.highest
        // kept for every try: while this request waited for the key, a newer token may have
        // been accepted, and a retry after a release must be refused as stale, not forwarded
        result = admitted.claim!
      } else {
        result = await store.claim(claim.recordKey, req, Date.now())
      }
      r.noteFindings(f, result)
      if (result.kind === 'claimed') {
        const exchange = r.exchange(f, claim.recordKey, claimId, result.after)
        c.set('exchange', exchange)
        try {
          await next()
        } finally {
          exchange.end()
        }
        return
      }
      const a = r.answer(f, result, waitForInFlight && Date.now() + pause < deadline)
      if ('wait' in a) { await sleep(pause); continue }
      if ('problem' in a) throw a.problem
      return replay(c.env.outgoing, a.replay, route.requestIdHeader, f.requestId)
    }
  }

  return async function admission(c, next) {
    const f = c.get('facts')
    const incoming = c.env.incoming
    let src: ReturnType<typeof requestTemplateSource> | undefined
    const source = () => (src ??= requestTemplateSource(c))
    const fence = readFence(incoming.headers, source)
    if (fence && 'refused' in fence) return reject(fence.reason, fence.refused) // 1. fencing's own refusals
    let claim = await readClaim(incoming, source)
    if (!(claim && 'refused' in claim)) {
      const declared = incoming.headers['content-length']
      if (declared !== undefined && Number(declared) > maxBody) claim = { refused: tooLarge(maxBody) }
    }
    if (!fence) {
      if (claim && 'refused' in claim) throw claim.refused
      return claim ? claimAndGo(c, f, claim, undefined, next) : next()
    }

    const { resource, token } = fence
    f.resource = resource
    f.token = token
    // registered before the check: an older token accepted before this one is always seen here
    const flights = windows.enter(resource, token)
    count.n++
    const started = Date.now()
    let held = false
    let ticket: Ticket | undefined
    try {
      if (claim && 'refused' in claim) {
        // 2 before 3, without raising the mark: the mark is read, not written
        const mark = await store.mark(resource)
        if (mark !== undefined && token < mark.highest) stale(f, mark.highest, mark.since)
        throw claim.refused
      }
      c.set('flights', flights)
      let answered: void | Response
      if (claim && !serialize) {
        answered = await claimAndGo(c, f, claim, fence, next)
      } else {
        const now = Date.now()
        const checked = await store.fence(resource, token, now)
        if (!checked.accepted) stale(f, checked.highest, checked.since, now)
        if (checked.raised) generation()
        f.highest = checked.highest
        if (shared) {
          const entered = await enterWindow(f, claim !== undefined, started)
          ticket = entered.ticket
          c.set('flights', shared.flights(ticket, flights))
          await waitInWindow(c, f, flights, ticket, entered.older)
        } else if (serialize) {
          await waitForOlder(c, f, flights)
        }
        answered = claim ? await claimAndGo(c, f, claim, undefined, next) : await next()
      }
      if (f.sent && flights.sent > token) {
        f.overtaken = true
        metrics.fencingOvertaken.inc({ route: name })
        log.warn('a request ended after one with a newer fencing token for the same resource had been sent upstream: the upstream may have applied the older write last', {
          route: name, token: String(token), newerToken: String(flights.sent), requestId: f.requestId,
        })
      }
      if (serialize && f.sent && f.outcome === 'outcome_unknown') {
        // an unknown outcome holds the resource for the idempotency lease (from the request's
        // start) when the request had a record, and at least one more upstream timeout after it
        // ended: a lease no longer than the timeout would otherwise have run out already
        const until = Math.max(f.keyHash !== undefined && lease !== undefined ? started + lease : 0, Date.now() + upstreamTimeout)
        if (ticket) ticket.holdUntil = until
        if (until > Date.now()) {
          held = true
          windows.hold(flights, token, until, () => { count.n-- })
        }
      }
      return answered
    } finally {
      if (ticket) await shared!.leave(ticket)
      if (!held) {
        count.n--
        windows.leave(flights, token)
      }
    }
  }

  /** A newer token was sent while this one waited: 412, with the mark's first acceptance when the store has it. */
  async function staleAfterWait(f: RequestFacts, sent: bigint): Promise<never> {
    const now = Date.now()
    const mark = await store.mark(f.resource!)
    return stale(f, mark !== undefined && mark.highest >= sent ? mark.highest : sent, mark?.since, now)
  }

  /** `fencing.serialize`: waits until this process's older tokens of the resource have ended. */
  async function waitForOlder(c: Parameters<MiddlewareHandler<GatewayEnv>>[0], f: RequestFacts, flights: ResourceWindow): Promise<void> {
    const token = f.token!
    if (!(await windows.waitForOlder(flights, token, serializeWait))) {
      const retry = flights.heldUntil > Date.now() ? Math.ceil((flights.heldUntil - Date.now()) / 1000) : 1
      throw new Problem('serialize-timeout', `An older fencing token's request for this resource was still in flight (or its outcome unknown) after ${serializeWait} ms; this request was not forwarded, so that a newer write never reaches the upstream before an older one. Retry later.`, { token: String(token) }, { 'retry-after': String(retry) })
    }
    if (c.env.incoming.socket.destroyed) {
      // the client left while held: do not send a write nobody waits for (nginx's 499)
      f.code = 499
      throw new Problem('serialize-timeout', 'The client closed the connection while the request waited for older fencing tokens; it was not forwarded.', { token: String(token) })
    }
    // cannot happen while every route sharing the resource serializes; refused if it does
    if (flights.sent > token) await staleAfterWait(f, flights.sent)
  }

  /**
   * `fencing.serialize: store`, R: registers the request in the store (after its fence accepted
   * it). A mark raised past the token between the fence and the registration is a 412: a newer
   * token may already have been sent, and this request would land after it.
   */
  async function enterWindow(f: RequestFacts, recorded: boolean, started: number): Promise<{ ticket: Ticket; older: OlderWrites }> {
    const resource = f.resource!
    const token = f.token!
    const entered = await shared!.register(resource, token, windowTimes, recorded, started)
    if ('ticket' in entered) return entered
    const now = Date.now()
    const mark = await store.mark(resource)
    return stale(f, mark !== undefined && mark.highest > token ? mark.highest : entered.highest, mark?.since, now)
  }

  /** `fencing.serialize: store`, Q*: waits until no older token of the resource is registered in the store, by any gateway. */
  async function waitInWindow(c: Parameters<MiddlewareHandler<GatewayEnv>>[0], f: RequestFacts, flights: ResourceWindow, ticket: Ticket, first: OlderWrites): Promise<void> {
    const token = f.token!
    const socket = c.env.incoming.socket
    const waited = await shared!.waitForOlder(ticket, first, serializeWait, () => socket.destroyed)
    if (waited.kind === 'timeout') {
      // when the older registrations expire at the latest, but never more than one more wait
      const retry = Math.max(1, Math.ceil(Math.min(waited.until - Date.now(), serializeWait) / 1000))
      throw new Problem('serialize-timeout', `An older fencing token's request for this resource was still registered in the store (in flight through some gateway, or its outcome unknown) after ${serializeWait} ms; this request was not forwarded, so that a newer write never reaches the upstream before an older one. Retry later.`, { token: String(token) }, { 'retry-after': String(retry) })
    }
    if (waited.kind === 'gone' || socket.destroyed) {
      f.code = 499
      throw new Problem('serialize-timeout', 'The client closed the connection while the request waited for older fencing tokens; it was not forwarded.', { token: String(token) })
    }
    if (flights.sent > token) await staleAfterWait(f, flights.sent)
  }
}
