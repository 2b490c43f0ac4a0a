/**
 * Admission: one guarded request from its reading to the one decision (contract §3, §4), in one
 * sequence — fencing and idempotency read the request (their readers change nothing), then the
 * store calls the contract's precedence needs (./decide.ts), with the check-to-apply window
 * (src/fencing/request-window.ts) entered before the first of them — or, for a request refused
 * for its own mistake, a read of the mark:
 *
 *   fence refused                    → no store call
 *   token, and the request's mistake → mark (read, never raised): 412 when stale, else the mistake
 *   token and key, no serialize      → admit, again while the key is in flight and waited for
 *   token, serialize or no key       → fence; the window's settle (register, wait); then claim
 *   key only                         → claim, again while in flight and waited for
 *
 * A refusal or a replay is answered here (src/refuse.ts, src/forward/respond.ts); a request to
 * forward gets its pass. A store that cannot answer is a refusal too (503, fail closed). What
 * admission opened — the window, the claim's lease — is closed by the pass's `end()` (./pass.ts).
 *
 * One rule for the high-water mark: a request refused for its own mistake never raises it; a
 * request that reaches the check-and-set raises it, whatever its key's record then says (a replay
 * under a newer lease is that lease holder's write). A request that waited for its key is fenced
 * again on every try: a newer token accepted meanwhile makes it stale, not forwarded.
 */
import { setTimeout as sleep } from 'node:timers/promises'
import type { IncomingMessage } from 'node:http'
import type { Exchange } from '../exchange.js'
import type { RequestFacts } from '../facts.js'
import type { CompiledRoute, RouteContext } from '../route.js'
import type { Metrics } from '../telemetry/metrics.js'
import { StoreError, type ClaimRequest, type ClaimResult, type FenceRequest, type Store } from '../store/index.js'
import type { TemplateSource } from '../config/template.js'
import { BodyLimit } from '../body.js'
import { refuse, unanswered, type Refusing } from '../refuse.js'
import { requestTemplateSource } from '../template-fill.js'
import { fenceReader } from '../fencing/read.js'
import { RouteWindows, type FenceAnswer, type RequestWindow } from '../fencing/request-window.js'
import { claimReader, type ClaimInput } from '../idempotency/read.js'
import { RouteClaims } from '../idempotency/index.js'
import { respondReplay } from '../forward/respond.js'
import { decide, type Decision, type KeyInput } from './decide.js'
import { ANSWERED, Pass } from './pass.js'
import { newId } from '../ids.js'
import { ClaimSettle } from './settle.js'

export { decide, type Decision, type FenceAnswer, type KeyInput, type ClaimAnswer } from './decide.js'
export { Pass, UNGUARDED } from './pass.js'

const FORWARD: Decision = { kind: 'forward' }

export class Admission {
  readonly #route: CompiledRoute
  readonly #store: Store
  readonly #metrics: Metrics
  readonly #refusing: Refusing
  readonly #readFence: ReturnType<typeof fenceReader>
  readonly #readClaim: ReturnType<typeof claimReader>
  readonly #limit: BodyLimit
  readonly #serialize: boolean
  readonly #upstreamTimeout: number
  readonly #waitForInFlight: boolean
  readonly #windows: RouteWindows | undefined
  readonly #claims: RouteClaims | undefined
  /** idempotency.settle: the claim's probe request, and a retry's probe of an unknown outcome */
  readonly #settle: ClaimSettle | undefined

  constructor(context: RouteContext) {
    const route = this.#route = context.route
    this.#store = context.store
    this.#metrics = context.metrics
    this.#refusing = context.refusing
    this.#readFence = fenceReader(route)
    this.#readClaim = claimReader(route)
    this.#limit = new BodyLimit(route.config.maxRequestBytes)
    this.#serialize = !!route.config.fencing?.serialize
    this.#upstreamTimeout = route.config.upstream.timeout
    this.#waitForInFlight = route.config.idempotency?.inFlight === 'wait'
    this.#windows = route.fencing ? new RouteWindows(context) : undefined
    this.#claims = route.idempotency ? new RouteClaims(context) : undefined
    this.#settle = context.prober ? new ClaimSettle(context) : undefined
  }

  /**
   * Admits the request: reads it, makes the store calls, answers a refusal or a replay. Call the
   * pass's `end()` once the request is over, whether it was admitted or not.
   * @throws the body stream's error when the client leaves mid-body (before anything is opened)
   */
  async admit(x: Exchange): Promise<Pass> {
    const { incoming, facts: f } = x
    let src: TemplateSource | undefined
    const source = () => (src ??= requestTemplateSource(x))
    const fence = this.#readFence(incoming.headers, source)
    if (fence !== undefined && 'refused' in fence) return this.#carryOut(x, decide(fence, undefined))
    const key = await this.#readKey(incoming, source)
    let window: RequestWindow | undefined
    try {
      if (fence === undefined) {
        const d = decide(fence, key)
        if (d.kind !== 'forward' || key === undefined || 'refused' in key) return this.#carryOut(x, d)
        return await this.#claim(x, undefined, key)
      }
      f.resource = fence.resource
      f.token = fence.token
      // entered before the check: an older token accepted before this one is always seen here
      window = this.#windows!.enter(fence.resource, fence.token)
      return await this.#fenced(x, fence, key, window)
    } catch (e) {
      await window?.end(f)
      if (!(e instanceof StoreError)) throw e
      refuse(x, e, this.#refusing)
      return ANSWERED
    }
  }

  /**
   * Idempotency's reading (the body is read for the fingerprint), and the body limit against a
   * declared length: both the request's own mistakes, answered after a stale token.
   */
  async #readKey(incoming: IncomingMessage, source: () => TemplateSource): Promise<KeyInput> {
    const key = await this.#readClaim(incoming, source)
    if (!(key && 'refused' in key) && this.#limit.declaredOver(incoming.headers)) return { refused: this.#limit.tooLarge() }
    return key
  }

  /** A fenced request, its window entered. @throws StoreError when the store cannot answer */
  async #fenced(x: Exchange, fence: FenceRequest, key: KeyInput, window: RequestWindow): Promise<Pass> {
    const f = x.facts
    if (key !== undefined && 'refused' in key) {
      // 2 before 3, without raising the mark: the mark is read, not written
      const at = Date.now()
      const mark = await this.#store.mark(fence.resource)
      return this.#carryOut(x, decide(fence, key, this.#fenceAnswer(f, mark !== undefined && fence.token < mark.highest ? { accepted: false, ...mark } : undefined, at)), window)
    }
    if (key !== undefined && !this.#serialize) return this.#claim(x, fence, key, window)
    const at = Date.now()
    const checked = await this.#store.fence(fence.resource, fence.token, at)
    const answer = this.#fenceAnswer(f, checked, at)
    if (answer.kind === 'stale') return this.#carryOut(x, decide(fence, key, answer), window)
    const settled = await window.settle(key !== undefined, () => x.incoming.socket.destroyed)
    if (settled.kind !== 'current') {
      if (settled.kind === 'stale') f.highest = settled.highest
      return this.#carryOut(x, decide(fence, key, settled), window)
    }
    return key === undefined ? this.#carryOut(x, FORWARD, window) : this.#claim(x, undefined, key, window)
  }

  /** A fence's (or a mark's) answer as decide takes it; notes the mark on `f`, counts a new generation. */
  #fenceAnswer(f: RequestFacts, r: { accepted: boolean; highest: bigint; since?: number; raised?: true } | undefined, at: number): FenceAnswer {
    if (r === undefined) return { kind: 'current' }
    if (r.raised) this.#metrics.fencingGenerations.inc({ route: this.#route.name })
    f.highest = r.highest
    return r.accepted ? { kind: 'current', highest: r.highest } : { kind: 'stale', highest: r.highest, since: r.since, at }
  }

  /**
   * Claims the key — with the fencing check when `fence` is given: one `admit` call per try —
   * until the decision is not to wait.
   * @throws StoreError when the store cannot answer
   */
  async #claim(x: Exchange, fence: FenceRequest | undefined, key: ClaimInput, window?: RequestWindow): Promise<Pass> {
    const f = x.facts
    const claims = this.#claims!
    const cfg = this.#route.idempotency!
    f.keyHash = key.keyHash
    f.fingerprint = key.fingerprint
    const claimId = newId()
    const settle = this.#settle
    // on a settle route a retry's probe comes before any takeover (./settle.ts)
    const req: ClaimRequest = { fingerprint: key.fingerprint, claimId, leaseMs: cfg.lease, ttlMs: cfg.ttl, retryUnknown: cfg.unknownOutcome === 'retry' && settle === undefined }
    let probed = settle === undefined
    if (settle) req.probe = settle.probeOf(x, key.recordKey)
    const deadline = Date.now() + this.#upstreamTimeout
    for (let pause = 10; ; pause = Math.min(pause * 2, 250)) {
      let fenced: FenceAnswer | undefined
      let result: ClaimResult
      if (fence) {
        const now = Date.now()
        const admitted = await this.#store.admit(fence, key.recordKey, req, now)
        // checked on every try: while this request waited for the key, a newer token may have been accepted
        fenced = this.#fenceAnswer(f, admitted.fence, now)
        if (fenced.kind === 'stale') return this.#carryOut(x, decide(fence, key, fenced), window)
        result = admitted.claim!
      } else {
        result = await this.#store.claim(key.recordKey, req, Date.now())
      }
      if (result.kind === 'unknown' && !probed) {
        // once: the probe settles the record (then the claim again replays it, or claims it as
        // new), or it stays unknown and the claim again gets what unknownOutcome says
        probed = true
        if (result.abandoned) claims.noteFindings(f, result)
        await settle!.probeNow(key.recordKey)
        req.retryUnknown = cfg.unknownOutcome === 'retry'
        continue
      }
      claims.noteFindings(f, result)
      const now = Date.now()
      const d = decide(fence, key, fenced, {
        result, now, mayWait: this.#waitForInFlight && now + pause < deadline, expectedMs: result.kind === 'in_flight' ? claims.expectedMs() : undefined, settling: settle !== undefined,
      })
      if (d.kind === 'wait') { await sleep(pause); continue }
      if (d.kind === 'forward' && result.kind === 'claimed') {
        return new Pass({ admitted: true, facts: f, window, claim: claims.claimed(f, key.recordKey, claimId), body: key.body })
      }
      return this.#carryOut(x, d, window)
    }
  }

  /** Carries out the decision: a refusal or a replay counted (contract §6) and answered, or the pass to forward. */
  #carryOut(x: Exchange, d: Decision, window?: RequestWindow): Pass {
    const f = x.facts
    const route = this.#route.name
    switch (d.kind) {
      case 'refuse':
        if (d.fencing) this.#metrics.fencingRejections.inc({ route, reason: d.fencing })
        if (d.lateMs !== undefined) {
          f.lateMs = d.lateMs
          this.#metrics.staleLateness.observe({ route }, d.lateMs / 1000)
        }
        if (d.result) this.#claims!.count(f, d.result)
        if (d.clientLeft) unanswered(x, d.problem.outcome)
        else refuse(x, d.problem, this.#refusing)
        return window ? new Pass({ admitted: false, facts: f, window }) : ANSWERED
      case 'replay':
        this.#claims!.count(f, d.result)
        // the stored response byte for byte; the request id is this request's, not the first one's
        respondReplay(x, d.response)
        return window ? new Pass({ admitted: false, facts: f, window }) : ANSWERED
      default:
        return new Pass({ admitted: true, facts: f, window })
    }
  }
}
