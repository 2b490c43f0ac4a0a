/** An unknown outcome as `Store.unknowns` lists it, from a record read in process (memory, sqlite). */
import type { RecordKey, UnknownRecord } from '../contract/store.js'
import type { IdemRecord } from './record-state.js'

/**
 * `crashed`: the record is in flight past its lease (reason crash). The probe fields of
 * `idempotency.settle` are set only when the record holds them.
 */
export function unknownOf(key: RecordKey, r: IdemRecord, crashed: boolean): UnknownRecord {
  const u: UnknownRecord = { key, reason: crashed ? 'crash' : r.reason ?? 'crash', leaseUntil: r.leaseUntil, expiresAt: r.expiresAt }
  if (r.probe !== undefined) u.probe = r.probe
  if (r.probes !== undefined) u.probes = r.probes
  if (r.nextProbe !== undefined) u.nextProbe = r.nextProbe
  return u
}

/**
 * The record as `Store.unknowns` lists it when it is an unknown outcome at `now` (epoch ms): not
 * expired, and unknown or in flight past its lease (reason crash); else undefined.
 * @param key the record's key, or a function making it (called only for an unknown outcome: a
 *   scan of every record parses the keys of those it lists only)
 */
export function unknownAt(key: RecordKey | (() => RecordKey), r: IdemRecord | undefined, now: number): UnknownRecord | undefined {
  if (!r || r.expiresAt <= now) return undefined
  const crashed = r.state === 'in_flight' && r.leaseUntil <= now
  if (r.state !== 'unknown' && !crashed) return undefined
  return unknownOf(typeof key === 'function' ? key() : key, r, crashed)
}
