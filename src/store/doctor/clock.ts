/**
 * The store's clock as a doctor finding (id `clock`): the offset a running gateway measures
 * (../shared/clock.ts), or one measurement on a connection of its own for `fencegate doctor`. Past
 * store.maxClockOffset it is a risk — not to a guarantee (leases and deadlines run on the store's
 * clock), but to what this gateway shows: Retry-After, supersededForMs, attempt-log times.
 */
import type { Config } from '../../config/schema.js'
import type { ClockReading } from '../shared/clock.js'
import type { Finding } from './findings.js'
import type { Store } from '../contract/store.js'
import { readPostgresClock } from '../postgres/clock.js'
import { readRedisClock } from '../redis/clock.js'

/** One measurement of the store's clock (TIME, clock_timestamp()) on a connection of its own; a cluster's first seed node. */
function readClock(config: Config['store']): Promise<ClockReading> {
  const connectTimeout = Math.max(config.timeout, 1000)
  return config.kind === 'postgres' ? readPostgresClock(config, connectTimeout) : readRedisClock(config, connectTimeout)
}

/** The `clock` finding of a store: its offset against this process's clock, or the one host's clock it shares. */
export async function clockFinding(config: Config['store'], store: Store | undefined, readTimeoutMs: number): Promise<Finding> {
  if (config.kind === 'sqlite') return { id: 'clock', status: 'ok', setting: 'the host\'s clock', consequence: 'Leases and deadlines are read from the clock of the one host every gateway sharing the file runs on, so they agree on when a lease ends.' }
  if (config.kind === 'memory') return { id: 'clock', status: 'ok', setting: 'this process\'s clock', consequence: 'Leases and deadlines are read from this process\'s own clock; nothing else shares the store.' }
  let r = store?.clock?.reading
  if (!r) {
    let t: NodeJS.Timeout | undefined
    r = await Promise.race([readClock(config), new Promise<undefined>((ok) => { t = setTimeout(() => ok(undefined), readTimeoutMs) })]).catch(() => undefined).finally(() => clearTimeout(t))
  }
  if (!r) return { id: 'clock', status: 'unknown', setting: 'store clock not read', consequence: 'The offset between the store\'s clock and this gateway\'s is not known; leases and deadlines run on the store\'s clock either way.' }
  const maxMs = config.maxClockOffset
  const setting = `store clock offset ${r.offsetMs >= 0 ? '+' : ''}${(r.offsetMs / 1000).toFixed(3)} s (round trip ${r.rttMs.toFixed(1)} ms, bound ${maxMs / 1000} s)`
  return Math.abs(r.offsetMs) > maxMs
    ? { id: 'clock', status: 'risk', setting, consequence: 'This gateway\'s clock is far from the store\'s. Leases, expiries and serialize deadlines still run on the store\'s clock, so no guarantee depends on it, but this gateway\'s Retry-After, supersededForMs and attempt-log times are off by that much: set its host\'s clock right (NTP).' }
    : { id: 'clock', status: 'ok', setting, consequence: 'Leases, expiries and serialize deadlines run on the store\'s clock, so replicas need not agree on the time; this gateway\'s own clock is close to it, so its Retry-After and attempt-log times are too.' }
}
