/**
 * Admission: the store calls the contract's precedence needs (./decide.ts), and the one decision
 * they lead to (contract §3, §4). Fencing and idempotency read the request first (their readers
 * change nothing); then one store call — `fence`, `claim`, or both as `admit` — or, for a request
 * refused for its own mistake, a read of the mark:
 *
 *   fence refused                    → no store call
 *   token, and the request's mistake → mark (read, never raised): 412 when stale, else the mistake
 *   token and key, no serialize      → admit, again while the key is in flight and waited for
 *   token, serialize or no key       → fence; the window's settle (register, wait); then claim
 *   key only                         → claim, again while in flight and waited for
 *
 * One rule for the high-water mark: a request refused for its own mistake never raises it; a
 * request that reaches the check-and-set raises it, whatever its key's record then says (a replay
 * under a newer lease is that lease holder's write). A request that waited for its key is fenced
 * again on every try: a newer token accepted meanwhile makes it stale, not forwarded.
 */
import { setTimeout as sleep } from 'node:timers/promises'
import type { IncomingMessage } from 'node:http'
import type { RequestFacts } from '../facts.js'
import type { CompiledRoute } from '../route.js'
import type { Metrics } from '../telemetry/metrics.js'
import type { ClaimRequest, ClaimResult, FenceRequest, Store } from '../store/index.js'
import type { TemplateSource } from '../config/template.js'
import { BodyLimit } from '../body.js'
import { fenceReader, type FenceInput } from '../fencing/read.js'
import type { RequestWindow } from '../fencing/request-window.js'
import { claimReader, type ClaimInput } from '../idempotency/read.js'
import type { Claim, Records } from '../idempotency/index.js'
import { decide, type Decision, type FenceAnswer, type KeyInput } from './decide.js'
import { newId } from '../ids.js'

export { decide, type Decision, type FenceAnswer, type KeyInput, type ClaimAnswer } from './decide.js'

/** The decision, and for a request to forward its claimed key (to record) and body (read for the claim). */
export type Admitted =
  | Exclude<Decision, { kind: 'forward' } | { kind: 'wait' }>
  | { kind: 'forward'; claim?: Claim; body?: Buffer }

const FORWARD: Admitted = { kind: 'forward' }

export class Admission {
  readonly #readFence: ReturnType<typeof fenceReader>
  readonly #readClaim: ReturnType<typeof claimReader>
  readonly #limit: BodyLimit
  readonly #serialize: boolean
  readonly #upstreamTimeout: number
  readonly #waitForInFlight: boolean

  constructor(private readonly route: CompiledRoute, private readonly store: Store, private readonly metrics: Metrics, private readonly records: Records | undefined) {
    this.#readFence = fenceReader(route)
    this.#readClaim = claimReader(route)
    this.#limit = new BodyLimit(route.config.maxRequestBytes)
    this.#serialize = !!route.config.fencing?.serialize
    this.#upstreamTimeout = route.config.upstream.timeout
    this.#waitForInFlight = route.config.idempotency?.inFlight === 'wait'
  }

  /** Fencing's reading of the request: its headers only, nothing read from the body. */
  readFence(incoming: IncomingMessage, source: () => TemplateSource): FenceInput | undefined {
    return this.#readFence(incoming.headers, source)
  }

  /**
   * Idempotency's reading (the body is read for the fingerprint), and the body limit against a
   * declared length: both the request's own mistakes, answered after a stale token.
   */
  async readKey(incoming: IncomingMessage, source: () => TemplateSource): Promise<KeyInput> {
    const key = await this.#readClaim(incoming, source)
    if (!(key && 'refused' in key) && this.#limit.declaredOver(incoming.headers)) return { refused: this.#limit.tooLarge() }
    return key
  }

  /**
   * The store calls and the decision, carried out on `f` (metrics, outcome); the response is the caller's.
   * @param window the fenced request's window, entered before this call (ended by the caller)
   * @param gone whether the client has left
   * @throws StoreError when the store cannot answer (fail closed: 503 store-unavailable)
   */
  async admit(f: RequestFacts, fence: FenceInput | undefined, key: KeyInput, window: RequestWindow | undefined, gone: () => boolean): Promise<Admitted> {
    if (fence === undefined || 'refused' in fence) {
      const d = decide(fence, key)
      if (d.kind !== 'forward' || key === undefined || 'refused' in key) return this.#carryOut(f, d)
      return this.#claim(f, undefined, key)
    }
    if (key !== undefined && 'refused' in key) {
      // 2 before 3, without raising the mark: the mark is read, not written
      const at = Date.now()
      const mark = await this.store.mark(fence.resource)
      return this.#carryOut(f, decide(fence, key, this.#fenceAnswer(f, mark !== undefined && fence.token < mark.highest ? { accepted: false, ...mark } : undefined, at)))
    }
    if (key !== undefined && !this.#serialize) return this.#claim(f, fence, key)
    const at = Date.now()
    const checked = await this.store.fence(fence.resource, fence.token, at)
    const answer = this.#fenceAnswer(f, checked, at)
    if (answer.kind === 'stale') return this.#carryOut(f, decide(fence, key, answer))
    const settled = await window!.settle(key !== undefined, gone)
    if (settled !== undefined) {
      if (settled.kind === 'stale') f.highest = settled.highest
      return this.#carryOut(f, decide(fence, key, settled))
    }
    return key === undefined ? FORWARD : this.#claim(f, undefined, key)
  }

  /** A fence's (or a mark's) answer as decide takes it; notes the mark on `f`, counts a new generation. */
  #fenceAnswer(f: RequestFacts, r: { accepted: boolean; highest: bigint; since?: number; raised?: true } | undefined, at: number): FenceAnswer {
    if (r === undefined) return { kind: 'current' }
    if (r.raised) this.metrics.fencingGenerations.inc({ route: this.route.name })
    f.highest = r.highest
    return r.accepted ? { kind: 'current', highest: r.highest } : { kind: 'stale', highest: r.highest, since: r.since, at }
  }

  /**
   * Claims the key — with the fencing check when `fence` is given: one `admit` call per try —
   * until the decision is not to wait.
   */
  async #claim(f: RequestFacts, fence: FenceRequest | undefined, key: ClaimInput): Promise<Admitted> {
    const records = this.records!
    const cfg = this.route.idempotency!
    f.keyHash = key.keyHash
    f.fingerprint = key.fingerprint
    const claimId = newId()
    const req: ClaimRequest = { fingerprint: key.fingerprint, claimId, leaseMs: cfg.lease, ttlMs: cfg.ttl, retryUnknown: cfg.unknownOutcome === 'retry' }
    const deadline = Date.now() + this.#upstreamTimeout
    for (let pause = 10; ; pause = Math.min(pause * 2, 250)) {
      let fenced: FenceAnswer | undefined
      let result: ClaimResult
      if (fence) {
        const now = Date.now()
        const admitted = await this.store.admit(fence, key.recordKey, req, now)
        // checked on every try: while this request waited for the key, a newer token may have been accepted
        fenced = this.#fenceAnswer(f, admitted.fence, now)
        if (fenced.kind === 'stale') return this.#carryOut(f, decide(fence, key, fenced))
        result = admitted.claim!
      } else {
        result = await this.store.claim(key.recordKey, req, Date.now())
      }
      records.noteFindings(f, result)
      const now = Date.now()
      const d = decide(fence, key, fenced, {
        result, now, mayWait: this.#waitForInFlight && now + pause < deadline, expectedMs: result.kind === 'in_flight' ? records.expectedMs() : undefined,
      })
      if (d.kind === 'wait') { await sleep(pause); continue }
      if (d.kind === 'forward' && result.kind === 'claimed') return { kind: 'forward', claim: records.claimed(f, key.recordKey, claimId), body: key.body }
      return this.#carryOut(f, d)
    }
  }

  /** Counts and notes a refusal or a replay on `f` (contract §6). */
  #carryOut(f: RequestFacts, d: Decision): Admitted {
    const route = this.route.name
    switch (d.kind) {
      case 'refuse':
        if (d.fencing) this.metrics.fencingRejections.inc({ route, reason: d.fencing })
        if (d.lateMs !== undefined) {
          f.lateMs = d.lateMs
          this.metrics.staleLateness.observe({ route }, d.lateMs / 1000)
        }
        if (d.result) this.records!.count(f, d.result)
        if (d.clientLeft) f.code = 499
        f.outcome = d.problem.outcome
        return d
      case 'replay':
        this.records!.count(f, d.result)
        f.outcome = 'replayed'
        return d
      default:
        return FORWARD
    }
  }
}
