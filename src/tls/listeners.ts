/**
 * HTTPS on the proxy and admin listeners (contract §5b): Node's own `https`, HTTP/1.1 only
 * (ALPN `http/1.1`), TLS 1.2 and up; with `clientCa`, a client must present a certificate it
 * signed or the handshake fails. A cleartext request on the port never reaches a handler: the
 * TLS layer drops a connection that does not start with a handshake.
 *
 * Rotation: on reload the files are read again and `setSecureContext` applied, so new
 * connections get the new certificate and open ones keep theirs.
 */
import type { Server } from 'node:http'
import type { ServerOptions } from 'node:https'
import type { Server as TlsServer } from 'node:tls'
import type { Config } from '../config/schema.js'
import type { ListenerTlsConfig } from '../config/tls.js'
import type { Metrics } from '../telemetry/metrics.js'
import { contextOptions, loadTls, type TlsMaterial } from './material.js'
import { notAfter } from './pem.js'

export type ListenerName = 'proxy' | 'admin'

const AT: Record<ListenerName, string> = { proxy: 'tls', admin: 'admin.tls' }
const blockOf = (config: Config, which: ListenerName): ListenerTlsConfig | undefined => (which === 'proxy' ? config.tls : config.admin.tls)

/** What both a new server and `setSecureContext` take: the context and the protocol floor. */
const contextOf = (m: TlsMaterial) => ({ ...contextOptions(m), minVersion: 'TLSv1.2' as const, honorCipherOrder: true })

/** A listener's TLS, read: the server options and the certificate served. */
export interface ListenerTls { options: ServerOptions; material: TlsMaterial }

/**
 * Reads a listener's TLS files. undefined when the listener is plain HTTP.
 * @throws TlsFilesError when a file cannot be read or parsed (each problem with its YAML path)
 */
export function listenerTls(config: Config, which: ListenerName): ListenerTls | undefined {
  const block = blockOf(config, which)
  if (!block) return undefined
  const material = loadTls(AT[which], block)
  const verifyClients = block.clientCa !== undefined
  return {
    material,
    options: { ...contextOf(material), ALPNProtocols: ['http/1.1'], requestCert: verifyClients, rejectUnauthorized: true },
  }
}

/** Sets fencegate_tls_certificate_expiry_seconds{listener} from what the listener serves (removed when plain). */
export function recordListenerExpiry(metrics: Pick<Metrics, 'certificateExpiry'>, which: ListenerName, tls: ListenerTls | undefined): void {
  metrics.certificateExpiry({ listener: which }, tls?.material.leaf ? notAfter(tls.material.leaf) : undefined)
}

/** The listeners a rotation applies to: a server per listener that serves HTTPS in this process. */
export type Listeners = Partial<Record<ListenerName, Server>>

/**
 * Reads the listeners' TLS files of `next` and returns what applies them; nothing is applied
 * until `apply()` is called, so a reload refused for another reason keeps the running ones.
 * @throws TlsFilesError when a file cannot be read or parsed: the running certificates stay
 */
export function prepareRotation(next: Config, listeners: Listeners, metrics: Pick<Metrics, 'certificateExpiry'>): () => void {
  const read = (Object.keys(listeners) as ListenerName[]).filter((w) => listeners[w]).map((w) => [w, listenerTls(next, w)] as const)
  return () => {
    for (const [which, tls] of read) {
      if (!tls) continue // TLS turned on or off needs a restart (src/reload.ts refuses it)
      ;(listeners[which] as unknown as TlsServer).setSecureContext(contextOf(tls.material))
      recordListenerExpiry(metrics, which, tls)
    }
  }
}

/** Whether a server is the TLS one (its URLs are https://). */
export const servesTls = (server: object): boolean => typeof (server as { setSecureContext?: unknown }).setSecureContext === 'function'
