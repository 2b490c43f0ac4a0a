// A Store test double for guardStore's tests (guard.test.ts, give-back.test.ts): claims that
// answer when the test says, releases that answer or fail as the test says, and the calls made.
import { vi } from 'vitest'
import type { AdmitResult, AuditLog, ClaimResult, Completion, RecordKey, Registration, ReleaseResult, Store } from '../../src/store/index.js'

/**
 * What guardStore touches of the metrics: the error counter and the duration histogram, by store
 * and op (observed directly, or through a child of its labels: both land in `observe`), and the
 * unknown outcomes a late claim found (an abandoned attempt), by route.
 */
export const fakeMetrics = () => {
  const observe = vi.fn()
  const labels = (store: string, op: string) => ({ observe: (v: number) => observe({ store, op }, v) })
  return { storeErrors: { inc: vi.fn() }, storeDuration: { observe, labels }, unknownOutcomes: { inc: vi.fn() }, storeFull: { inc: vi.fn() } }
}
export const fakeLog = () => ({ debug: vi.fn(), info: vi.fn(), warn: vi.fn(), error: vi.fn(), access: vi.fn() })

/** A call of the double not answered yet. */
export interface Held { op: string; answer(v: unknown): void; fail(e: unknown): void }

const unused = (): Promise<never> => Promise.reject(new Error('not used by this test'))

/**
 * A Store test double: `claim`, `admit` and `register` answer only when the test calls
 * `answer`/`fail` on what `held` holds; `release`, `finish` and `unregister` record their calls
 * in `calls` and answer at once — `release` with `released`, or rejects while `releaseFails` is
 * above 0 (counting it down). Not in process (unless asked), so guardStore races it.
 */
export class Scripted implements Store {
  readonly kind = 'redis' as const
  readonly inProcess?: boolean
  readonly held: Held[] = []
  readonly calls: [string, ...unknown[]][] = []
  releaseFails = 0
  /** a release of these claims always fails (its key's server is down), whatever `releaseFails` says */
  failRelease?: (claimId: string) => boolean
  released: ReleaseResult = { kind: 'released' }
  closed = false
  constructor(inProcess?: boolean) {
    if (inProcess) this.inProcess = true
  }
  #later<T>(op: string): Promise<T> {
    return new Promise<T>((answer, fail) => this.held.push({ op, answer: answer as (v: unknown) => void, fail }))
  }
  claim(): Promise<ClaimResult> { return this.#later('claim') }
  admit(): Promise<AdmitResult> { return this.#later('admit') }
  register(): Promise<Registration> { return this.#later('register') }
  async release(k: RecordKey, claimId: string): Promise<ReleaseResult> {
    this.calls.push(['release', k, claimId])
    if (this.failRelease?.(claimId)) throw new Error('CLUSTERDOWN the slot is not served')
    if (this.releaseFails > 0) { this.releaseFails--; throw new Error('connect ECONNREFUSED') }
    return this.released
  }
  async finish(k: RecordKey, claimId: string, done: Completion, ttlMs: number, now: number): Promise<void> { this.calls.push(['finish', k, claimId, done, ttlMs, now]) }
  async unregister(resource: string, id: string, until?: number): Promise<void> { this.calls.push(['unregister', resource, id, until]) }
  fence = unused
  highest = unused
  mark = unused
  renew = unused
  resolve = unused
  unknowns = unused
  unknownRecord = unused
  takeProbe = unused
  settle = unused
  acquireLease = unused
  renewLease = unused
  releaseLease = unused
  readLease = unused
  olderRegistered = unused
  markers = unused
  acceptLoss = unused
  retireEpoch = unused
  ping = unused
  close = async () => { this.closed = true }
  audit: AuditLog = { append: unused, query: unused, timeline: unused, fenced: unused }
}

/** How a call settled, read without awaiting it. */
export const watch = <T>(p: Promise<T>) => {
  const s: { done: boolean; value?: T; error?: unknown } = { done: false }
  p.then((value) => Object.assign(s, { done: true, value }), (error: unknown) => Object.assign(s, { done: true, error }))
  return s
}

/** Lets every pending promise callback run (a give-back is a chain of them). */
export const settle = () => new Promise<void>((r) => setImmediate(r))
