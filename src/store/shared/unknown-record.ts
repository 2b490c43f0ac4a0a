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
