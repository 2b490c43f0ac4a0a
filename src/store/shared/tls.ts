/**
 * `store.tls` (contract §5b) as the store clients take it: its PEM files read (they were checked
 * with their YAML paths when the config was loaded, src/tls/check.ts), then ioredis's `tls` (and,
 * with Sentinels, `sentinelTLS` and `enableTLSForSentinelMode`, without which ioredis reaches
 * the primary a Sentinel named in cleartext), and pg's `ssl` with verify-full's checks (the CA,
 * then the host name). Peer verification is always on.
 */
import { readFileSync } from 'node:fs'
import { isIP } from 'node:net'
import type { ConnectionOptions } from 'node:tls'
import type { Config } from '../../config/schema.js'

type StoreConfig = Pick<Config['store'], 'tls'>

/**
 * The node:tls options of `store.tls`: the CA trusted instead of the system's, the client
 * certificate and key. undefined without store.tls.
 * @throws Error `store.tls.<key>: cannot read <file>: …` when a file went away since the check
 */
export function storeTlsOptions(store: StoreConfig): ConnectionOptions | undefined {
  const t = store.tls
  if (!t) return undefined
  const read = (key: 'ca' | 'cert' | 'key') => {
    const file = t[key]
    if (file === undefined) return undefined
    try {
      return readFileSync(file, 'utf8')
    } catch (e) {
      throw new Error(`store.tls.${key}: cannot read ${file}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`)
    }
  }
  const ca = read('ca')
  const cert = read('cert')
  const key = read('key')
  return { ...(ca ? { ca } : {}), ...(cert ? { cert, key } : {}), rejectUnauthorized: true }
}

/** What ioredis is given for TLS. */
export interface RedisTls { tls?: ConnectionOptions; sentinelTLS?: ConnectionOptions; enableTLSForSentinelMode?: boolean }

/**
 * ioredis options for a store URL: `rediss://` turns TLS on (with store.tls's options, else the
 * system's CAs); one server and a Cluster's nodes take `tls`; with Sentinels the Sentinels' own
 * links (`sentinelTLS`) and the primary's (`tls`, used only with `enableTLSForSentinelMode`) are
 * both TLS. `{}` for `redis://`.
 */
export function redisTls(url: string | undefined, tls: ConnectionOptions | undefined, o: { sentinels: boolean }): RedisTls {
  const on = tls !== undefined || (url ?? '').startsWith('rediss://')
  if (!on) return {}
  const t: ConnectionOptions = tls ?? { rejectUnauthorized: true }
  return o.sentinels ? { tls: t, sentinelTLS: t, enableTLSForSentinelMode: true } : { tls: t }
}

/**
 * pg's connection settings for a postgres store: with `tls`, the URL without `sslmode` and its
 * file keys (pg lets the URL's TLS settings replace the `ssl` object) and `ssl` verifying the
 * server's certificate against the CA and its name against the URL's host, as
 * sslmode=verify-full does. Without `tls`, the URL as it is.
 */
export function pgConnection(url: string, tls: ConnectionOptions | undefined): { connectionString: string; ssl?: ConnectionOptions } {
  if (!tls) return { connectionString: url }
  const u = new URL(url)
  for (const k of ['sslmode', 'sslrootcert', 'sslcert', 'sslkey']) u.searchParams.delete(k)
  const host = decodeURIComponent(u.hostname).replace(/^\[|\]$/g, '')
  return { connectionString: u.toString(), ssl: { ...tls, ...(host && !isIP(host) ? { servername: host } : {}) } }
}
