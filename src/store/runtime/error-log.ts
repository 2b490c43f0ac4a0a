/**
 * How failed store calls reach the log: the first failure of an outage once, with its cause
 * (operation and error); while calls keep failing, one summary a minute (failures per operation,
 * the causes seen and how often); once a call answers again, one line saying so with the count.
 * A store that is down fails the state watch's `markers` every second, and each request's calls
 * besides: without this the log holds one line per failure, with the cause buried among them.
 */
import type { Logger } from '../../log.js'

/** Summaries and recovery lines at most this often, ms. */
export const STORE_ERROR_SUMMARY_MS = 60_000
/** Distinct causes a summary lists (the most frequent first); the rest are counted. */
const CAUSES = 5

export class StoreErrorLog {
  /** failures since the last line, per operation and per cause */
  #ops = new Map<string, number>()
  #causes = new Map<string, number>()
  #failing = false
  /** when the current outage's first failure was seen (ms since the epoch) */
  #since = 0
  #lastFailLine = -Infinity
  #lastOkLine = -Infinity

  /**
   * @param now the clock (ms since the epoch); Date.now, or a test's own
   */
  constructor(private readonly log: Logger, private readonly kind: string, private readonly now: () => number = Date.now) {}

  /** A store call `op` failed with `cause` (its error message). */
  failed(op: string, cause: string): void {
    const now = this.now()
    if (!this.#failing) { this.#failing = true; this.#since = now }
    const quiet = this.#ops.size === 0
    this.#ops.set(op, (this.#ops.get(op) ?? 0) + 1)
    this.#causes.set(cause, (this.#causes.get(cause) ?? 0) + 1)
    if (now - this.#lastFailLine < STORE_ERROR_SUMMARY_MS) return
    this.#lastFailLine = now
    if (quiet) {
      this.log.error(`store call failed: requests that need the store are refused (503); further failures are summarised once a minute`, { store: this.kind, op, error: cause })
    } else {
      this.log.error(`store calls still failing, for ${Math.round((now - this.#since) / 1000)} s now: ${this.#count()} failed since the last line; requests that need the store are refused (503)`, { store: this.kind, ops: this.#opsText(), causes: this.#topCauses() })
    }
    this.#reset()
  }

  /** A store call answered: ends an outage (logged at most once a minute; the next summary counts what was not). */
  answered(): void {
    if (!this.#failing) return
    this.#failing = false
    const now = this.now()
    if (now - this.#lastOkLine < STORE_ERROR_SUMMARY_MS) return
    this.#lastOkLine = now
    const failed = this.#count()
    this.log.info(`store answers again after ${Math.round((now - this.#since) / 1000)} s of failed calls`, { store: this.kind, ...(failed ? { failedSinceLastLine: failed, ops: this.#opsText(), causes: this.#topCauses() } : {}) })
    this.#reset()
    // a new outage's first failure is logged with its cause at once
    this.#lastFailLine = -Infinity
  }

  #count(): number { let n = 0; for (const c of this.#ops.values()) n += c; return n }

  /** `markers 30, claim 5`: failures per operation, the most first */
  #opsText(): string { return [...this.#ops].sort((a, b) => b[1] - a[1]).map(([op, n]) => `${op} ${n}`).join(', ') }

  /** `"did not answer within 1000 ms" ×30; "ECONNREFUSED" ×2`: the most frequent causes */
  #topCauses(): string {
    const sorted = [...this.#causes].sort((a, b) => b[1] - a[1])
    const rest = sorted.slice(CAUSES).reduce((n, [, c]) => n + c, 0)
    return [...sorted.slice(0, CAUSES).map(([cause, n]) => `${JSON.stringify(cause)} ×${n}`), ...(rest ? [`other causes ×${rest}`] : [])].join('; ')
  }

  #reset(): void { this.#ops.clear(); this.#causes.clear() }
}
