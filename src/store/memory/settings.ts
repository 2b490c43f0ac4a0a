/**
 * `fencegate doctor` on the memory store: not durable, not shared, and bounded — how long
 * `store.maxRecords` holds at the rate new keys were observed to come, against the longest ttl.
 * The rate is known only inside the gateway process (admin `GET /doctor`); from the command line,
 * without a running gateway, the finding says what happens when the store is full.
 */
import type { Config } from '../../config/schema.js'
import type { DoctorReport, Finding } from '../doctor/findings.js'
import type { MemoryCapacity } from './options.js'
import type { Store } from '../contract/store.js'

const HOUR = 3_600_000
const hours = (ms: number): string => { const h = ms / HOUR; return h >= 10 ? `${h.toFixed(0)} h` : h >= 1 ? `${h.toFixed(1)} h` : `${Math.max(1, Math.round(h * 60))} min` }

/** The findings of a memory store; `store` is the running one (its capacity and observed rate), when there is one. */
export function memoryFindings(config: Config['store'], store?: Store): Finding[] {
  const out: Finding[] = [{ id: 'durability', status: 'risk', setting: 'store.kind memory', consequence: 'Marks and records live in this process only: a restart forgets them all without anyone being told (a new process starts empty), and a second gateway process would keep its own.' }]
  const evict = (config.acceptRisks ?? []).includes('maxRecords')
  const full = evict
    ? 'the oldest completed record is dropped before its ttl (store.acceptRisks: maxRecords): a retry of its key is forwarded again, a second effect, counted in fencegate_idempotency_evicted_total'
    : 'a request with a new key is refused with 503 (nothing forwarded, counted in fencegate_store_full_total), never a record forgotten before its ttl'
  const live = (store as { capacity?: () => MemoryCapacity } | undefined)?.capacity?.()
  const setting = `store.maxRecords ${config.maxRecords}${evict ? ', store.acceptRisks maxRecords' : ''}`
  if (!live) {
    out.push({ id: 'maxRecords', status: 'unknown', setting, consequence: `When ${config.maxRecords} unexpired idempotency records are held, ${full}. The rate new keys come at is known to the running gateway only: its admin GET /doctor says how many hours the limit holds.` })
    return out
  }
  const perHour = live.overMs > 0 ? (live.added * HOUR) / live.overMs : 0
  const now = `${live.records} of ${live.maxRecords} held, ${perHour.toFixed(perHour < 10 ? 1 : 0)} new keys an hour over the last ${hours(Math.max(live.overMs, 60_000))}${live.evicted ? `, ${live.evicted} evicted` : ''}`
  if (live.added === 0 || perHour === 0) {
    out.push({ id: 'maxRecords', status: 'ok', setting: `${setting} (${now})`, consequence: `No new key observed yet. When ${live.maxRecords} unexpired records are held, ${full}.` })
    return out
  }
  const holds = (live.maxRecords / perHour) * HOUR
  const ttl = live.longestTtlMs
  if (holds > ttl) {
    out.push({ id: 'maxRecords', status: 'ok', setting: `${setting} (${now})`, consequence: `At the observed rate the limit holds ${hours(holds)} of new keys, longer than the longest idempotency.ttl (${hours(ttl)}): records expire before the store fills. Should the rate grow ${(holds / ttl).toFixed(1)}-fold, ${full}.` })
  } else {
    out.push({ id: 'maxRecords', status: 'risk', setting: `${setting} (${now})`, consequence: `At the observed rate the limit holds ${hours(holds)} of new keys, shorter than the longest idempotency.ttl (${hours(ttl)}): once full, ${full}. Raise store.maxRecords above ${Math.ceil((perHour * ttl) / HOUR)}, shorten the ttl, or use a store on disk.` })
  }
  return out
}

/**
 * The running gateway's own report (admin `GET /doctor`), for `fencegate doctor` on a memory
 * store: only that process knows its records. Undefined when no gateway answers there.
 */
export async function runningReport(config: Config): Promise<DoctorReport | undefined> {
  const headers: Record<string, string> = config.admin.token ? { authorization: `Bearer ${config.admin.token}` } : {}
  try {
    const res = await fetch(`http://${config.admin.listen}/doctor`, { headers, signal: AbortSignal.timeout(2000) })
    return res.ok ? await res.json() as DoctorReport : undefined
  } catch {
    return undefined
  }
}
