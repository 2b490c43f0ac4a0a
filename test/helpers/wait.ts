/**
 * Waiting in tests: `until` polls for something that happens asynchronously (a counter scraped
 * from /metrics, a log line, a request reaching the upstream, a process becoming ready);
 * `sleep` is a plain pause, for tests whose point is timing (let a request get ahead of another,
 * let a lease expire). Prefer `until` wherever there is something to watch: it returns as soon
 * as it holds, and its failure says what was awaited and what was seen last.
 */
import { inspect } from 'node:util'

/** What `until` resolves with: the value `check` returned, never a falsy one. */
export type Truthy<T> = Exclude<T, false | 0 | 0n | '' | null | undefined>

/** Resolves after `ms` milliseconds. */
export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms))

export interface UntilOptions {
  /** give up after this long; default 5000 ms */
  timeoutMs?: number
  /** pause between two calls of `check`; default 20 ms */
  intervalMs?: number
  /**
   * what is awaited, for the failure message ("token 5 to reach the upstream"); a function is
   * called only on failure, so it can describe the state then (a log, the spans seen)
   */
  message?: string | (() => string)
}

/**
 * Calls `check` until it returns a truthy value, and resolves with that value.
 *
 * - A falsy return (false, undefined, 0, '') means "not yet".
 * - A throw means "not yet" too (a server still starting refuses connections; an `expect`
 *   inside `check` has not held yet): the error is kept and reported if time runs out. So an
 *   assertion can be awaited: `await until(() => { expect(x()).toBe(3); return true })` (return
 *   something truthy after it: a check that returns nothing never succeeds).
 * - After `timeoutMs` it rejects with an Error naming `message`, how long it waited, and the
 *   last value returned or the last error thrown.
 *
 * ```ts
 * await until(() => up.count('/ledger/') === 20, { message: '20 requests at the upstream' })
 * const span = await until(() => spans().find((s) => s.name === 'POST /x'), { message: 'the SERVER span' })
 * ```
 */
export async function until<T>(check: () => T | Promise<T>, opts: UntilOptions = {}): Promise<Truthy<T>> {
  const { timeoutMs = 5000, intervalMs = 20 } = opts
  const started = Date.now()
  let tries = 0
  let last: { value: unknown } | { error: unknown } | undefined
  for (;;) {
    tries++
    try {
      const value = await check()
      if (value) return value as Truthy<T>
      last = { value }
    } catch (error) {
      last = { error }
    }
    if (Date.now() - started >= timeoutMs) break
    await sleep(intervalMs)
  }
  const what = typeof opts.message === 'function' ? opts.message() : opts.message ?? `${check}`
  const seen = last === undefined ? 'nothing seen'
    : 'error' in last ? `last error: ${last.error instanceof Error ? last.error.message : inspect(last.error)}`
      : `last value: ${inspect(last.value, { depth: 4, breakLength: Infinity })}`
  throw new Error(`timed out after ${Date.now() - started} ms (${tries} tries) waiting for ${what}; ${seen}`)
}
