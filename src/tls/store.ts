/**
 * `store.tls` (contract §5b) as the store clients take it: ioredis's `tls` (and, with Sentinels,
 * `sentinelTLS` and `enableTLSForSentinelMode`, without which ioredis reaches the primary it was
 * told of in cleartext), and pg's `ssl` with verify-full's checks (the CA, then the host name).
 */
import { isIP } from 'node:net'
import type { ConnectionOptions } from 'node:tls'
import type { Config } from '../config/schema.js'
import type { Metrics } from '../telemetry/metrics.js'
import { contextOptions, loadTls, type TlsMaterial } from './material.js'
import { notAfter } from './pem.js'

type StoreConfig = Config['store']

/** @throws TlsFilesError naming `store.tls.<key>` when a file cannot be used; undefined without store.tls */
export const storeTlsMaterial = (store: StoreConfig): TlsMaterial | undefined => (store.tls ? loadTls('store.tls', store.tls) : undefined)

const verified = (m: TlsMaterial): ConnectionOptions => ({ ...contextOptions(m), rejectUnauthorized: true })

/**
 * ioredis options for a `rediss://` store: one server and a Cluster's nodes take `tls`; with
 * Sentinels the Sentinels' own links (`sentinelTLS`) and the primary's (`tls`, used only with
 * `enableTLSForSentinelMode`) are both TLS. Spread into the options beside what
 * src/store/redis/connection.ts sets. `{}` when the store has no TLS.
 */
export function redisTlsOptions(m: TlsMaterial | undefined, o: { sentinels: boolean }): { tls?: ConnectionOptions; sentinelTLS?: ConnectionOptions; enableTLSForSentinelMode?: boolean } {
  if (!m) return {}
  const tls = verified(m)
  return o.sentinels ? { tls, sentinelTLS: tls, enableTLSForSentinelMode: true } : { tls }
}

/**
 * pg's connection settings for a postgres store with `store.tls`: the URL without `sslmode`
 * (pg lets the URL's TLS settings replace the `ssl` object) and `ssl` verifying the server's
 * certificate against `ca` and its name against the URL's host, as sslmode=verify-full does.
 */
export function pgTlsOptions(url: string, m: TlsMaterial | undefined): { connectionString: string; ssl?: ConnectionOptions } {
  if (!m) return { connectionString: url }
  const u = new URL(url)
  for (const k of ['sslmode', 'sslrootcert', 'sslcert', 'sslkey']) u.searchParams.delete(k)
  const host = decodeURIComponent(u.hostname).replace(/^\[|\]$/g, '')
  return { connectionString: u.toString(), ssl: { ...verified(m), ...(host && !isIP(host) ? { servername: host } : {}) } }
}

/** fencegate_tls_certificate_expiry_seconds{store}: the client certificate the store link presents (removed when none). */
export function recordStoreExpiry(metrics: Pick<Metrics, 'certificateExpiry'>, store: StoreConfig, m: TlsMaterial | undefined): void {
  metrics.certificateExpiry({ store: store.kind }, m?.leaf ? notAfter(m.leaf) : undefined)
}
