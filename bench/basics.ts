/**
 * What every bench script shares before it starts anything (re-exported by bench/lib.ts): the
 * settings error, the paths, the store servers' URLs, the request body, BENCH_* number settings
 * and the store kinds.
 */
import { join, resolve } from 'node:path'
import { pathToFileURL } from 'node:url'

/** A mistake in the settings or the environment: reported by its message, without a stack. */
export class BenchError extends Error {}

export const HERE = import.meta.dirname // dist/bench
export const ROOT = resolve(HERE, '../..')
export const CLI = resolve(ROOT, 'dist/src/cli.js')
export const RESULTS = resolve(ROOT, 'bench/results')
export const EXIT_WITH_PARENT = pathToFileURL(join(HERE, 'exit-with-parent.js')).href

export const REDIS_URL = process.env.BENCH_REDIS_URL ?? 'redis://127.0.0.1:6379'
export const POSTGRES_URL = process.env.BENCH_POSTGRES_URL ?? 'postgres://postgres@127.0.0.1:5432/test'
export const KEEP = process.env.BENCH_KEEP === '1'

export const BODY = '{"amount":1250,"currency":"EUR","to":"acct-target","memo":"bench"}'
export const BASE_HEADERS = { 'content-type': 'application/json' }

// ---------------------------------------------------------------------------------- settings

/** bad settings, reported by the script's main() (module-level code must not throw) */
export const settingErrors: string[] = []

export function envNumber(name: string, fallback: number, min: number): number {
  const raw = process.env[name]
  if (raw === undefined || raw === '') return fallback
  const n = Number(raw)
  if (!Number.isFinite(n) || n < min) {
    settingErrors.push(`${name} must be a number ≥ ${min}, got "${raw}"`)
    return fallback
  }
  return n
}

export type StoreKind = 'memory' | 'sqlite' | 'redis' | 'postgres'
export const STORE_KINDS: StoreKind[] = ['memory', 'sqlite', 'redis', 'postgres']
export const isStoreKind = (s: string): s is StoreKind => (STORE_KINDS as string[]).includes(s)
