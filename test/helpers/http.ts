import { request as undiciRequest, Agent } from 'undici'

// A fresh connection per request keeps tests independent of keep-alive state.
const agent = new Agent({ pipelining: 0, keepAliveTimeout: 1 })

export interface Reply {
  status: number
  headers: Record<string, string | string[] | undefined>
  body: Buffer
  text: string
  json<T = any>(): T
}

/** One request through undici; resolves with status, headers and the whole body. */
export async function send(url: string, opts: { method?: string; headers?: Record<string, string | string[]>; body?: string | Buffer } = {}): Promise<Reply> {
  const r = await undiciRequest(url, { method: (opts.method ?? 'GET') as 'GET', headers: opts.headers, body: opts.body, dispatcher: agent })
  const body = Buffer.from(await r.body.arrayBuffer())
  return { status: r.statusCode, headers: r.headers, body, text: body.toString('utf8'), json: () => JSON.parse(body.toString('utf8')) }
}

/** POST helper with fencing token and idempotency key. */
export function post(url: string, body: unknown, headers: Record<string, string | string[]> = {}): Promise<Reply> {
  return send(url, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: typeof body === 'string' ? body : JSON.stringify(body) })
}

/** Reads the value of a metric sample from a Prometheus exposition, 0 when absent. */
export function metric(exposition: string, name: string, labels: Record<string, string> = {}): number {
  let total = 0
  for (const line of exposition.split('\n')) {
    if (!line.startsWith(name)) continue
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (.+)$/.exec(line)
    if (!m || m[1] !== name) continue
    const got = Object.fromEntries([...(m[2] ?? '').matchAll(/(\w+)="([^"]*)"/g)].map((x) => [x[1], x[2]]))
    if (Object.entries(labels).every(([k, v]) => got[k] === v)) total += Number(m[3])
  }
  return total
}

export async function metrics(adminUrl: string, token?: string): Promise<string> {
  return (await send(`${adminUrl}/metrics`, { headers: token ? { authorization: `Bearer ${token}` } : {} })).text
}
