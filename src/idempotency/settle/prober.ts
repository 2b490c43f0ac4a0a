/**
 * One route's probes (contract §4a): take the next probe of an unknown outcome in the store (one
 * gateway at a time per key, on the store's clock), send it, settle the record by its answer —
 * counted (`fencegate_settle_probes_total`, `fencegate_unknown_outcomes_settled_total`) and
 * written to the attempt log on the key's timeline. The background settler (./settler.ts) and a
 * retry of the key in admission (src/admission/settle.ts) both go through `probe`.
 *
 * A probe's own lease is the interval to the next: `nextInMs` backs off from `after`, doubling up
 * to `every`, and is never shorter than `upstream.timeout` plus a margin, so no other gateway
 * sends the key's next probe while this one may still be waiting for its answer.
 */
import type { Pool } from 'undici'
import type { Logger } from '../../log.js'
import type { Metrics } from '../../telemetry/metrics.js'
import type { RouteConfig, SettleConfig } from '../../config/schema.js'
import type { AuditEntry, RecordKey, Store } from '../../store/index.js'
import { keyHashOf } from '../record-key.js'
import { recordSettled, REPLICA, type EntrySink } from '../../audit/entry.js'
import { parseProbe } from './request.js'
import { sendProbe, type ProbeAnswer, type ProbeTarget } from './send.js'

/** Time a probe's lease gives beyond `upstream.timeout`: the store round trips of its settle. */
export const PROBE_MARGIN_MS = 1_000

/**
 * What came of `probe`: `not_taken` (not due, settled, taken by another gateway), or the probe's
 * answer, with `settled` true when its settle changed the record (false: an operator's resolve,
 * a retry's takeover or a later probe came first, or the answer settles nothing).
 */
export type ProbeResult = { kind: 'not_taken' } | { kind: 'probed'; answer: ProbeAnswer; settled: boolean }

const NOT_TAKEN: ProbeResult = { kind: 'not_taken' }

/** Where the attempt log's entries go (src/audit/queue.ts `AuditQueue`). */

export class RouteProber {
  readonly route: string
  readonly settle: SettleConfig
  /** how long after a record became unknown probing ends, ms (`for`, default the record's ttl) */
  readonly forMs: number
  readonly #target: ProbeTarget
  readonly #ttl: number
  readonly #timeoutMs: number
  /** answers whose error was logged already (a too-large answer is logged once per key) */
  readonly #loggedLarge = new Set<string>()

  /** @param route the route's name, config and lower-case request id header (src/route.ts `CompiledRoute`) */
  constructor(route: { name: string; config: RouteConfig; requestIdHeader: string }, pool: Pool, private readonly store: Store, private readonly metrics: Metrics, private readonly log: Logger, private readonly audit?: EntrySink) {
    const cfg = route.config.idempotency!
    this.route = route.name
    this.settle = cfg.settle!
    this.#ttl = cfg.ttl
    this.forMs = this.settle.for ?? cfg.ttl
    this.#timeoutMs = route.config.upstream.timeout
    this.#target = { pool, host: new URL(route.config.upstream.url).host, requestIdHeader: route.requestIdHeader, timeoutMs: this.#timeoutMs, maxResponseBytes: cfg.maxResponseBytes, settle: this.settle }
  }

  /** The interval after probe number `n` (1-based) is taken: its lease and the next probe's wait, ms. */
  nextInMs(n: number): number {
    const backoff = Math.min(this.settle.after * 2 ** Math.min(n, 30), this.settle.every)
    return Math.max(backoff, this.#timeoutMs + PROBE_MARGIN_MS)
  }

  /**
   * Takes, sends and settles the next probe of `key` whose record shows `seen` probes so far.
   * @throws StoreError when the store cannot answer (nothing was sent, or the answer is not kept)
   */
  async probe(key: RecordKey, seen: number, now = Date.now()): Promise<ProbeResult> {
    const take = await this.store.takeProbe(key, { seen, afterMs: this.settle.after, nextInMs: this.nextInMs(seen + 1) }, now)
    if (take.kind !== 'taken') return NOT_TAKEN
    const route = this.route
    const keyHash = keyHashOf(key.scope, key.key)
    if (take.abandoned) this.metrics.unknownOutcomes.inc({ route, reason: 'crash' })
    const p = parseProbe(take.probe)
    const out = p ? await sendProbe(this.#target, p) : { answer: 'error' as const, error: 'the record holds no probe request this gateway can read', ms: 0 }
    this.metrics.settleProbes.inc({ route, answer: out.answer })
    const entry: AuditEntry = { time: Date.now(), kind: 'probe', replica: REPLICA, route, keyHash, result: out.answer, upstreamMs: out.ms, by: 'probe' }
    if (p) { entry.method = p.method; entry.requestId = p.requestId }
    if ('status' in out && out.status !== undefined) entry.upstreamStatus = out.status
    if (out.answer === 'error') {
      entry.reason = out.error
      if (!out.tooLarge) this.log.info('settle probe got no answer; the outcome stays unknown and is probed again', { route, keyHash, probe: take.probes, error: out.error })
      else if (!this.#loggedLarge.has(keyHash)) {
        this.#loggedLarge.add(keyHash)
        this.log.warn('settle probe answer larger than idempotency.maxResponseBytes: the outcome stays unknown (raise maxResponseBytes, or resolve it)', { route, keyHash, status: out.status, maxResponseBytes: this.#target.maxResponseBytes })
      }
    }
    this.audit?.push(entry)
    if (out.answer !== 'applied' && out.answer !== 'not_applied') return { kind: 'probed', answer: out.answer, settled: false }
    const settled = await this.store.settle(key, take.probes, out.answer === 'applied' ? { kind: 'applied', response: out.response } : { kind: 'not_applied' }, this.#ttl, Date.now())
    if (settled.kind !== 'settled') {
      this.log.info('settle probe answered, but the record had moved on (an operator resolved it, a retry took it over, or it expired): left alone', { route, keyHash, answer: out.answer })
      return { kind: 'probed', answer: out.answer, settled: false }
    }
    this.#loggedLarge.delete(keyHash)
    // after the probe's entry on the timeline, even within one millisecond
    recordSettled(this.metrics, this.audit, { route, keyHash, by: 'probe', as: out.answer, time: Math.max(Date.now(), entry.time + 1),
      reason: `settled by probe ${take.probes}: the resource answered ${out.status} (${out.answer === 'applied' ? 'probe.applied' : 'probe.notApplied'})`, upstreamStatus: out.status })
    this.log.info('unknown outcome settled by probe', { route, keyHash, as: out.answer, status: out.status, previousReason: settled.reason })
    return { kind: 'probed', answer: out.answer, settled: true }
  }
}
