/**
 * `store.tls` (contract §5b) as the store clients take it: ioredis's `tls` (and, with Sentinels,
 * `sentinelTLS` and `enableTLSForSentinelMode`, without which ioredis reaches the primary it was
 * told of in cleartext), and pg's `ssl` with verify-full's checks (the CA, then the host name).
 */
import type { ConnectionOptions } from 'node:tls'
import type { Config } from '../config/schema.js'
import type { Metrics } from '../telemetry/metrics.js'
import { pgConnection, redisTls, type RedisTls } from '../store/index.js'
import { contextOptions, loadTls, type TlsMaterial } from './material.js'
import { notAfter } from './pem.js'

type StoreConfig = Config['store']

/** @throws TlsFilesError naming `store.tls.<key>` when a file cannot be used; undefined without store.tls */
export const storeTlsMaterial = (store: StoreConfig): TlsMaterial | undefined => (store.tls ? loadTls('store.tls', store.tls) : undefined)

const verified = (m: TlsMaterial): ConnectionOptions => ({ ...contextOptions(m), rejectUnauthorized: true })

/**
 * ioredis options for a `rediss://` store with this material (src/store/shared/tls.ts
 * `redisTls`, which the Redis store uses): one server and a Cluster's nodes take `tls`; with
 * Sentinels the Sentinels' own links (`sentinelTLS`) and the primary's (`tls`, used only with
 * `enableTLSForSentinelMode`) are both TLS. `{}` when the store has no TLS.
 */
export const redisTlsOptions = (m: TlsMaterial | undefined, o: { sentinels: boolean }): RedisTls => (m ? redisTls(undefined, verified(m), o) : {})

/**
 * pg's connection settings for a postgres store with `store.tls` (src/store/shared/tls.ts
 * `pgConnection`, which the PostgreSQL store uses): the URL without `sslmode` (pg lets the URL's
 * TLS settings replace the `ssl` object) and `ssl` verifying the server's certificate against
 * `ca` and its name against the URL's host, as sslmode=verify-full does.
 */
export const pgTlsOptions = (url: string, m: TlsMaterial | undefined): { connectionString: string; ssl?: ConnectionOptions } => pgConnection(url, m && verified(m))

/** fencegate_tls_certificate_expiry_seconds{store}: the client certificate the store link presents (removed when none). */
export function recordStoreExpiry(metrics: Pick<Metrics, 'certificateExpiry'>, store: StoreConfig, m: TlsMaterial | undefined): void {
  metrics.certificateExpiry({ store: store.kind }, m?.leaf ? notAfter(m.leaf) : undefined)
}
