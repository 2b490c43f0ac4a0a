/**
 * Decoding of what the server-side stores answer: the Redis scripts and the PostgreSQL functions
 * run the record state machine (./record-state.ts) on the server and reply with text fields; this
 * turns those fields into the `Store` results, once for both. The in-process stores (memory,
 * sqlite) get their results from record-state.ts directly.
 */
import type { ClaimResult, FenceResult, ProbeTake, ReleaseResult, ResolveResult, SettleResult, UnknownReason } from '../contract/store.js'
import { UNKNOWN_REASONS } from '../../outcomes.js'

const REASONS = new Set<string>(UNKNOWN_REASONS)

/** A stored reason; anything else (missing, or written by a later version) reads as `crash`. */
export const asReason = (s: string | null | undefined): UnknownReason =>
  (s && REASONS.has(s) ? (s as UnknownReason) : 'crash')

/** A fence's answer as the server wrote it: accepted, the mark after it, its since ('' or null: unknown), raised. */
export interface FenceFields {
  accepted: boolean
  highest: string
  since?: string | null
  raised?: boolean | null
}

export function fenceResult(f: FenceFields): FenceResult {
  const out: FenceResult = { accepted: f.accepted, highest: BigInt(f.highest) }
  if (f.since !== null && f.since !== undefined && f.since !== '') out.since = Number(f.since)
  if (f.raised) out.raised = true
  return out
}

/**
 * A claim's answer as the server wrote it: `kind` (a `ClaimResult` kind) and the fields that kind
 * carries — `after`/`abandoned` (claimed), `status`/`headers` (JSON header lines)/`body`
 * (completed), `status` (not_stored), `leaseUntil` (in_flight, epoch ms), `reason`/`abandoned`
 * (unknown). Numbers may arrive as text.
 * @throws Error on a kind this version does not know (a bug, or a newer server-side text)
 */
export interface ClaimFields {
  kind: string
  after?: string | null
  abandoned?: boolean | null
  status?: number | string | null
  headers?: string | null
  body?: Buffer | null
  leaseUntil?: number | string | null
  reason?: string | null
}

export function claimResult(f: ClaimFields): ClaimResult {
  switch (f.kind) {
    case 'claimed': {
      const out: ClaimResult = { kind: 'claimed' }
      if (f.after) out.after = asReason(f.after)
      if (f.abandoned) out.abandoned = true
      return out
    }
    case 'completed':
      return { kind: 'completed', response: { status: Number(f.status), headers: JSON.parse(f.headers ?? '[]'), body: f.body ? Buffer.from(f.body) : Buffer.alloc(0) } }
    case 'not_stored':
      return { kind: 'not_stored', status: Number(f.status ?? 0) }
    case 'in_flight':
      return { kind: 'in_flight', leaseUntil: Number(f.leaseUntil) }
    case 'unknown':
      return f.abandoned ? { kind: 'unknown', reason: asReason(f.reason), abandoned: true } : { kind: 'unknown', reason: asReason(f.reason) }
    case 'mismatch':
      return { kind: 'mismatch' }
    default:
      throw new Error(`the store answered a claim with "${f.kind}"`)
  }
}

/**
 * A resolution's answer: `kind` and its detail — the unknown reason (resolved) or the record's
 * state (refused).
 * @throws Error on a kind this version does not know
 */
export function resolveResult(kind: string, detail: string | null | undefined): ResolveResult {
  switch (kind) {
    case 'resolved': return { kind: 'resolved', reason: asReason(detail) }
    case 'not_found': return { kind: 'not_found' }
    case 'refused': return { kind: 'refused', state: detail as 'in_flight' | 'completed' | 'not_stored' }
    default: throw new Error(`the store answered a resolution with "${kind}"`)
  }
}

/**
 * A release's answer: `kind` (released, restored, not_held) and whether it undid an unknown
 * outcome its claim's own lapsed lease had made.
 * @throws Error on a kind this version does not know
 */
export function releaseResult(kind: string, lapsed: boolean | null | undefined): ReleaseResult {
  switch (kind) {
    case 'released':
    case 'restored':
      return lapsed ? { kind, lapsed: true } : { kind }
    case 'not_held': return { kind: 'not_held' }
    default: throw new Error(`the store answered a release with "${kind}"`)
  }
}

/**
 * A probe take's answer (`idempotency.settle`): `kind` (taken, not_due) and, taken, the probe
 * request, the new probe count, the unknown reason and whether the record was abandoned with it.
 * @throws Error on a kind this version does not know
 */
export function probeTakeResult(kind: string, probe: string | null | undefined, probes: number | string | null | undefined, reason: string | null | undefined, abandoned: boolean): ProbeTake {
  switch (kind) {
    case 'taken': {
      const out: ProbeTake = { kind: 'taken', probe: probe ?? '', probes: Number(probes), reason: asReason(reason) }
      if (abandoned) out.abandoned = true
      return out
    }
    case 'not_due': return { kind: 'not_due' }
    default: throw new Error(`the store answered a probe take with "${kind}"`)
  }
}

/**
 * A settlement's answer: `kind` (settled, moved) and, settled, the unknown reason it settled.
 * @throws Error on a kind this version does not know
 */
export function settleResult(kind: string, reason: string | null | undefined): SettleResult {
  switch (kind) {
    case 'settled': return { kind: 'settled', reason: asReason(reason) }
    case 'moved': return { kind: 'moved' }
    default: throw new Error(`the store answered a settlement with "${kind}"`)
  }
}
