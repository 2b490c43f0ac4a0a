/**
 * A route's upstream TLS (`routes[].upstream.tls`, contract §5b) as undici's `connect` options
 * for that route's Pool: `ca` trusted instead of the system's CAs, the client certificate
 * presented (mutual TLS), `servername` sent as SNI and checked in the certificate (default: the
 * URL's host, which undici sends itself). Peer verification always on.
 */
import { createHash } from 'node:crypto'
import { isIP } from 'node:net'
import type { ConnectionOptions } from 'node:tls'
import type { RouteConfig } from '../config/schema.js'
import type { Metrics } from '../telemetry/metrics.js'
import { contextOptions, loadTls, type TlsMaterial } from './material.js'
import { notAfter } from './pem.js'

/** What a route's Pool is made with: undici `connect` TLS options, and what they were read from. */
export interface UpstreamTls {
  /** spread into undici's `connect` options (beside `timeout`) */
  connect: ConnectionOptions
  material: TlsMaterial
  /**
   * a digest of the files' contents and the servername: a reload whose `fingerprint` differs
   * needs a new Pool for the route (the old one drained), an equal one can keep it
   */
  fingerprint: string
}

/**
 * Reads route `i`'s upstream TLS files. undefined for an `http://` upstream or one without
 * `upstream.tls` (an `https://` upstream without it trusts the system's CAs, as undici does).
 * @throws TlsFilesError naming `routes[i].upstream.tls.<key>` when a file cannot be used
 */
export function upstreamTls(route: RouteConfig, i: number): UpstreamTls | undefined {
  const block = route.upstream.tls
  if (!block || !route.upstream.url.startsWith('https:')) return undefined
  const material = loadTls(`routes[${i}].upstream.tls`, block)
  const host = new URL(route.upstream.url).hostname.replace(/^\[|\]$/g, '')
  const servername = block.servername ?? (isIP(host) ? undefined : host)
  const connect: ConnectionOptions = {
    ...contextOptions(material),
    rejectUnauthorized: true,
    ...(servername ? { servername } : {}),
    ALPNProtocols: ['http/1.1'],
  }
  const fingerprint = createHash('sha256').update(JSON.stringify([material.ca ?? '', material.cert ?? '', material.key ?? '', servername ?? ''])).digest('hex')
  return { connect, material, fingerprint }
}

/** fencegate_tls_certificate_expiry_seconds{route}: the client certificate a route presents (removed when none). */
export function recordUpstreamExpiry(metrics: Pick<Metrics, 'certificateExpiry'>, route: string, tls: UpstreamTls | undefined): void {
  metrics.certificateExpiry({ route }, tls?.material.leaf ? notAfter(tls.material.leaf) : undefined)
}
