/**
 * The lease state machine (../contract/leases.ts states what it promises), as pure functions of
 * the stored row, the resource's high-water mark and the instant: the memory and sqlite stores
 * run it as it is; the Redis script (../redis/lua-leases.ts) and the PostgreSQL function
 * (../postgres/lease-functions.ts) are the same table in their languages, held to it by one
 * conformance suite.
 */
import { LEASE_TOKENS_EXHAUSTED, MAX_LEASE_TOKEN, type Lease, type LeaseChange, type LeaseGrant } from '../contract/leases.js'
import { StoreError } from '../contract/errors.js'

/** A resource's lease row: its token, holder, end (epoch ms, the store's clock), length, and whether it was released. */
export interface LeaseRow {
  token: bigint
  holder: string
  expiresAt: number
  ttlMs: number
  released: boolean
}

const leaseOf = (resource: string, r: LeaseRow): Lease => ({ resource, token: r.token, holder: r.holder, expiresAt: r.expiresAt, ttlMs: r.ttlMs })

/** Whether the row is a live lease at `now`. */
const isLive = (r: LeaseRow | undefined, now: number): r is LeaseRow => r !== undefined && !r.released && r.expiresAt > now

/**
 * Acquire: another holder's live lease → held, nothing written; else the next token, above every
 * token issued and the mark, written as the new row, and the mark raised to it.
 * @returns the answer, and — when granted — the row to write and the mark to set
 * @throws StoreError (LEASE_TOKENS_EXHAUSTED) when the newest token is MAX_LEASE_TOKEN: nothing to write
 */
export function decideAcquire(resource: string, row: LeaseRow | undefined, highest: bigint | undefined, holder: string, ttlMs: number, now: number): { result: LeaseGrant; write?: LeaseRow } {
  if (isLive(row, now) && row.holder !== holder) return { result: { granted: false, held: leaseOf(resource, row) } }
  let top = highest ?? 0n
  if (row && row.token > top) top = row.token
  if (top >= MAX_LEASE_TOKEN) throw new StoreError(LEASE_TOKENS_EXHAUSTED, 'lease_acquire')
  const write: LeaseRow = { token: top + 1n, holder, expiresAt: now + ttlMs, ttlMs, released: false }
  const result: LeaseGrant = { granted: true, lease: leaseOf(resource, write) }
  if (row && !row.released) result.previous = { token: row.token, holder: row.holder, expiresAt: row.expiresAt, expired: row.expiresAt <= now }
  return { result, write }
}

/** The resource's newest token: the lease's or the mark's, the higher. */
const newest = (row: LeaseRow | undefined, highest: bigint | undefined): bigint | undefined =>
  row === undefined ? highest : highest === undefined || row.token > highest ? row.token : highest

/** Whether `token` is still the resource's lease: its row's, not released, and no newer token fenced. */
const holds = (row: LeaseRow | undefined, highest: bigint | undefined, token: bigint): row is LeaseRow =>
  row !== undefined && !row.released && row.token === token && (highest === undefined || highest <= token)

/** Renew: the lease under `token` extended to `now` + its ttl; else stale, nothing written. */
export function decideRenew(resource: string, row: LeaseRow | undefined, highest: bigint | undefined, token: bigint, now: number): { result: LeaseChange; write?: LeaseRow } {
  if (!holds(row, highest, token)) return { result: { done: false, highest: newest(row, highest) } }
  const write: LeaseRow = { ...row, expiresAt: now + row.ttlMs }
  return { result: { done: true, lease: leaseOf(resource, write) }, write }
}

/** Release: the lease under `token` ended (its token kept); else stale, nothing written. */
export function decideRelease(resource: string, row: LeaseRow | undefined, highest: bigint | undefined, token: bigint): { result: LeaseChange; write?: LeaseRow } {
  if (!holds(row, highest, token)) return { result: { done: false, highest: newest(row, highest) } }
  return { result: { done: true, lease: leaseOf(resource, row) }, write: { ...row, released: true } }
}

/** Read: the live lease, or undefined. */
export const readOf = (resource: string, row: LeaseRow | undefined, now: number): Lease | undefined =>
  isLive(row, now) ? leaseOf(resource, row) : undefined
