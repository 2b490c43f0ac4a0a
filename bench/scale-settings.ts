/**
 * bench/scale.ts's settings (SCALE_* from the environment) and the names of what it writes: the
 * run's key prefix / schema, the template request, the prefilled keys, paths and resources.
 */
import { type StoreKind, envNumber, isStoreKind, runTag, settingErrors } from './lib.js'

export const SECONDS = envNumber('SCALE_SECONDS', 5, 1)
export const WARMUP = envNumber('SCALE_WARMUP', 1, 0)
export const CONNECTIONS = Math.floor(envNumber('SCALE_CONNECTIONS', 50, 1))

export const STORES: StoreKind[] = (() => {
  const raw = process.env.SCALE_STORES || 'sqlite,postgres,redis'
  const list = raw.split(',').map((s) => s.trim()).filter(Boolean)
  const bad = list.filter((s) => !isStoreKind(s))
  if (bad.length || !list.length) settingErrors.push(`SCALE_STORES must be a comma list of sqlite, postgres, redis, memory; got "${raw}"`)
  return [...new Set(list.filter(isStoreKind))]
})()

export const SIZES: number[] = (() => {
  const raw = process.env.SCALE_SIZES || '1000,100000,1000000'
  const list = raw.split(',').map((s) => s.trim()).filter(Boolean).map((s) => {
    const m = /^(\d+(?:\.\d+)?)([kKmM]?)$/.exec(s)
    const n = m ? Math.round(Number(m[1]) * (m[2] === '' ? 1 : /k/i.test(m[2]) ? 1e3 : 1e6)) : NaN
    return Number.isSafeInteger(n) && n >= 1 ? n : NaN
  })
  if (!list.length || list.some(Number.isNaN)) settingErrors.push(`SCALE_SIZES must be a comma list of positive counts (1000, 100k, 1M); got "${raw}"`)
  return [...new Set(list.filter((n) => !Number.isNaN(n)))].sort((a, b) => a - b)
})()

/** the high-water mark of every prefilled resource; probes send 1 and expect 412 */
export const PREFILL_TOKEN = '1000'
/** records (and resources) the memory store may hold beyond the prefill */
export const MEMORY_HEADROOM = 1_000_000
/** one key prefix / schema per run, per store and size: runs never see each other's data */
export const RUN_ID = `scale_${process.pid}_${Date.now().toString(36)}`
export const TEMPLATE = { account: `tpl-${runTag}`, key: `tpl-${runTag}` }
export const TEMPLATE_PATH = `/accounts/${TEMPLATE.account}/transfers`
export const preKey = (i: number) => `pre-${runTag}-${i}`
export const prePath = (i: number) => `/accounts/pre-${runTag}-${i}/transfers`
/** the fencing resource of prefilled account i (the route's template: account:{param.account}) */
export const PRE_RESOURCE_PREFIX = `account:pre-${runTag}-`

export const fmtCount = (n: number) => (n >= 1e6 && n % 1e6 === 0 ? `${n / 1e6}M` : n >= 1e3 && n % 1e3 === 0 ? `${n / 1e3}k` : String(n))
