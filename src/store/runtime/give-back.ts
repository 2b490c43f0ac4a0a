/**
 * The claims this gateway made and will never use, given back by their id (`Store.release`) until
 * the store takes them: a claim whose answer was lost or came after `store.timeout` (its request
 * got 503 and nothing was forwarded), and a release the store did not answer.
 *
 * The gateway knows such a claim was never used, so it keeps trying past the claim's lease: a
 * store unreachable for longer than the lease would otherwise leave the key as an unknown outcome
 * (reason crash) for an operator to settle. A claim found past its lease in the meantime turned the
 * record into that unknown outcome; the store's release by the same claim id undoes it as long as
 * nobody took the record over or settled it (`ReleaseResult.lapsed`, logged here by route and key
 * hash). One loop for all of them, not a timer each: while the store fails, the first waiting
 * give-back is tried again after a pause doubling from 50 ms to 5 s, and a failed one goes to the
 * back (one failing for its own key holds none behind it); once one is taken, the rest follow,
 * 32 at a time. A new claim of a key with give-backs waiting sends those first (`now`), so that
 * after a heal the retry's claim cannot reach the store before them and find this gateway's own
 * claim past its lease. Timers are unref'd; `close()` tries once more and drops (and logs) what
 * is left.
 */
import type { Logger } from '../../log.js'
import { keyHashOf } from '../contract/key-hash.js'
import type { RecordKey, ReleaseResult } from '../contract/store.js'

const FIRST_PAUSE_MS = 50
const MAX_PAUSE_MS = 5_000
/** The longest a give-back is tried, ms: a record's ttl when shorter (past it the key is new anyway). */
export const MAX_GIVE_BACK_MS = 24 * 3_600_000
/** How many give-backs may wait at once: each holds a key in memory; more are dropped (logged). */
export const MAX_WAITING = 100_000
/** How many are sent at once once the store answers. */
const AT_ONCE = 32

interface Waiting { key: RecordKey; claimId: string; until: number }

export class GiveBacks {
  /** by claim id, oldest first */
  readonly #waiting = new Map<string, Waiting>()
  /** the claim ids waiting, by key hash: what a new claim of the key gives back first (`now`) */
  readonly #byKey = new Map<string, Set<string>>()
  #timer?: NodeJS.Timeout
  /** a round is under way (set and cleared with no await between the check and the change) */
  #running = false
  /** the last drain, for close() to wait for */
  #draining: Promise<void> = Promise.resolve()
  #pause = FIRST_PAUSE_MS
  /** the last round failed: the next tries the oldest alone */
  #failing = false
  #closed = false
  /** per log message: when it was last written (performance.now ms) and how many were left out since */
  readonly #said = new Map<string, { at: number; left: number }>()

  /**
   * @param release one try, bounded in time (guardStore passes its timed, counted `release`)
   * @param store the store's kind, for logs
   */
  constructor(
    private readonly release: (key: RecordKey, claimId: string) => Promise<ReleaseResult>,
    private readonly log: Logger,
    private readonly store: string,
  ) {}

  /** Give-backs waiting for the store. */
  get waiting(): number {
    return this.#waiting.size
  }

  /**
   * Gives the claim `claimId` of `key` back: at once when the store is answering, else with the
   * next try; tried for `forMs` (capped at MAX_GIVE_BACK_MS). A second add of one claim id is one.
   */
  add(key: RecordKey, claimId: string, forMs: number): void {
    if (this.#closed || this.#waiting.has(claimId)) return
    if (this.#waiting.size >= MAX_WAITING) {
      this.#say('error', `${MAX_WAITING} claims never used are already waiting to be given back, so this one is not: if the store made it, the key reads as an unknown outcome (reason crash) once its lease ends, until an operator resolves it`, key)
      return
    }
    this.#waiting.set(claimId, { key, claimId, until: performance.now() + Math.min(Math.max(0, forMs), MAX_GIVE_BACK_MS) })
    const hash = keyHashOf(key)
    let ids = this.#byKey.get(hash)
    if (!ids) this.#byKey.set(hash, ids = new Set())
    ids.add(claimId)
    if (!this.#running && !this.#timer) this.#kick()
  }

  /** The claim ids of the key (by its hash) waiting to be given back. */
  waitingFor(keyHash: string): Iterable<string> {
    return this.#byKey.get(keyHash) ?? []
  }

  /**
   * Gives back `claimIds` of `key` now, one after the other, before a new claim of the key: a
   * claim of this gateway's past its lease would otherwise read to that claim as an abandoned
   * attempt, an unknown outcome (reason crash) for a request never sent. A claim id the store
   * never made is a no-op.
   * @throws StoreError when the store does not take one (the new claim fails closed too)
   */
  async now(key: RecordKey, claimIds: readonly string[]): Promise<void> {
    for (const claimId of claimIds) {
      const r = await this.release(key, claimId)
      this.#remove(claimId)
      this.#lapsed(r, key)
    }
  }

  #remove(claimId: string): void {
    const w = this.#waiting.get(claimId)
    if (!w) return
    this.#waiting.delete(claimId)
    const hash = keyHashOf(w.key)
    const ids = this.#byKey.get(hash)
    ids?.delete(claimId)
    if (ids?.size === 0) this.#byKey.delete(hash)
  }

  #kick(): void {
    this.#timer = undefined
    this.#draining = this.#drain().catch(() => {})
  }

  /** Stops trying: one last try of each (bounded by the release given), then the rest is dropped and logged. */
  async close(): Promise<void> {
    if (this.#closed) return
    this.#closed = true
    clearTimeout(this.#timer)
    this.#timer = undefined
    await this.#draining
    // one last try of each, AT_ONCE at a time: a failed one goes to the back, so no round repeats one
    this.#failing = false
    for (let tries = this.#waiting.size; tries > 0 && this.#waiting.size; tries -= AT_ONCE) await this.#round(performance.now())
    const left = [...this.#waiting.values()]
    this.#waiting.clear()
    this.#byKey.clear()
    if (left.length) {
      this.log.warn('claims never used were not given back before the gateway closed: each reads as an unknown outcome (reason crash) once its lease ends, until an operator resolves it', {
        store: this.store, claims: left.length, routes: [...new Set(left.map((w) => w.key.route))].join(' '), keyHashes: left.slice(0, 10).map((w) => keyHashOf(w.key)).join(' '),
      })
    }
  }

  async #drain(): Promise<void> {
    this.#running = true
    try {
      while (this.#waiting.size > 0 && !this.#closed) {
        if (await this.#round(performance.now())) { this.#pause = FIRST_PAUSE_MS; this.#failing = false; continue }
        this.#failing = true
        if (this.#closed) return
        this.#timer = setTimeout(() => this.#kick(), this.#pause)
        this.#timer.unref()
        this.#pause = Math.min(this.#pause * 2, MAX_PAUSE_MS)
        return
      }
    } finally {
      this.#running = false
    }
  }

  /** Tries the oldest AT_ONCE give-backs, or the oldest alone after a failure (dropping those past their time); false when one failed. */
  async #round(now: number): Promise<boolean> {
    const size = this.#failing ? 1 : AT_ONCE
    const round: Waiting[] = []
    for (const w of this.#waiting.values()) {
      if (w.until <= now) {
        this.#remove(w.claimId)
        this.#say('warn', 'a claim never used could not be given back in time (its record\'s ttl, at most 24 h): the key may read as an unknown outcome (reason crash) until an operator resolves it or the record expires', w.key)
        continue
      }
      round.push(w)
      if (round.length === size) break
    }
    const settled = await Promise.allSettled(round.map((w) => this.release(w.key, w.claimId)))
    let ok = true
    settled.forEach((s, i) => {
      if (s.status === 'rejected') {
        // to the back: one give-back failing for its own key (a cluster master down) must not
        // hold the others behind it, tried alone while the store seems to fail
        ok = false
        if (!this.#waiting.has(round[i].claimId)) return // given back meanwhile by `now`
        this.#waiting.delete(round[i].claimId)
        this.#waiting.set(round[i].claimId, round[i])
        return
      }
      this.#remove(round[i].claimId)
      this.#lapsed(s.value, round[i].key)
    })
    return ok
  }

  /** Logs a give-back that undid the unknown outcome its own lapsed lease had made. */
  #lapsed(r: ReleaseResult, key: RecordKey): void {
    if (r.kind === 'not_held' || !r.lapsed) return
    this.#say('warn', r.kind === 'restored'
      ? 'a claim never used had turned into an unknown outcome (reason crash) when its lease ran out while the store could not be reached; given back now: the key reads again as the unknown outcome that claim had taken over (fencegate_unknown_outcomes_total counted the crash when a request found it)'
      : 'a claim never used had turned into an unknown outcome (reason crash) when its lease ran out while the store could not be reached; given back now: the key is free again, the next try is forwarded (fencegate_unknown_outcomes_total counted the crash when a request found it)', key)
  }

  /** Logs `msg` with the key's route and hash, at most once a second per message (with how many were left out). */
  #say(level: 'warn' | 'error', msg: string, key: RecordKey): void {
    const now = performance.now()
    const s = this.#said.get(msg)
    if (s && now - s.at < 1_000) { s.left++; return }
    this.log[level](msg, { store: this.store, route: key.route, keyHash: keyHashOf(key), ...(s?.left ? { leftOut: s.left } : {}) })
    this.#said.set(msg, { at: now, left: 0 })
  }
}
