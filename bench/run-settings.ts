/**
 * bench/run.ts's settings (BENCH_* from the environment) and the scenarios it knows.
 */
import { resolve } from 'node:path'
import { settingErrors, envNumber } from './lib.js'

// ---------------------------------------------------------------------------------- settings

export const SECONDS = envNumber('BENCH_SECONDS', 5, 1)
export const ROUNDS = Math.floor(envNumber('BENCH_ROUNDS', 2, 1))
export const WARMUP = envNumber('BENCH_WARMUP', 1, 0)
export const CONNECTIONS = Math.floor(envNumber('BENCH_CONNECTIONS', 50, 1))
export const CPU_PROF = process.env.BENCH_CPU_PROF ? resolve(process.env.BENCH_CPU_PROF) : undefined
export const FLOOR_MODE = process.env.BENCH_FLOOR ?? 'pipe'
if (FLOOR_MODE !== 'pipe' && FLOOR_MODE !== 'pipeline') settingErrors.push(`BENCH_FLOOR must be pipe or pipeline, got "${FLOOR_MODE}"`)
export const ONLY = process.env.BENCH_ONLY ? new Set(process.env.BENCH_ONLY.split(',').map((s) => s.trim()).filter(Boolean)) : undefined

/** What the gateways are measured on; see the file's docstring. */
export type Scenario = 'unique' | 'replay' | 'stale' | 'fencing' | 'idempotency' | 'plain'
export const SCENARIOS: Scenario[] = ['unique', 'replay', 'stale', 'fencing', 'idempotency', 'plain']
const isScenario = (s: string): s is Scenario => (SCENARIOS as string[]).includes(s)
/** BENCH_SCENARIOS: the scenarios every gateway runs, instead of each one's default */
export const SCENARIOS_SET = (() => {
  const raw = process.env.BENCH_SCENARIOS
  if (!raw) return undefined
  const list = raw.split(',').map((s) => s.trim()).filter(Boolean)
  const unknown = list.filter((s) => !isScenario(s))
  if (unknown.length || !list.length) settingErrors.push(`BENCH_SCENARIOS must be a comma list of ${SCENARIOS.join(', ')}, got "${raw}"`)
  return list.filter(isScenario)
})()

/** % of one core that processes outside the bench may use during a run before it is flagged */
export const FOREIGN_LIMIT = 15
