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
import { RedisStore } from './redis.js'
import { PostgresStore, migratePostgres } from './postgres.js'
import { StoreError, type Store } from './types.js'

export { StoreError, type Store } from './types.js'

/**
 * Opens the store the config names.
 * @throws StoreError when it cannot be opened (the message says why)
 */
export async function openStore(config: Config['store'], audit: { retention?: number } = {}): Promise<Store> {
  const auditRetentionMs = audit.retention
  switch (config.kind) {
    case 'memory':
      return new MemoryStore({ maxResources: config.maxResources, maxRecords: config.maxRecords, auditRetentionMs })
    case 'sqlite':
      return new SqliteStore({ path: config.path, busyTimeoutMs: config.timeout, synchronous: config.synchronous, auditRetentionMs })
    case 'redis':
      return RedisStore.open({ url: config.url!, keyPrefix: config.keyPrefix, connectTimeoutMs: Math.max(config.timeout, 1000), auditRetentionMs })
    case 'postgres':
      return PostgresStore.open({
        auditRetentionMs,
        url: config.url!,
        schema: config.schema,
        migrate: config.migrate,
        pool: config.pool,
        statementTimeoutMs: config.statementTimeout,
        connectTimeoutMs: config.timeout,
      })
  }
}

/**
 * `fencegate migrate`: creates or updates the store's schema (postgres); the other stores
 * create theirs when opened, so for them it only checks that the store opens.
 * @returns a line saying what was done
 * @throws StoreError when the store cannot be reached
 */
export async function migrateStore(config: Config['store']): Promise<string> {
  if (config.kind === 'postgres') {
    const { schema, epoch } = await migratePostgres({ url: config.url!, schema: config.schema, connectTimeoutMs: Math.max(config.timeout, 5000) })
    return `postgres schema ${schema} is up to date (epoch ${epoch})`
  }
  const store = await openStore(config)
  await store.close()
  return `${config.kind} store needs no migration (its layout is created when opened)`
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
  const bounded = inner.inProcess ? <T>(p: Promise<T>) => p : <T>(p: Promise<T>, op: string) => withTimeout(p, timeoutMs, op)
  const call = async <T>(op: string, fn: () => Promise<T>): Promise<T> => {
    const started = performance.now()
    try {
      return await bounded(fn(), op)
    } catch (e) {
      metrics.storeErrors.inc({ store: kind, op })
      const now = Date.now()
      if (now - (lastLogged.get(op) ?? 0) >= 1000) {
        lastLogged.set(op, now)
        log.error('store call failed: requests that need it are refused (503)', { store: kind, op, error: (e as Error).message })
      }
      throw e instanceof StoreError ? e : new StoreError(`${kind} ${op}: ${(e as Error).message}`, op, { cause: e })
    } finally {
      metrics.storeDuration.observe({ store: kind, op }, (performance.now() - started) / 1000)
    }
  }
  return {
    kind,
    inProcess: inner.inProcess,
    fence: (resource, token) => call('fence', () => inner.fence(resource, token)),
    highest: (resource) => call('highest', () => inner.highest(resource)),
    claim: (key, req, now) => {
      const attempt = inner.claim(key, req, now)
      return call('claim', () => attempt).catch((e) => {
        // The request failed closed, but a slow store may still apply the claim afterwards:
        // give it back, or the key would read as in flight and then as an unknown outcome.
        attempt.then((r) => { if (r.kind === 'claimed') return inner.release(key, req.claimId) }).catch(() => {})
        throw e
      })
    },
    // without admit in the store, idempotency makes fence and claim in turn (admitOf)
    admit: inner.admit && ((fence, key, req, now) => {
      const attempt = inner.admit!(fence, key, req, now)
      return call('admit', () => attempt).catch((e) => {
        // as for claim: a claim the slow store still makes is given back
        attempt.then((r) => { if (r.claim?.kind === 'claimed') return inner.release(key, req.claimId) }).catch(() => {})
        throw e
      })
    }),
    finish: (key, claimId, done, ttlMs, now) => call('finish', () => inner.finish(key, claimId, done, ttlMs, now)),
    release: (key, claimId) => call('release', () => inner.release(key, claimId)),
    resolve: (key, as, ttlMs, now) => call('resolve', () => inner.resolve(key, as, ttlMs, now)),
    // off the request path: the audit queue bounds, counts and logs its own failures
    audit: inner.audit,
    markers: () => call('markers', () => inner.markers()),
    acceptLoss: () => call('accept_loss', () => inner.acceptLoss()),
    ping: () => call('ping', () => inner.ping()),
    close: () => inner.close(),
  }
}
