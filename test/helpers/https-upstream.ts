/**
 * An HTTPS upstream for the TLS tests: node:https with a server certificate, optionally demanding
 * a client certificate signed by `clientCa`. Records every request with the client certificate's
 * serial and the SNI name it came with; answers 201 JSON {n, url} (n counts requests).
 *
 * ```ts
 * const up = await startHttpsUpstream({ cert: server, clientCa: pki.ca.certPem })
 * // … a gateway route with upstream https://127.0.0.1:${up.port} and upstream.tls …
 * expect(up.seen[0].clientSerial).toBe(client.serial)
 * ```
 */
import https from 'node:https'
import type { AddressInfo } from 'node:net'
import type { TLSSocket } from 'node:tls'
import type { Pem } from './certs.js'

export interface HttpsSeen {
  method: string
  url: string
  /** the client certificate's serial, upper-case hex; undefined when none was presented */
  clientSerial: string | undefined
  /** the SNI name the client sent; false when none */
  servername: string | false
}

export interface HttpsUpstream {
  url: string
  port: number
  seen: HttpsSeen[]
  /** requests received whose path starts with `prefix` */
  count(prefix?: string): number
  close(): Promise<void>
}

export async function startHttpsUpstream(o: { cert: Pem; clientCa?: string }): Promise<HttpsUpstream> {
  const seen: HttpsSeen[] = []
  const server = https.createServer({
    cert: o.cert.certPem,
    key: o.cert.keyPem,
    ...(o.clientCa ? { ca: o.clientCa, requestCert: true, rejectUnauthorized: true } : {}),
  }, (req, res) => {
    const socket = req.socket as TLSSocket
    const peer = socket.getPeerCertificate()
    const serial = peer && 'serialNumber' in peer && peer.serialNumber ? peer.serialNumber.toUpperCase() : undefined
    seen.push({ method: req.method!, url: req.url ?? '/', clientSerial: serial, servername: (socket as TLSSocket & { servername?: string | false }).servername ?? false })
    req.resume()
    req.on('end', () => {
      res.writeHead(201, { 'content-type': 'application/json' })
      res.end(JSON.stringify({ n: seen.length, url: req.url }))
    })
  })
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r))
  const port = (server.address() as AddressInfo).port
  return {
    url: `https://127.0.0.1:${port}`,
    port,
    seen,
    count: (prefix = '') => seen.filter((s) => s.url.startsWith(prefix)).length,
    close: () => new Promise<void>((r) => { server.closeAllConnections(); server.close(() => r()) }),
  }
}
