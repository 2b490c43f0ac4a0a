/**
 * What every store does around each operation, written once: refuse after `close`, and turn
 * whatever the engine threw into a `StoreError` naming the operation (the `op` metric label), so
 * callers see one error type and fail closed.
 */
import { StoreError } from '../contract/store.js'

/** The error of a call made after `close()` (every store, every method). */
export const closedError = (op: string): StoreError => new StoreError('store is closed', op, { unsent: true })

/**
 * Wraps an engine's error as a `StoreError` "`<engine> <op>: <why>`"; a `StoreError` passes as it is.
 * @param why the message to give, default the error's own (a store that knows better — "not
 *   connected" — says so)
 */
export function storeError(engine: string, op: string, e: unknown, why?: string): StoreError {
  if (e instanceof StoreError) return e
  return new StoreError(`${engine} ${op}: ${why ?? (e as Error)?.message ?? String(e)}`, op, { cause: e })
}

/**
 * Runs one asynchronous operation of an open store.
 * @throws StoreError when `closed`, or whatever `fn` threw, wrapped by `storeError`
 */
export function storeCall<T>(engine: string, op: string, closed: boolean, fn: () => Promise<T>, why?: (e: unknown) => string | undefined): Promise<T> {
  if (closed) return Promise.reject(closedError(op))
  const wrap = (e: unknown): never => { throw storeError(engine, op, e, why?.(e)) }
  let p: Promise<T>
  try {
    p = fn()
  } catch (e) {
    return Promise.reject(storeError(engine, op, e, why?.(e)))
  }
  // one promise, not an async function's two: every store operation passes here
  return p.then(undefined, wrap)
}
