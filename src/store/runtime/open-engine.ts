/**
 * The engine the config names, opened: memory, sqlite, redis or postgres. Unguarded: a gateway
 * wraps it in guardStore (./guard.ts) through ./open.ts.
 */
import type { Config } from '../../config/schema.js'
import { MemoryStore } from '../memory/index.js'
import { SqliteStore } from '../sqlite/index.js'
import { commandTimeoutFor, RedisStore } from '../redis/index.js'
import { PostgresStore } from '../postgres/index.js'
import type { WriteSequence } from '../state-loss/sequence.js'
import type { Store } from '../contract/store.js'
import { storeTlsOptions } from '../shared/tls.js'

/**
 * Opens the store the config names. `sequence`: the write sequence the store follows (a gateway
 * keeps one across the attempts of ./late.ts); default a new one.
 * @throws StoreError when it cannot be opened (the message says why)
 */
export async function openStore(config: Config['store'], audit: { retention?: number } = {}, sequence?: WriteSequence): Promise<Store> {
  const auditRetentionMs = audit.retention
  switch (config.kind) {
    case 'memory':
      return new MemoryStore({
        maxResources: config.maxResources, maxRecords: config.maxRecords, auditCapacity: config.maxAttempts, auditRetentionMs,
        evictRecords: config.acceptRisks.includes('maxRecords'), evictAttempts: config.acceptRisks.includes('maxAttempts'), sequence,
      })
    case 'sqlite':
      return new SqliteStore({ path: config.path, busyTimeoutMs: config.timeout, synchronous: config.synchronous, auditRetentionMs, sequence })
    case 'redis':
      return RedisStore.open({
        url: config.url, sentinels: config.sentinels, sentinelName: config.sentinelName, cluster: config.cluster, keyPrefix: config.keyPrefix, connectTimeoutMs: Math.max(config.timeout, 1000), auditRetentionMs,
        replicas: config.replicas, replicasTimeoutMs: config.replicasTimeout ?? Math.max(1, Math.floor(config.timeout / 4)),
        commandTimeoutMs: commandTimeoutFor(config.timeout),
        sequence,
        tls: storeTlsOptions(config),
      })
    case 'postgres':
      return PostgresStore.open({
        auditRetentionMs,
        url: config.url!,
        schema: config.schema,
        migrate: config.migrate,
        pool: config.pool,
        statementTimeoutMs: config.statementTimeout,
        connectTimeoutMs: config.timeout,
        sequence,
        replicas: config.replicas,
        tls: storeTlsOptions(config),
      })
  }
}
