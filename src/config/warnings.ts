/**
 * What a valid config may still get wrong without being refused: settings that do what the
 * contract says and not what the reader of the file expects. `fencegate check-config` and
 * `fencegate doctor` print them (exit 0), one line each with its YAML path.
 */
import type { Config } from './schema.js'
import { routedMethods } from './checks.js'

/** One warning: its YAML path (e.g. `routes[0].idempotency.methods`) and what it means. */
export interface ConfigWarning { path: string; message: string }

/** The methods that change state (RFC 9110 §9.2.1: not safe), the ones a key is for. */
const WRITES = ['POST', 'PUT', 'PATCH', 'DELETE']

/**
 * The warnings of a validated config:
 * - `store.replicas`: Sentinels with `replicas: 0`, so a promoted replica is state loss (contract §3);
 * - `routes[i].idempotency.methods`: `required: true` on a route matching write methods the list
 *   leaves out, which then pass without a key (contract §4: other methods ignore the key).
 */
export function configWarnings(config: Config): ConfigWarning[] {
  const out: ConfigWarning[] = []
  const s = config.store
  if (s.kind === 'redis' && s.sentinels && s.replicas === 0) {
    out.push({ path: 'store.replicas', message: `is 0 with store.sentinels set: every failover will be treated as state loss: set store.replicas: 1 with a replica that acknowledges (until then guarded routes answer 503 after a failover until \`fencegate store accept-loss\`)` })
  }
  config.routes.forEach((r, i) => {
    const idem = r.idempotency
    if (!idem?.required) return
    const routed = routedMethods(r.match.methods)
    const unkeyed = WRITES.filter((m) => routed.has(m) && !(idem.methods as readonly string[]).includes(m))
    if (!unkeyed.length) return
    const wanted = WRITES.filter((m) => routed.has(m) || (idem.methods as readonly string[]).includes(m))
    out.push({
      path: `routes[${i}].idempotency.methods`,
      message: `route ${r.name} has idempotency.required: true and matches ${unkeyed.join(', ')}, which idempotency.methods (${idem.methods.join(', ')}) leaves out: those requests pass without a key, unchecked. Write the methods meant, e.g. methods: [${wanted.join(', ')}], or leave ${unkeyed.join(', ')} out of match.methods`,
    })
  })
  return out
}

/** A warning as check-config and doctor print it: `FILE: PATH: warning: MESSAGE`. */
export const formatWarning = (file: string, w: ConfigWarning): string => `${file}: ${w.path}: warning: ${w.message}`
