/**
 * bench/run.ts's table rows and goals: each target's label, the targets in the order shown, and
 * the req/s, p99 and CPU goals of each target and scenario against the floor.
 */
import { type Scenario } from './run-settings.js'
import { GATEWAYS, type TargetName } from './run-targets.js'

export const LABEL: Record<TargetName, string> = {
  upstream: 'upstream (bare)',
  floor: 'floor (node+undici)',
  hono: 'hono (floor in hono)',
  fastify: 'fastify http-proxy',
  memory: 'fencegate memory',
  sqlite: 'fencegate sqlite',
  'sqlite-w2': 'fencegate sqlite 2 workers',
  redis: 'fencegate redis',
  'redis-cluster': 'fencegate redis cluster',
  postgres: 'fencegate postgres',
  traced: 'fencegate memory+traces',
}
export const TARGETS_WANTED: TargetName[] = ['upstream', 'floor', 'hono', 'fastify', ...GATEWAYS]
/**
 * The performance issue's goals, as ratios of the floor's figures: each store's req/s in `unique`
 * (sqlite-w2 is the sqlite store), every replay's req/s, and every scenario's p99 (at most).
 * traced measures what tracing costs and has none.
 */
export const TARGET_GOAL: Partial<Record<TargetName, number>> = { memory: 0.85, sqlite: 0.75, 'sqlite-w2': 0.75, redis: 0.6, postgres: 0.4 }
export const REPLAY_GOAL = 1.2
/** a route with no checks pays only the base path: it should cost what a proxy costs */
const PLAIN_GOAL = 0.95
/** every span exported */
const TRACED_GOAL = 0.6
export const P99_GOAL = 1.5

/** A row's goals: req/s ≥ `rps` × the floor's (none for stale, fencing, idempotency), p99 ≤ `p99` × the floor's. */
/**
 * The cost issue's goals: the gateway's CPU time per request as a ratio of the floor's in the same
 * round (the median of the rounds' ratios), at most: a plain route 1.25 on every store; unique keys
 * and replays per store (replays send nothing upstream, so they should cost less than a proxy pass).
 */
const CPU_GOAL: Partial<Record<TargetName, { unique: number; replay: number }>> = {
  memory: { unique: 1.5, replay: 0.8 }, sqlite: { unique: 2.0, replay: 0.9 }, 'sqlite-w2': { unique: 2.0, replay: 0.9 },
  redis: { unique: 2.0, replay: 1.0 }, postgres: { unique: 2.2, replay: 1.0 },
}
const PLAIN_CPU_GOAL = 1.25

export function cpuGoalOf(target: TargetName, scenario: Scenario): number | undefined {
  const g = CPU_GOAL[target]
  if (g === undefined) return undefined
  return scenario === 'plain' ? PLAIN_CPU_GOAL : scenario === 'unique' || scenario === 'replay' ? g[scenario] : undefined
}

export function goalsOf(target: TargetName, scenario: Scenario): { rps?: number; p99?: number } {
  if (target === 'traced') return scenario === 'unique' ? { rps: TRACED_GOAL } : {}
  const store = TARGET_GOAL[target]
  if (store === undefined) return {}
  if (scenario === 'plain') return { rps: PLAIN_GOAL, p99: P99_GOAL }
  return { rps: scenario === 'unique' ? store : scenario === 'replay' ? REPLAY_GOAL : undefined, p99: P99_GOAL }
}
