/**
 * Opens the configured store and wraps it so that every call is timed, counted on failure, and
 * bounded by `store.timeout`: a call slower than that rejects with StoreError, and the request
 * that needed it fails closed.
 */
import type { Config } from '../config/schema.js'
import type { Metrics } from '../telemetry/metrics.js'
import type { Logger } from '../log.js'
import { MemoryStore } from './memory.js'
import { SqliteStore } from './sqlite.js'
import { StoreError, type Store } from './types.js'

export { StoreError, type Store } from './types.js'

/**
 * Opens the store the config names.
 * @throws StoreError when it cannot be opened (the message says why)
 */
export async function openStore(config: Config['store']): Promise<Store> {
  switch (config.kind) {
    case 'memory':
      return new MemoryStore({ maxResources: config.maxResources, maxRecords: config.maxRecords })
    case 'sqlite':
      return new SqliteStore({ path: config.path, busyTimeoutMs: config.timeout, synchronous: config.synchronous })
    default:
      throw new StoreError(`store.kind ${config.kind} is not available in this version (use memory or sqlite)`, 'open')
  }
}

function withTimeout<T>(p: Promise<T>, ms: number, op: string): Promise<T> {
  let timer: NodeJS.Timeout
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new StoreError(`store did not answer ${op} within ${ms} ms`, op)), ms)
  })
  return Promise.race([p, late]).finally(() => clearTimeout(timer))
}

/**
 * A Store that measures, counts errors and enforces the timeout on every call of `inner`.
 * Failures are logged at most once a second per operation, so an outage does not flood the log.
 */
export function guardStore(inner: Store, metrics: Metrics, timeoutMs: number, log: Logger): Store {
  const kind = inner.kind
  const lastLogged = new Map<string, number>()
  const call = async <T>(op: string, fn: () => Promise<T>): Promise<T> => {
    const end = metrics.storeDuration.startTimer({ store: kind, op })
    try {
      return await withTimeout(fn(), timeoutMs, op)
    } catch (e) {
      metrics.storeErrors.inc({ store: kind, op })
      const now = Date.now()
      if (now - (lastLogged.get(op) ?? 0) >= 1000) {
        lastLogged.set(op, now)
        log.error('store call failed: requests that need it are refused (503)', { store: kind, op, error: (e as Error).message })
      }
      throw e instanceof StoreError ? e : new StoreError(`${kind} ${op}: ${(e as Error).message}`, op, { cause: e })
    } finally {
      end()
    }
  }
  return {
    kind,
    fence: (resource, token) => call('fence', () => inner.fence(resource, token)),
    highest: (resource) => call('highest', () => inner.highest(resource)),
    claim: (key, req, now) => call('claim', () => inner.claim(key, req, now)),
    finish: (key, claimId, done, ttlMs, now) => call('finish', () => inner.finish(key, claimId, done, ttlMs, now)),
    release: (key, claimId) => call('release', () => inner.release(key, claimId)),
    ping: () => call('ping', () => inner.ping()),
    close: () => inner.close(),
  }
}
