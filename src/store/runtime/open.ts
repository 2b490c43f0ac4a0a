/**
 * The one way a gateway process opens its store: `fencegate start` (src/server.ts) and the
 * `--workers` primary (src/cluster.ts) both go through `openGuardedStore`, so they cannot come to
 * open it differently. In order:
 *   1. open it (./late.ts): a redis or postgres store that does not answer yet is a stand-in that
 *      fails closed and connects later (contract §2); memory or sqlite that cannot open throws;
 *   2. read its real settings (../doctor/inspect.ts `checkAtStart`): logged in one line, and a blocking
 *      risk that store.acceptRisks does not name (an evicting maxmemory-policy) refuses the start;
 *   3. wrap it in guardStore (./guard.ts): every call timed, counted and bounded by store.timeout;
 *   4. ping it once: a store not reachable yet is logged and counted by the guard, not thrown;
 *   5. watch its clock (redis, postgres; ../shared/clock.ts): each measurement sets
 *      fencegate_store_clock_offset_seconds, and one past store.maxClockOffset logs a warning.
 */
import type { Config } from '../../config/schema.js'
import type { Logger } from '../../log.js'
import type { Metrics } from '../../telemetry/metrics.js'
import { guardStore } from './guard.js'
import { openForGateway } from './late.js'
import { checkAtStart, settingsReader, RiskRefused, type DoctorReport } from '../doctor/inspect.js'
import type { Store } from '../contract/store.js'
import type { ClockReading } from '../shared/clock.js'

export interface GuardedStore {
  /** the store as the gateway uses it (guardStore); its `close()` closes the opened store */
  store: Store
  /**
   * The store's settings for the admin API's report: the start-up reading, read again at most
   * once a minute; undefined while they cannot be read.
   */
  settings: () => Promise<DoctorReport | undefined>
  /**
   * When the settings were to be read at start-up but the store did not answer: reads them once
   * it does, and calls `refused` when they hold a blocking risk (the caller stops the gateway).
   * Does nothing when they were read at start-up, or not to be read.
   */
  checkWhenConnected(refused: (e: RiskRefused) => void | Promise<void>): void
}

export interface OpenGuardedOptions {
  /** false: the settings are not read (a `--workers` worker: the primary reads them); default true */
  checkSettings?: boolean
}

/** Step 5. memory and sqlite read this host's clock: their offset is 0 by construction. */
function watchClock(config: Config, opened: Store, connected: Promise<void>, log: Logger, metrics: Metrics): void {
  const store = config.store.kind
  const bound = config.store.maxClockOffset
  if (store === 'memory' || store === 'sqlite') {
    metrics.storeClockOffset.set({ store }, 0)
    metrics.storeClockOffsetExceeded.set({ store }, 0)
    return
  }
  let off = false
  const seen = (r: ClockReading) => {
    metrics.storeClockOffset.set({ store }, r.offsetMs / 1000)
    const past = Math.abs(r.offsetMs) > bound
    metrics.storeClockOffsetExceeded.set({ store }, past ? 1 : 0)
    const fields = { store, offsetMs: r.offsetMs, roundTripMs: Math.round(r.rttMs * 10) / 10, maxClockOffsetMs: bound }
    if (past) log.warn('this gateway\'s clock is far from the store\'s (store.maxClockOffset): leases still run on the store\'s clock, but Retry-After, supersededForMs and attempt-log times from this gateway are off by as much; set the host\'s clock right (NTP)', fields)
    else if (off) log.info('this gateway\'s clock is close to the store\'s again', fields)
    off = past
  }
  connected.then(() => { opened.clock?.watch(seen) }).catch(() => {})
}

/**
 * Opens, checks and guards the configured store (steps above).
 * @throws StoreError when a memory or sqlite store cannot be opened; RiskRefused when its settings
 *   hold a blocking risk that store.acceptRisks does not name (the store is closed again)
 */
export async function openGuardedStore(config: Config, log: Logger, metrics: Metrics, options: OpenGuardedOptions = {}): Promise<GuardedStore> {
  const checkSettings = options.checkSettings !== false
  const { store: opened, connected } = await openForGateway(config, log)
  let first: DoctorReport | undefined
  if (checkSettings) {
    try {
      first = await checkAtStart(config, log, opened)
    } catch (e) {
      await opened.close().catch(() => {})
      throw e
    }
  }
  // doctor reads the opened store (sqlite: its own connection's pragmas), not the guard
  const settings = settingsReader(config.store, opened, first)
  const store = guardStore(opened, metrics, config.store.timeout, log)
  await store.ping().catch(() => { /* not reachable yet: logged and counted by the guard */ })
  watchClock(config, opened, connected, log, metrics)
  return {
    store,
    settings,
    checkWhenConnected(refused) {
      // undefined: the store did not answer at start-up; its settings are read once it does
      if (!checkSettings || first !== undefined) return
      connected.then(() => checkAtStart(config, log, opened)).catch(async (e) => {
        if (e instanceof RiskRefused) await refused(e)
      })
    },
  }
}
