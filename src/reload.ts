/**
 * SIGHUP: reload the config file without dropping a request in flight (contract §2).
 *
 * Each config the process runs is a *generation*: the request handling `createGateway` built from it,
 * with its upstream pools. The proxy listener hands every new request to the current
 * generation; a request keeps the generation it was admitted by until its response has ended,
 * so it finishes under the config it started with. A reload builds the next generation and
 * swaps it in; the previous one's pools are closed once its last request has ended.
 *
 * A file that does not validate is refused and the running config kept; so is a file that
 * changes what only a restart can change (the store, the listen addresses, the listener
 * timeouts, the attempt log's queue and retention, TLS or client certificates turned on or off
 * on a listener): the refusal names those keys. Either way it is logged and counted in
 * `fencegate_config_reloads_total{result}`. The listeners' certificate files are read again
 * (src/tls/listeners.ts), and so are the routes' upstream TLS files, for the new generation's
 * pools (src/tls/upstream.ts); one that cannot be used refuses the reload the same way. The
 * store's TLS files are not: `store.*` is restart-only, and the store clients keep the options
 * they were opened with for every reconnection, so a rotated store certificate needs a restart.
 */
import type { Config } from './config/schema.js'
import { ConfigError, formatProblem, loadConfig } from './config/load.js'
import type { Logger } from './log.js'
import type { Metrics } from './telemetry/metrics.js'

/** The top-level keys whose change needs a restart, with why, for the refusal. */
const RESTART_ONLY: [keyof Config, string][] = [
  ['listen', 'the proxy listener is bound once'],
  ['admin', 'the admin listener is bound once'], // only admin.listen: see below
  ['store', 'the store connection is opened once (its store.tls files read then)'],
  ['audit', 'the attempt log queue is created with the store'],
  ['server', 'the listener timeouts are set when it is created'],
]

/**
 * The YAML paths of settings that differ between the running config and `next` and need a
 * restart to change; empty when `next` can be applied by a reload.
 */
export function restartOnly(running: Config, next: Config): string[] {
  const out: string[] = []
  for (const [key] of RESTART_ONLY) {
    if (key === 'admin') {
      if (running.admin.listen !== next.admin.listen) out.push('admin.listen')
      continue
    }
    const a = running[key] as unknown
    const b = next[key] as unknown
    if (typeof a !== 'object' || a === null) {
      if (a !== b) out.push(key)
      continue
    }
    for (const k of new Set([...Object.keys(a), ...Object.keys(b as object)])) {
      if (JSON.stringify((a as Record<string, unknown>)[k]) !== JSON.stringify((b as Record<string, unknown>)[k])) out.push(`${key}.${k}`)
    }
  }
  // a listener's files are read again (rotation); turning TLS or client certificates on or off makes another server
  for (const [path, a, b] of [['tls', running.tls, next.tls], ['admin.tls', running.admin.tls, next.admin.tls]] as const) {
    if (!a !== !b) out.push(path)
    else if (a && b && !a.clientCa !== !b.clientCa) out.push(`${path}.clientCa`)
  }
  return out
}

/** Why a TLS path in restartOnly's answer needs a restart. */
const TLS_RESTART = 'a listener is created with or without TLS and client certificates; a reload reads the files again but cannot turn either on or off'

export type ReloadResult =
  | { applied: true; routes: number }
  | { applied: false; reason: string; problems: string[] }

/**
 * Reads and checks the next config for a reload: the file must validate and change nothing
 * that needs a restart. Logs and counts a refusal.
 * @param next the config to apply; default: `file` read again
 * @returns the config to apply, or the refusal
 */
export function nextConfig(file: string | undefined, running: Config, metrics: Metrics, log: Logger, next?: Config): { config: Config } | { refused: ReloadResult } {
  const refuse = (reason: string, problems: string[]) => ({ refused: refuseReload(file, metrics, log, reason, problems) })
  if (!next) {
    if (!file) return refuse('this gateway was not started from a config file', [])
    try {
      next = loadConfig(file)
    } catch (e) {
      if (e instanceof ConfigError) return refuse('the file does not validate', e.problems.map((p) => formatProblem(file, p)))
      return refuse(`the file cannot be read: ${(e as Error).message}`, [])
    }
  }
  const blocked = restartOnly(running, next)
  if (blocked.length) {
    const why = (p: string) => /^(admin\.)?tls(\.|$)/.test(p) ? TLS_RESTART : RESTART_ONLY.find(([k]) => p === k || p.startsWith(`${k}.`))?.[1] ?? ''
    return refuse(`it changes ${blocked.join(', ')}, which only a restart can change`, blocked.map((p) => `${p}: changed, but ${why(p)}: restart the gateway to apply it`))
  }
  return { config: next }
}

/**
 * Refuses a reload: logged, counted in `fencegate_config_reloads_total{result="refused"}`; the
 * running config (and certificates) stay.
 */
export function refuseReload(file: string | undefined, metrics: Metrics, log: Logger, reason: string, problems: string[]): ReloadResult {
  metrics.configReloads.inc({ result: 'refused' })
  log.error(`config reload refused: ${reason}; the running config stays`, { file, problems: problems.join('\n') })
  return { applied: false, reason, problems }
}
