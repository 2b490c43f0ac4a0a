import { expect } from 'vitest'
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

/** What `expectProblem` reads of a response: a `Reply`, or status, headers and body of any client. */
export interface ProblemResponse {
  status: number
  /** by lower-case name */
  headers: Record<string, unknown>
  /** the body; or give it as `text` */
  body?: Buffer | string
  text?: string
}

export interface ProblemExpectation {
  status: number
  /** the problem's name: the body's `type` must be `urn:fencegate:problem:<type>` */
  type: string
  /** the title, exactly (a string) or matching (a RegExp) */
  title?: string | RegExp
  /** the detail contains each string and matches each RegExp */
  detail?: string | RegExp | (string | RegExp)[]
  /** the request id the body's `instance` must hold */
  instance?: string
  /** further members of the body, compared with toMatchObject: `{ token: '9', highestToken: '10' }` */
  members?: Record<string, unknown>
  /** response headers, each equal to the string or matching the RegExp: `{ 'retry-after': '1' }` */
  headers?: Record<string, string | RegExp>
  /** names the case in failure messages, where one test checks several */
  message?: string
}

/**
 * Asserts a problem response the gateway made itself (RFC 9457, contract §5): the status; the
 * Content-Type `application/problem+json`; `type` `urn:fencegate:problem:<type>`; `status`
 * equal to the response's; a non-empty `title` and `detail`; Stripe's `error` member with
 * `code` the problem's name and `message` the detail; `instance` equal to the X-Request-Id the
 * response echoes, when it echoes one. Then whatever `want` adds. Returns the parsed body.
 *
 * ```ts
 * expectProblem(r, { status: 412, type: 'stale-fencing-token', members: { token: '9', highestToken: '10' } })
 * ```
 */
export function expectProblem(res: ProblemResponse, want: ProblemExpectation): Record<string, any> {
  const text = res.body !== undefined ? res.body.toString() : res.text ?? ''
  const what = `${want.message ? `${want.message}: ` : ''}${res.status} ${text.slice(0, 500)}`
  expect(res.status, what).toBe(want.status)
  expect(res.headers['content-type'], `content-type of ${what}`).toBe('application/problem+json')
  let p: Record<string, any>
  try {
    p = JSON.parse(text)
  } catch {
    throw new Error(`a problem body is JSON; got ${JSON.stringify(text.slice(0, 500))}`)
  }
  expect(p.type, what).toBe(`urn:fencegate:problem:${want.type}`)
  expect(p.status, what).toBe(want.status)
  expect(p.title, what).toEqual(expect.stringMatching(/./))
  expect(p.detail, what).toEqual(expect.stringMatching(/./))
  expect(p.error, `the error member of ${what}`).toMatchObject({ type: expect.any(String), code: want.type, message: p.detail })
  const id = res.headers['x-request-id']
  if (typeof id === 'string') expect(p.instance, `instance of ${what}`).toBe(id)
  if (want.instance !== undefined) expect(p.instance, what).toBe(want.instance)
  if (typeof want.title === 'string') expect(p.title, what).toBe(want.title)
  else if (want.title) expect(p.title, what).toMatch(want.title)
  for (const d of want.detail === undefined ? [] : Array.isArray(want.detail) ? want.detail : [want.detail]) {
    if (typeof d === 'string') expect(p.detail, what).toContain(d)
    else expect(p.detail, what).toMatch(d)
  }
  if (want.members) expect(p, what).toMatchObject(want.members)
  for (const [name, v] of Object.entries(want.headers ?? {})) {
    if (typeof v === 'string') expect(res.headers[name], `${name} of ${what}`).toBe(v)
    else expect(res.headers[name], `${name} of ${what}`).toEqual(expect.stringMatching(v))
  }
  return p
}
