/**
 * The lease service's calls (contract §3a), one request each, answers decided by
 * ./decisions.ts: acquire (POST), renew (PUT), release (DELETE) and read (GET) under
 * `{gateway}{path}/{resource}`, the resource percent-encoded.
 */
import { decide, type Decision } from './decisions.js'
import { parseBody, type FetchLike } from './send.js'

/** The lease service's default prefix on the proxy listener (contract §3a `leases.path`). */
export const LEASES_PATH = '/_fencegate/leases'

/** Where and how to reach the lease service. */
export interface LeaseService {
  /** the gateway's base URL, e.g. http://127.0.0.1:8080 */
  gateway: string
  /** `leases.path` (default /_fencegate/leases) */
  path?: string
  /** `leases.token`: sent as `Authorization: Bearer <token>` when set */
  authToken?: string
  /** default the global fetch */
  fetch?: FetchLike
}

/** A lease as the service grants it (contract §3a); `token` is a decimal string. */
export interface LeaseBody {
  resource: string
  token: string
  holder: string
  /** RFC 3339, on the store's clock */
  expiresAt: string
  ttlMs: number
  renewEveryMs: number
}

/** One call's answer: the decision, the status, the body, and when the request was sent (epoch ms, this process's clock). */
export interface LeaseAnswer {
  decision: Decision
  status: number
  body: any
  sentAt: number
  /** the error when no answer came */
  error?: unknown
}

/** The URL of `resource`'s lease. */
export const leaseUrl = (s: LeaseService, resource: string): string =>
  `${s.gateway.replace(/\/+$/, '')}${s.path ?? LEASES_PATH}/${encodeURIComponent(resource)}`

async function call(s: LeaseService, method: string, resource: string, headers: Record<string, string>, body?: unknown, signal?: AbortSignal): Promise<LeaseAnswer> {
  const sentAt = Date.now()
  const h: Record<string, string> = { ...headers }
  if (s.authToken) h.authorization = `Bearer ${s.authToken}`
  if (body !== undefined) h['content-type'] = 'application/json'
  try {
    const r = await (s.fetch ?? globalThis.fetch)(leaseUrl(s, resource), { method, headers: h, body: body === undefined ? undefined : JSON.stringify(body), signal })
    const text = await r.text()
    const parsed = text ? parseBody(text, r.headers.get('content-type')) : undefined
    return { decision: decide({ status: r.status, headers: r.headers, body: parsed }), status: r.status, body: parsed, sentAt }
  } catch (error) {
    return { decision: decide({ status: 0 }), status: 0, body: undefined, sentAt, error }
  }
}

/** How a ttl is sent: a duration text as given ("30s"), or ms as "<n>ms". */
const ttlText = (ttl: string | number): string => (typeof ttl === 'number' ? `${Math.round(ttl)}ms` : ttl)

/**
 * POST: asks for the lease. 201 grants it (decision `done`); 409 lease-held (`retry-after`,
 * body with `holder`, `expiresAt`); 503 (`backoff`). Never throws.
 */
export const acquireLease = (s: LeaseService, resource: string, holder: string, ttl?: string | number, signal?: AbortSignal): Promise<LeaseAnswer> =>
  call(s, 'POST', resource, {}, { holder, ...(ttl !== undefined && { ttl: ttlText(ttl) }) }, signal)

/** PUT with the lease's token: 200 renewed (`done`), 412 the lease is gone (`stop`). Never throws. */
export const renewLease = (s: LeaseService, resource: string, token: string, signal?: AbortSignal): Promise<LeaseAnswer> =>
  call(s, 'PUT', resource, { 'fencing-token': token }, undefined, signal)

/** DELETE with the lease's token: 204 released (`done`), 412 the lease was gone already (`stop`). Never throws. */
export const releaseLease = (s: LeaseService, resource: string, token: string, signal?: AbortSignal): Promise<LeaseAnswer> =>
  call(s, 'DELETE', resource, { 'fencing-token': token }, undefined, signal)

/** GET: 200 the live lease, 404 none. Never throws. */
export const readLease = (s: LeaseService, resource: string, signal?: AbortSignal): Promise<LeaseAnswer> =>
  call(s, 'GET', resource, {}, undefined, signal)
