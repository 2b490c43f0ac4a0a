/**
 * The idempotency record state machine, shared by the stores that run it in-process (memory,
 * sqlite). Stores call `decideClaim` inside their own atomic section (a synchronous block, a
 * transaction); stores that run server-side scripts (redis, postgres) implement the same table.
 *
 *   (none | expired) --claim--> in_flight --finish--> completed | not_stored | unknown
 *   in_flight --release--> (none), or the unknown outcome it took over (`after`)
 *   in_flight past lease --claim--> unknown(crash) or taken over
 *   unknown(crash) its own lease made --release by that claim--> as release of in_flight
 *   unknown --claim with retryUnknown--> in_flight (a possible duplicate effect)
 *   unknown | in_flight past lease --resolve failed--> (none)   --resolve completed--> not_stored (status 0)
 *   unknown (with a probe) | in_flight past lease --takeProbe due--> unknown, probes + 1
 *   unknown with that probe count --settle applied--> completed   --settle not_applied--> (none)
 */
import type { ClaimRequest, ClaimResult, Completion, ProbeTake, RecordKey, ReleaseResult, Resolution, ResolveResult, Settlement, SettleResult, StoredResponse, UnknownReason } from '../contract/store.js'

/**
 * The one string a record is stored under: route, scope and key, each on its own line. The
 * route comes first, so a route's records share a prefix (`Store.unknowns` with `route`).
 */
export const recordId = (k: RecordKey): string => `${k.route}\n${k.scope}\n${k.key}`

/** The key of a `recordId` (a key has no newline; a scope is hex or empty). */
export function parseRecordId(id: string): RecordKey {
  const k = id.lastIndexOf('\n')
  const s = id.lastIndexOf('\n', k - 1)
  return { route: id.slice(0, s), scope: id.slice(s + 1, k), key: id.slice(k + 1) }
}

export type RecordState = 'in_flight' | 'completed' | 'not_stored' | 'unknown'

/** One stored record. Times are epoch ms. */
export interface IdemRecord {
  state: RecordState
  fingerprint: string
  claimId: string
  /**
   * in_flight: when the lease ends; unknown: when the lease of `claimId` ended, for an unknown
   * outcome that lease made (a claim found it past its lease), else 0 (finished, restored)
   */
  leaseUntil: number
  /** when the record is forgotten */
  expiresAt: number
  /** completed: the stored response; not_stored: status only */
  response?: StoredResponse
  status?: number
  reason?: UnknownReason
  /**
   * in_flight (and the unknown outcome its lease made): the reason of the unknown outcome this
   * claim took over (`ClaimResult.after`), which `release` puts back
   */
  after?: UnknownReason
  /** in_flight and unknown: the filled probe request of `idempotency.settle` (ClaimRequest.probe) */
  probe?: string
  /** unknown: how many probes were taken (Store.takeProbe); absent before the first */
  probes?: number
  /** unknown: when the next probe is due, epoch ms; absent before the first of a lapsed lease */
  nextProbe?: number
  /**
   * in_flight that took over an unknown outcome (`after`): that outcome's probe fields, which
   * `release` puts back with it
   */
  afterProbe?: string
  afterProbes?: number
  afterNext?: number
}

/** Decides a claim on the record found (or not) under the key; `write` is the record to store. */
export function decideClaim(
  found: IdemRecord | undefined,
  req: ClaimRequest,
  now: number,
): { result: ClaimResult; write?: IdemRecord } {
  const fresh = (after?: UnknownReason): IdemRecord => {
    const r: IdemRecord = { state: 'in_flight', fingerprint: req.fingerprint, claimId: req.claimId, leaseUntil: now + req.leaseMs, expiresAt: now + req.ttlMs }
    if (req.probe !== undefined) r.probe = req.probe
    if (after) {
      // what release puts back: the unknown outcome taken over, probe fields and all
      r.after = after
      if (found!.probe !== undefined) r.afterProbe = found!.probe
      if (found!.probes !== undefined) r.afterProbes = found!.probes
      if (found!.nextProbe !== undefined) r.afterNext = found!.nextProbe
    }
    return r
  }
  if (!found || found.expiresAt <= now) return { result: { kind: 'claimed' }, write: fresh() }
  if (found.fingerprint !== req.fingerprint) return { result: { kind: 'mismatch' } }
  switch (found.state) {
    case 'completed':
      return { result: { kind: 'completed', response: found.response! } }
    case 'not_stored':
      return { result: { kind: 'not_stored', status: found.status ?? 0 } }
    case 'in_flight': {
      if (found.leaseUntil > now) return { result: { kind: 'in_flight', leaseUntil: found.leaseUntil } }
      // abandoned: its holder crashed or hung past the lease, so the effect may have happened
      if (req.retryUnknown) return { result: { kind: 'claimed', after: 'crash', abandoned: true }, write: fresh('crash') }
      // claimId, leaseUntil and after stay: the holder's release can still undo this (decideRelease)
      return { result: { kind: 'unknown', reason: 'crash', abandoned: true }, write: { ...found, state: 'unknown', reason: 'crash' } }
    }
    case 'unknown': {
      const reason = found.reason ?? 'crash'
      if (req.retryUnknown) return { result: { kind: 'claimed', after: reason }, write: fresh(reason) }
      return { result: { kind: 'unknown', reason } }
    }
  }
}

/** The record after `finish`, or undefined when the claim is no longer held (no write). */
export function decideFinish(found: IdemRecord | undefined, claimId: string, done: Completion, ttlMs: number, now: number): IdemRecord | undefined {
  if (!found || found.claimId !== claimId || found.state !== 'in_flight') return undefined
  // one literal per state, no spread: a spread of a fresh object goes through V8's generic
  // clone path, the costliest step of a finish in a profile
  const fingerprint = found.fingerprint
  const expiresAt = now + ttlMs
  switch (done.kind) {
    case 'completed': return { state: 'completed', fingerprint, claimId, leaseUntil: 0, expiresAt, response: done.response }
    case 'not_stored': return { state: 'not_stored', fingerprint, claimId, leaseUntil: 0, expiresAt, status: done.status }
    case 'unknown': {
      const r: IdemRecord = { state: 'unknown', fingerprint, claimId, leaseUntil: 0, expiresAt, reason: done.reason }
      if (found.probe !== undefined) {
        r.probe = found.probe
        if (done.probeInMs !== undefined) r.nextProbe = now + done.probeInMs
      }
      return r
    }
  }
}

/** True when `renew` (a later lease end) by `claimId` may touch the record. */
export const mayRenew = (found: IdemRecord | undefined, claimId: string): boolean =>
  !!found && found.claimId === claimId && found.state === 'in_flight'

/**
 * True for an unknown outcome (reason crash) that only the lease of its `claimId` running out
 * made: `leaseUntil` is kept then, and is 0 on one finished as unknown or put back by `release`.
 */
export const lapsed = (r: IdemRecord): boolean => r.state === 'unknown' && (r.reason ?? 'crash') === 'crash' && r.leaseUntil > 0

/**
 * A release by `claimId` (Store.release): `write` null deletes the record, a record replaces it,
 * undefined leaves it. Held: in flight under `claimId`, or the unknown outcome its own lapsed
 * lease made (`lapsed`): a takeover writes another claim id, an operator's resolution another
 * state, so neither is touched. What was there before the claim comes back: nothing, or the
 * unknown outcome it took over (`after`), kept until the claim's expiry.
 */
export function decideRelease(found: IdemRecord | undefined, claimId: string): { result: ReleaseResult; write?: IdemRecord | null } {
  if (!found || found.claimId !== claimId) return { result: { kind: 'not_held' } }
  const wasLapsed = lapsed(found)
  if (found.state !== 'in_flight' && !wasLapsed) return { result: { kind: 'not_held' } }
  const l = wasLapsed ? { lapsed: true as const } : {}
  if (!found.after) return { result: { kind: 'released', ...l }, write: null }
  const back: IdemRecord = { state: 'unknown', fingerprint: found.fingerprint, claimId, leaseUntil: 0, expiresAt: found.expiresAt, reason: found.after }
  if (found.afterProbe !== undefined) back.probe = found.afterProbe
  if (found.afterProbes !== undefined) back.probes = found.afterProbes
  if (found.afterNext !== undefined) back.nextProbe = found.afterNext
  return { result: { kind: 'restored', ...l }, write: back }
}

/**
 * An operator's resolution: `write` is the record to store, `null` to delete it, undefined to
 * leave it. A `completed` resolution is a not_stored record with status 0: the effect is taken
 * as done, and there is no response to replay.
 */
export function decideResolve(found: IdemRecord | undefined, as: Resolution, ttlMs: number, now: number): { result: ResolveResult; write?: IdemRecord | null } {
  if (!found || found.expiresAt <= now) return { result: { kind: 'not_found' } }
  let reason: UnknownReason
  if (found.state === 'unknown') reason = found.reason ?? 'crash'
  else if (found.state === 'in_flight' && found.leaseUntil <= now) reason = 'crash'
  else return { result: { kind: 'refused', state: found.state as 'in_flight' | 'completed' | 'not_stored' } }
  if (as === 'failed') return { result: { kind: 'resolved', reason }, write: null }
  return {
    result: { kind: 'resolved', reason },
    write: { state: 'not_stored', fingerprint: found.fingerprint, claimId: found.claimId, leaseUntil: 0, expiresAt: now + ttlMs, status: 0 },
  }
}

/**
 * `Store.takeProbe` (contract §4a): `write` is the record to store, undefined when nothing is
 * written (`not_due`). Taken from an unknown record holding a probe with `seen` probes so far, or
 * an in-flight one past its lease (it becomes unknown, reason crash, leaseUntil and claimId kept
 * so its holder's release can still undo it), once due: at `nextProbe`, else `afterMs` past the
 * lapsed lease (0 for one finished as unknown without a first probe time: due at once).
 */
export function decideTakeProbe(
  found: IdemRecord | undefined,
  p: { seen: number; afterMs: number; nextInMs: number },
  now: number,
): { result: ProbeTake; write?: IdemRecord } {
  const notDue = { result: { kind: 'not_due' as const } }
  if (!found || found.expiresAt <= now || found.probe === undefined) return notDue
  const abandoned = found.state === 'in_flight'
  if (abandoned ? found.leaseUntil > now : found.state !== 'unknown') return notDue
  if ((found.probes ?? 0) !== p.seen) return notDue
  if ((found.nextProbe ?? found.leaseUntil + p.afterMs) > now) return notDue
  const reason = abandoned ? 'crash' : found.reason ?? 'crash'
  const probes = p.seen + 1
  const write: IdemRecord = { ...found, state: 'unknown', reason, probes, nextProbe: now + p.nextInMs }
  return { result: abandoned ? { kind: 'taken', probe: found.probe, probes, reason, abandoned: true } : { kind: 'taken', probe: found.probe, probes, reason }, write }
}

/**
 * `Store.settle` (contract §4a): `write` a completed record (`applied`), `null` to delete it
 * (`not_applied`), undefined to leave it (`moved`). Only an unexpired unknown record whose probe
 * count is `probes` is settled: a resolve, a takeover or a later probe changed one of those.
 */
export function decideSettle(found: IdemRecord | undefined, probes: number, as: Settlement, ttlMs: number, now: number): { result: SettleResult; write?: IdemRecord | null } {
  if (!found || found.expiresAt <= now || found.state !== 'unknown' || (found.probes ?? 0) !== probes) return { result: { kind: 'moved' } }
  const result: SettleResult = { kind: 'settled', reason: found.reason ?? 'crash' }
  if (as.kind === 'not_applied') return { result, write: null }
  return { result, write: { state: 'completed', fingerprint: found.fingerprint, claimId: found.claimId, leaseUntil: 0, expiresAt: now + ttlMs, response: as.response } }
}
