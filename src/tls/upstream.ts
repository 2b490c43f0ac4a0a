/**
 * A route's upstream TLS (`routes[].upstream.tls`, contract §5b) as undici's `connect` options
 * for that route's Pool: `ca` trusted instead of the system's CAs, the client certificate
 * presented (mutual TLS), `servername` sent as SNI and checked in the certificate (default: the
 * URL's host, which undici sends itself). Peer verification always on.
 */
import { createHash } from 'node:crypto'
import { isIP } from 'node:net'
import type { ConnectionOptions } from 'node:tls'
import { buildConnector } from 'undici'
import { handshakeRefused } from './reasons.js'
import type { Config, RouteConfig } from '../config/schema.js'
import type { Metrics } from '../telemetry/metrics.js'
import { contextOptions, loadTls, TlsFilesError, type TlsMaterial } from './material.js'
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

/**
 * Every route's upstream TLS, in route order (undefined for a route without it): read before a
 * generation is built, so a reload whose files cannot be used is refused before anything changes.
 * @throws TlsFilesError listing the problems of every route, each with its YAML path
 */
export function routesTls(config: Config): (UpstreamTls | undefined)[] {
  const problems: TlsFilesError['problems'] = []
  const out = config.routes.map((r, i) => {
    try {
      return upstreamTls(r, i)
    } catch (e) {
      if (!(e instanceof TlsFilesError)) throw e
      problems.push(...e.problems)
      return undefined
    }
  })
  if (problems.length) throw new TlsFilesError(problems)
  return out
}

/** fencegate_tls_certificate_expiry_seconds{route}: the client certificate a route presents (removed when none). */
export function recordUpstreamExpiry(metrics: Pick<Metrics, 'certificateExpiry'>, route: string, tls: UpstreamTls | undefined): void {
  metrics.certificateExpiry({ route }, tls?.material.leaf ? notAfter(tls.material.leaf) : undefined)
}

/** A route's undici `connect` with upstream TLS, and what it learnt of refused handshakes. */
export interface UpstreamConnector {
  connect: buildConnector.connector
  /**
   * The TLS alert with which the upstream refused the handshake of the connection `error` came
   * from (undici's SocketError names it by its local port), or undefined.
   */
  refusal(error: unknown): Error | undefined
}

/**
 * undici's connector with the route's TLS options, keeping the alert a server refused our client
 * certificate with: with TLS 1.3 the client's side of the handshake ends first, undici writes
 * the request, and the alert that follows reaches the caller only as "other side closed". Kept
 * until the one request that connection carried (pipelining 1) reads it, at most a second after
 * the connection closed, so a later connection from the same local port is never taken for it.
 * @param timeoutMs `upstream.connectTimeout`
 */
export function upstreamConnector(tls: UpstreamTls, timeoutMs: number): UpstreamConnector {
  const build = buildConnector({ ...tls.connect, timeout: timeoutMs } as buildConnector.BuildOptions)
  const alerts = new Map<number, Error>()
  const connect: buildConnector.connector = (options, callback) => build(options, (err, socket) => {
    if (socket) {
      const port = socket.localPort
      socket.once('error', (e: Error) => {
        if (port === undefined || !handshakeRefused(e)) return
        alerts.set(port, e)
        socket.once('close', () => setTimeout(() => { if (alerts.get(port) === e) alerts.delete(port) }, 1000).unref())
      })
    }
    // undici's callback type splits the two cases; one call passes either
    ;(callback as (e: Error | null, s: typeof socket) => void)(err, socket)
  })
  const refusal = (error: unknown): Error | undefined => {
    const port = (error as { socket?: { localPort?: number } } | undefined)?.socket?.localPort
    const alert = port === undefined ? undefined : alerts.get(port)
    if (alert) alerts.delete(port!)
    return alert
  }
  return { connect, refusal }
}
