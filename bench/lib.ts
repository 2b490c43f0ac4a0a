/**
 * Helpers shared by bench/run.ts, bench/scale.ts and bench/soak.ts:
 * child processes that die with the harness, the node upstream, a fencegate gateway from a temp
 * YAML config, the `unique` request stream, /metrics parsing, CPU and memory readings from /proc.
 */

// Split by concern; this file re-exports them all, so each script imports from one place.
export * from './basics.js'
export * from './children.js'
export * from './report.js'
export * from './readings.js'
export * from './gateways.js'
export * from './requests.js'
