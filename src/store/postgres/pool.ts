/**
 * What a PostgreSQL store is opened with, and its connection pool: bounded waits for a
 * connection, statements cancelled by the server, a dropped connection never fatal.
 */
import type { ConnectionOptions } from 'node:tls'
import pg from 'pg'
import { pgConnection } from '../shared/tls.js'
import type { WriteSequence } from '../state-loss/sequence.js'

export interface PostgresStoreOptions {
  /** postgres:// or postgresql:// URL; `?application_name=` names the connections (default "fencegate") */
  url: string
  /** schema holding the tables; created by migrate; default "public" */
  schema?: string
  /** most connections per gateway process; default 10 */
  pool?: number
  /** the server cancels a statement running longer than this, ms; default 5000 */
  statementTimeoutMs?: number
  /** longest wait for a connection (new or from the pool), ms; default 1000 */
  connectTimeoutMs?: number
  /** how often expired records are deleted, ms; default 60000 (0 turns the reaper off) */
  reapIntervalMs?: number
  /** attempt log entries older than this are deleted by the reaper, ms; default 7 days */
  auditRetentionMs?: number
  /** the write sequence to follow (../state-loss/sequence.ts); default a new one */
  sequence?: WriteSequence
  /** synchronous standbys required (store.replicas); 0 (default): a new timeline counts as state loss */
  replicas?: number
  /**
   * where instants come from: 'store' (default) the server's clock_timestamp(), inside every
   * function; 'caller' the `now` each call passes — for tests that drive time (the conformance suite)
   */
  clock?: 'store' | 'caller'
  /**
   * store.tls as node:tls options (../shared/tls.ts `storeTlsOptions`): TLS verified as
   * sslmode=verify-full does (the CA, then the URL's host name); the URL's sslmode is dropped
   */
  tls?: ConnectionOptions
}

/** A pool that never lets a dropped connection crash the process. */
export function createPool(o: Required<Pick<PostgresStoreOptions, 'url' | 'pool' | 'statementTimeoutMs' | 'connectTimeoutMs'>> & Pick<PostgresStoreOptions, 'tls'>, onError: (e: Error) => void): pg.Pool {
  const pool = new pg.Pool({
    ...pgConnection(o.url, o.tls),
    max: o.pool,
    connectionTimeoutMillis: o.connectTimeoutMs,
    statement_timeout: o.statementTimeoutMs,
    // a query on a connection that went silent (no RST) must not hold a pool slot forever
    query_timeout: o.statementTimeoutMs + 1000,
    idleTimeoutMillis: 30_000,
    keepAlive: true,
    fallback_application_name: 'fencegate',
  })
  // An idle client whose connection the server ended emits 'error' on the pool; pg drops it.
  pool.on('error', onError)
  return pool
}
