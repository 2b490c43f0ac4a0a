/**
 * What the lease service answers (contract §3a): the lease as JSON, the problems of its table, and
 * the attempt-log entry of each decision on the resource's timeline.
 */
import type { Lease } from '../store/index.js'
import { LEASE_ROUTE, type AuditEntry } from '../store/index.js'
import { Problem, secondsUntil } from '../problems.js'
import { REPLICA } from '../audit/entry.js'

/** The body of 201 and 200: the lease, its token a decimal string, its end RFC 3339; `holder` left out for a reader without the token. */
export function leaseBody(l: Lease, withHolder = true): Record<string, string | number> {
  const body: Record<string, string | number> = { resource: l.resource, token: l.token.toString() }
  if (withHolder) body.holder = l.holder
  body.expiresAt = new Date(l.expiresAt).toISOString()
  body.ttlMs = l.ttlMs
  body.renewEveryMs = Math.floor(l.ttlMs / 3)
  return body
}

/** 409 lease-held: another holder's lease is live until its end. */
export const leaseHeld = (l: Lease): Problem =>
  new Problem('lease-held', `Another holder's lease on ${l.resource} is live until ${new Date(l.expiresAt).toISOString()}; ask again after it ends (Retry-After), or when its holder releases it.`,
    { resource: l.resource, holder: l.holder, expiresAt: new Date(l.expiresAt).toISOString() }, { 'retry-after': secondsUntil(l.expiresAt) })

/** 412 stale-fencing-token: `token` is not the resource's lease any more. */
export const staleLease = (resource: string, token: bigint, highest: bigint | undefined): Problem =>
  new Problem('stale-fencing-token', `Token ${token} is not the lease on ${resource} any more (it ended: taken over after it expired, released, or passed by a newer token); nothing was changed. Stop the work it guards; never retry with this token.`,
    { resource, token: token.toString(), ...(highest !== undefined ? { highestToken: highest.toString() } : {}) })

/** 400 lease-request-invalid, saying what. */
export const invalid = (detail: string): Problem => new Problem('lease-request-invalid', `${detail} Nothing was written.`)

/** What a lease entry holds besides the decision's own fields. */
export interface LeaseFacts {
  method: string
  status: number
  requestId: string
  durationMs: number
}

/**
 * One attempt-log entry of a lease decision (AuditEntry kind `lease`).
 * @param at when the decision was made (epoch ms): the instant the store was asked, or a lease's end
 */
export function leaseEntry(result: string, resource: string, f: LeaseFacts, l: { token: bigint; holder?: string; until?: number } | undefined, highest: bigint | undefined, at: number): AuditEntry {
  return {
    time: at,
    kind: 'lease',
    replica: REPLICA,
    route: LEASE_ROUTE,
    method: f.method,
    resource,
    token: l?.token.toString(),
    result,
    status: f.status,
    durationMs: Math.round(f.durationMs * 1000) / 1000,
    requestId: f.requestId,
    by: l?.holder,
    leaseUntil: l?.until,
    highestToken: highest?.toString(),
  }
}
