/** What a Redis store is opened with: one server, Sentinels or a cluster, timeouts, replicas, clock. */
import type { ConnectionOptions } from 'node:tls'
import type { WriteSequence } from '../state-loss/sequence.js'

/**
 * The Redis client's command timeout for a gateway's `store.timeout`, ms: twice it. The gateway
 * answers the request after `store.timeout`; this bounds what a cluster client leaves running
 * after that, and a settling failover's hold is counted from it (./cluster-history.ts `settleHoldMs`).
 */
export const commandTimeoutFor = (storeTimeoutMs: number): number => 2 * storeTimeoutMs

export interface RedisStoreOptions {
  /** redis:// or rediss:// URL; with `cluster`, several (the seed nodes), comma-separated; with `sentinels`, optional */
  url?: string
  /** `url` names seed nodes of a Redis Cluster; default false */
  cluster?: boolean
  /** namespace for every key, so several deployments (or test runs) share one Redis; default "fencegate" */
  keyPrefix?: string
  /** how long to wait for a TCP connection, ms; default 1000 */
  connectTimeoutMs?: number
  /** longest pause between reconnection attempts, ms; default 2000 */
  maxBackoffMs?: number
  /** attempt log entries older than this are trimmed from the stream, ms; default 7 days */
  auditRetentionMs?: number
  /** replicas that must acknowledge a write before it counts (WAIT); default 0: no wait */
  replicas?: number
  /** WAIT's timeout, ms; default 250 */
  replicasTimeoutMs?: number
  /** the write sequence to follow (../state-loss/sequence.ts); default a new one */
  sequence?: WriteSequence
  /** Sentinels (host:port) to find the primary named `sentinelName` through; `url` then gives only credentials, TLS and database */
  sentinels?: string[]
  sentinelName?: string
  /** store.tls as node:tls options (../shared/tls.ts `storeTlsOptions`): the CA, the client certificate; a rediss:// URL without it trusts the system's CAs */
  tls?: ConnectionOptions
  /**
   * cluster: a command not answered after this long (redirections and retries included) is
   * given up by the client, ms; default 2000. The gateway's `store.timeout` answers the request
   * before that; this only bounds what is left running.
   */
  commandTimeoutMs?: number
  /**
   * where instants come from: 'store' (default) the server's TIME, inside every script; 'caller'
   * the `now` each call passes — for tests that drive time through it (the conformance suite)
   */
  clock?: 'store' | 'caller'
}
