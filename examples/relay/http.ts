/**
 * The small HTTP pieces the relay example shares (node:http only). Every request opens its own
 * connection (`agent: false`): a worker frozen with SIGSTOP must not wake up holding a pooled
 * socket the server closed while it slept.
 */
import http from 'node:http'

export interface Reply {
  status: number
  headers: Record<string, string>
  text: string
  /** the body parsed as JSON, or undefined */
  json: any
}

const flat = (h: http.IncomingHttpHeaders): Record<string, string> => {
  const out: Record<string, string> = {}
  for (const [k, v] of Object.entries(h)) if (v !== undefined) out[k] = Array.isArray(v) ? v.join(', ') : v
  return out
}

/** One request on a fresh connection; `body` objects are sent as JSON. Rejects on a socket error or after `timeoutMs`. */
export function call(method: string, url: string, body?: unknown, headers: Record<string, string> = {}, timeoutMs = 10_000): Promise<Reply> {
  const payload = body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body)
  const h: Record<string, string> = { ...headers }
  if (payload !== undefined) {
    h['content-type'] ??= 'application/json'
    h['content-length'] = String(Buffer.byteLength(payload))
  }
  return new Promise((resolve, reject) => {
    const req = http.request(url, { method, headers: h, agent: false, timeout: timeoutMs }, (res) => {
      const chunks: Buffer[] = []
      res.on('data', (c: Buffer) => chunks.push(c))
      res.on('error', reject)
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString('utf8')
        let json: unknown
        try { json = text ? JSON.parse(text) : undefined } catch { json = undefined }
        resolve({ status: res.statusCode ?? 0, headers: flat(res.headers), text, json })
      })
    })
    req.on('timeout', () => req.destroy(new Error(`${method} ${url}: no answer within ${timeoutMs} ms`)))
    req.on('error', reject)
    req.end(payload)
  })
}

/** Reads a request body as JSON; undefined when empty, throws on malformed JSON. */
export async function readJson(req: http.IncomingMessage): Promise<any> {
  const chunks: Buffer[] = []
  for await (const c of req) chunks.push(c as Buffer)
  const text = Buffer.concat(chunks).toString('utf8')
  return text ? JSON.parse(text) : undefined
}

export function sendJson(res: http.ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body)
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) })
  res.end(text)
}

export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms))
