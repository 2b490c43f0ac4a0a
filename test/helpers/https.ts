/**
 * HTTPS requests for the TLS tests, each on a new connection unless an agent is given: the reply
 * as ./http.ts gives it, plus the serial number of the certificate the server presented and the
 * ALPN protocol agreed.
 */
import https from 'node:https'
import net from 'node:net'
import type { TLSSocket } from 'node:tls'
import type { Reply } from './http.js'

export interface TlsReply extends Reply {
  /** the server certificate's serial number, upper-case hex */
  serial: string
  /** the ALPN protocol agreed, false when none */
  alpn: string | false
}

export interface TlsClient {
  /** the CA trusted (PEM) */
  ca: string
  /** a client certificate and its key (PEM) */
  cert?: string
  key?: string
}

export function httpsSend(url: string, client: TlsClient, opts: { method?: string; headers?: Record<string, string>; body?: string; agent?: https.Agent } = {}): Promise<TlsReply> {
  return new Promise((resolve, reject) => {
    const req = https.request(url, { method: opts.method ?? 'GET', headers: opts.headers, ca: client.ca, cert: client.cert, key: client.key, agent: opts.agent ?? false, ALPNProtocols: ['http/1.1'] } as https.RequestOptions, (res) => {
      const socket = res.socket as TLSSocket
      const serial = socket.getPeerCertificate().serialNumber
      const alpn = socket.alpnProtocol ?? false
      const chunks: Buffer[] = []
      res.on('data', (c: Buffer) => chunks.push(c))
      res.on('error', reject)
      res.on('end', () => {
        const body = Buffer.concat(chunks)
        resolve({ status: res.statusCode!, headers: res.headers, body, text: body.toString('utf8'), json: () => JSON.parse(body.toString('utf8')), serial, alpn })
      })
    })
    req.on('error', reject)
    req.end(opts.body)
  })
}

export const httpsPost = (url: string, client: TlsClient, body: unknown, headers: Record<string, string> = {}) =>
  httpsSend(url, client, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) })

/**
 * A cleartext HTTP/1.1 request written to `url`'s port as it is: resolves with every byte the
 * server sent back before it closed the connection (or after `ms`).
 */
export function cleartext(url: string, path = '/', ms = 2000): Promise<Buffer> {
  const { hostname, port } = new URL(url)
  return new Promise((resolve) => {
    const chunks: Buffer[] = []
    const s = net.connect(Number(port), hostname, () => s.write(`GET ${path} HTTP/1.1\r\nHost: ${hostname}\r\n\r\n`))
    const done = () => { clearTimeout(t); s.destroy(); resolve(Buffer.concat(chunks)) }
    const t = setTimeout(done, ms)
    s.on('data', (c: Buffer) => chunks.push(c))
    s.on('error', done)
    s.on('close', done)
  })
}
