/**
 * Waiting for another process's lock without blocking the event loop. better-sqlite3 is
 * synchronous, so SQLite's own busy handler would sleep on the event-loop thread: the store runs
 * with busy_timeout 0, a locked database answers SQLITE_BUSY at once, and the work is tried again
 * on a timer, after a pause of 1 ms doubling to 20 ms, until the call's time is up.
 */

/** SQLITE_BUSY and its extended codes: another connection holds a lock; worth trying again. */
export const isBusy = (e: unknown): boolean => String((e as { code?: unknown } | null)?.code ?? '').startsWith('SQLITE_BUSY')

/** pauses between tries while the database is locked, ms: the first, and the longest */
export const FIRST_PAUSE_MS = 1
export const LONGEST_PAUSE_MS = 20

/** The pause after `pause` (0: none yet), ms. */
export const nextPause = (pause: number): number => Math.min(Math.max(pause * 2, FIRST_PAUSE_MS), LONGEST_PAUSE_MS)

/**
 * What a call that gave up on the lock says, for `storeError`; undefined for any other error
 * (its own message is said).
 * @param queued performance.now() when the call was made
 */
export const busyWhy = (e: unknown, queued: number): string | undefined =>
  isBusy(e) ? `the database is locked by another process (gave up after ${Math.round(performance.now() - queued)} ms)` : undefined

/**
 * Runs `fn` now; while another process holds the lock, again after a pause, until `timeoutMs`
 * since `queued` has passed.
 * @param undo runs after each failed try (ends a transaction a failed statement left open)
 * @returns what `fn` returned; rejects with the error of the last try (SQLITE_BUSY when the time
 *   ran out, any other error at once), unwrapped
 */
export function retryWhileBusy<T>(fn: () => T, timeoutMs: number, undo: () => void, queued = performance.now()): Promise<T> {
  let pause = 0
  return new Promise<T>((resolve, reject) => {
    const attempt = () => {
      try {
        resolve(fn())
      } catch (e) {
        undo()
        const left = queued + timeoutMs - performance.now()
        if (!isBusy(e) || left <= 0) return reject(e)
        pause = nextPause(pause)
        setTimeout(attempt, Math.min(pause, left))
      }
    }
    attempt()
  })
}

/**
 * One pending run of a flush: on the next turn of the event loop (after the I/O of this one, so
 * the calls made in this turn go in one transaction), or after a pause (a lock to wait out).
 */
export class Soon {
  #cancel?: () => void
  constructor(private readonly run: () => void) {}

  /** whether a run is pending */
  get pending(): boolean {
    return this.#cancel !== undefined
  }

  /** Runs on the next turn, or after `pauseMs`; replaces a run pending already. */
  schedule(pauseMs?: number): void {
    this.cancel()
    if (pauseMs === undefined) {
      const next = setImmediate(() => this.#fire())
      this.#cancel = () => clearImmediate(next)
    } else {
      const next = setTimeout(() => this.#fire(), pauseMs)
      this.#cancel = () => clearTimeout(next)
    }
  }

  /** Drops the pending run, if any. */
  cancel(): void {
    this.#cancel?.()
    this.#cancel = undefined
  }

  #fire(): void {
    this.#cancel = undefined
    this.run()
  }
}
