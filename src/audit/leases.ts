/**
 * `fencegate leases` and admin `GET /leases` (contract §8): lease advice from what the gateway
 * saw. Per fenced route, from the attempt log (whose stale entries carry lateness measured
 * against the store's record of when the superseding token was first accepted):
 * - effect durations: how long the upstream took to answer each forwarded fenced write (send to
 *   response headers), as count, p50, p99, p99.9 and max;
 * - generations: distinct tokens per resource, how often leases changed hands, how long a
 *   generation lasted;
 * - stale writes: how late each came after its successor's first acceptance (the pause its
 *   writer's lease did not cover);
 * - advice in plain words, with the numbers behind it: a minimum lease, a renewal interval, and
 *   warnings.
 *
 * The formula (docs/operate.md, "Sizing leases"): with E the p99.9 effect duration (the largest seen when
 * there are fewer than 1000 writes), a margin M = max(1 s, E) for pauses, and renewals three
 * times per lease (R = L / 3):
 *
 *     L ≥ E + R + M   ⇒   L = 1.5 · (E + M),   R = L / 3
 *
 * a holder that renews every R and starts a write just before a renewal was due still holds its
 * lease when the write ends, even after a pause of up to M. The same shape as Pub/Sub clients
 * extending leases to the p99 of ack delay, BullMQ renewing its lock at half its lockDuration, and
 * SQS asking for a visibility timeout of at least 6 × the function timeout.
 */
import type { Config, RouteConfig } from '../config/schema.js'
import { Problem } from '../problems.js'
import type { AuditEntry, AuditLog } from '../store/index.js'
import { formatDuration } from '../config/units.js'
import { brokerSettings, type BrokerSetting } from './broker-settings.js'
import { histogram, type Histogram } from './histogram.js'
import { human } from './human.js'

export { human } from './human.js'

/** Most fenced attempts read per report (the newest of the window). */
export const LEASES_LIMIT = 100_000
/** Below this many answered writes the advice says it is a floor, not a percentile. */
const FEW = 20
/** p99.9 means something from this many writes on; fewer: the largest seen. */
const FOR_P999 = 1000

export interface EffectStats {
  /** forwarded fenced writes the upstream answered */
  count: number
  p50Ms?: number
  p99Ms?: number
  p999Ms?: number
  maxMs?: number
  /** forwarded fenced writes without an answer (timeout, reset): effects longer than upstream.timeout, or failed */
  unanswered: number
  /** the answered writes' durations in 1-2-5 ms buckets (the audit view draws it) */
  histogram?: Histogram
}

export interface GenerationStats {
  /** resources with at least one fenced attempt */
  resources: number
  /** distinct tokens over all resources: lease generations seen */
  total: number
  /** generations after a resource's first: leases changing hands */
  handovers: number
  handoversPerHour: number
  /** generations of the busiest resource */
  maxPerResource: number
  /** median time from one generation's first write to the next generation's first write */
  medianTenureMs?: number
}

export interface StaleStats {
  count: number
  /** stale writes whose lateness is known (gateways from before it was recorded left it out) */
  measured: number
  latenessP50Ms?: number
  latenessP99Ms?: number
  latenessMaxMs?: number
  /** the measured lateness in 1-2-5 ms buckets */
  histogram?: Histogram
}

export interface LeaseAdvice {
  /** the shortest lease that covers the observed effects with renewals and a margin, ms */
  minimumLeaseMs?: number
  /** renew this often (a third of the lease), ms */
  renewalIntervalMs?: number
  /** the pause the lease still covers, ms */
  marginMs?: number
  /** the effect duration the advice is built on, ms, and which one it is */
  effectMs?: number
  effectBasis?: 'p99.9' | 'max'
  /** the lease and renewal as each known broker's setting (src/audit/broker-settings.ts) */
  brokers?: BrokerSetting[]
  /** the advice, with its numbers, in plain words */
  lines: string[]
  warnings: string[]
}

export interface RouteLeases {
  route: string
  configured: { idempotencyLeaseMs?: number; upstreamTimeoutMs: number }
  effects: EffectStats
  generations: GenerationStats
  stale: StaleStats
  advice: LeaseAdvice
  /** the window held more fenced attempts than one report reads: these numbers are from the newest LEASES_LIMIT */
  sampled?: true
}

export interface LeaseReport {
  /** RFC 3339 */
  since: string
  until: string
  routes: RouteLeases[]
  /** how the advice is made, and where it stops */
  method: string[]
}

export const METHOD = [
  'minimum lease L = E + R + M, where E is the p99.9 effect duration (the largest seen below 1000 writes), R the renewal interval and M a margin for pauses, max(1 s, E); renewing three times per lease (R = L / 3) gives L = 1.5 × (E + M).',
  'Why: a holder that renews every R and starts a write just before its renewal was due still holds the lease when the write ends, even after a pause of up to M. Google Pub/Sub clients extend a message\'s lease to the p99 of the observed ack delay; BullMQ renews a job\'s lock at half its lockDuration and finds stalled jobs every stalledInterval; AWS asks for an SQS visibility timeout of at least 6 × the Lambda function timeout. Same idea: the lease outlasts the slow tail of the work, renewed well before it ends.',
  'Limits: the gateway sees only the writes that reach it. The worker\'s own work before and after its write, reads, and writes that take another path are not in these numbers, and a worker\'s lease must cover them too. A write without an answer (upstream.timeout) has no duration here. Lateness measures how long after its successor took over a stale write arrived, a lower bound of its writer\'s pause.',
]

/** The nearest-rank quantile of sorted values. */
function quantile(sorted: readonly number[], q: number): number | undefined {
  if (!sorted.length) return undefined
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))]
}

const round = (ms: number | undefined): number | undefined => (ms === undefined ? undefined : Math.round(ms * 10) / 10)


/** Rounds a lease up to a value a config writes: 100 ms steps below 10 s, whole seconds below 2 min, 5 s steps above. */
function roundUp(ms: number): number {
  const step = ms < 10_000 ? 100 : ms < 120_000 ? 1000 : 5000
  return Math.ceil(ms / step) * step
}

/** Rounds a renewal interval down the same way (never to 0). */
function roundDown(ms: number): number {
  const step = ms < 10_000 ? 100 : ms < 120_000 ? 1000 : 5000
  return Math.max(step, Math.floor(ms / step) * step)
}

/** The statistics and advice of one route from its fenced attempts (oldest first). */
export function routeLeases(rc: RouteConfig, entries: readonly AuditEntry[], windowMs: number): RouteLeases {
  const durations: number[] = []
  let unanswered = 0
  const lateness: number[] = []
  let stale = 0
  /** per resource: each token's first time, in order seen */
  const tokens = new Map<string, Map<string, number>>()
  for (const e of entries) {
    if (e.upstreamMs !== undefined) durations.push(e.upstreamMs)
    else if (e.unknown === 'timeout' || e.unknown === 'reset') unanswered++
    if (e.outcome === 'stale') {
      stale++
      if (e.lateMs !== undefined) lateness.push(e.lateMs)
    }
    if (e.resource !== undefined && e.token !== undefined) {
      let seen = tokens.get(e.resource)
      if (!seen) tokens.set(e.resource, seen = new Map())
      // a stale token seen after a newer one is an old generation, not a new one
      if (!seen.has(e.token)) seen.set(e.token, e.time)
    }
  }
  durations.sort((a, b) => a - b)
  lateness.sort((a, b) => a - b)

  const effects: EffectStats = {
    count: durations.length,
    p50Ms: round(quantile(durations, 0.5)),
    p99Ms: round(quantile(durations, 0.99)),
    p999Ms: round(quantile(durations, 0.999)),
    maxMs: round(durations[durations.length - 1]),
    unanswered,
    histogram: histogram(durations),
  }

  let total = 0
  let maxPerResource = 0
  const tenures: number[] = []
  for (const seen of tokens.values()) {
    total += seen.size
    maxPerResource = Math.max(maxPerResource, seen.size)
    // generations in token order; each one's tenure ends where the next one's first write is
    const order = [...seen.entries()].sort((a, b) => (BigInt(a[0]) < BigInt(b[0]) ? -1 : 1))
    for (let i = 1; i < order.length; i++) if (order[i][1] >= order[i - 1][1]) tenures.push(order[i][1] - order[i - 1][1])
  }
  tenures.sort((a, b) => a - b)
  const handovers = total - tokens.size
  const generations: GenerationStats = {
    resources: tokens.size,
    total,
    handovers,
    handoversPerHour: Math.round((handovers / Math.max(windowMs, 1)) * 3_600_000 * 100) / 100,
    maxPerResource,
    medianTenureMs: round(quantile(tenures, 0.5)),
  }

  const staleStats: StaleStats = {
    count: stale,
    measured: lateness.length,
    latenessP50Ms: round(quantile(lateness, 0.5)),
    latenessP99Ms: round(quantile(lateness, 0.99)),
    latenessMaxMs: round(lateness[lateness.length - 1]),
    histogram: histogram(lateness),
  }

  const configured = { idempotencyLeaseMs: rc.idempotency?.lease, upstreamTimeoutMs: rc.upstream.timeout }
  return { route: rc.name, configured, effects, generations, stale: staleStats, advice: advise(effects, generations, staleStats, configured) }
}

function advise(effects: EffectStats, gens: GenerationStats, stale: StaleStats, configured: RouteLeases['configured']): LeaseAdvice {
  const lines: string[] = []
  const warnings: string[] = []
  if (!effects.count) {
    lines.push('No fenced write was answered by the upstream in this window: nothing to size a lease from yet.')
    if (effects.unanswered) warnings.push(`${effects.unanswered} fenced write${effects.unanswered === 1 ? ' was' : 's were'} sent and got no answer within upstream.timeout (${human(configured.upstreamTimeoutMs)}): their effects take longer than that, or fail; a lease shorter than ${human(configured.upstreamTimeoutMs)} cannot cover them.`)
  } else {
    const basis = effects.count >= FOR_P999 ? 'p99.9' : 'max'
    const E = basis === 'p99.9' ? effects.p999Ms! : effects.maxMs!
    const M = Math.max(1000, E)
    const L = roundUp(1.5 * (E + M))
    const R = roundDown(L / 3)
    lines.push(`Effects: ${effects.count} fenced write${effects.count === 1 ? '' : 's'} answered; p50 ${human(effects.p50Ms!)}, p99 ${human(effects.p99Ms!)}, p99.9 ${human(effects.p999Ms!)}, max ${human(effects.maxMs!)}.`)
    lines.push(`Minimum lease: ${human(L)} (${formatDuration(L)}), which covers the ${basis === 'p99.9' ? 'p99.9' : 'longest'} effect ${human(E)} + a renewal interval of ${human(R)} + a margin of ${human(M)} for pauses. A holder that renews on time and starts a write just before a renewal still holds its lease when the write ends, even after a pause of up to ${human(M)}.`)
    lines.push(`Renew every ${human(R)} (${formatDuration(R)}, a third of the lease): one lost or late renewal still leaves time for the next.`)
    if (effects.count < FEW) warnings.push(`Only ${effects.count} answered write${effects.count === 1 ? '' : 's'} in this window: the advice is a floor from what was seen, not a percentile. Look at a longer window (--since).`)
    else if (basis === 'max') lines.push(`(${effects.count} writes are too few for a p99.9: the longest one seen stands in for it.)`)
    if (effects.unanswered) {
      warnings.push(`${effects.unanswered} fenced write${effects.unanswered === 1 ? ' was' : 's were'} sent and got no answer within upstream.timeout (${human(configured.upstreamTimeoutMs)}): their effects took longer than that, or failed, and the percentiles above leave them out. If they are slow effects rather than failures, a lease covering them is at least ${human(roundUp(configured.upstreamTimeoutMs + L / 3 + M))} (upstream.timeout + renewal + margin).`)
    }
    const lease = configured.idempotencyLeaseMs
    if (lease !== undefined) {
      if (lease < E + M) {
        warnings.push(`idempotency.lease (${formatDuration(lease)}) is shorter than the effect plus the margin (${human(E + M)}): if a gateway crashes mid-write, a retry can find its attempt abandoned while the upstream is still applying it (with unknownOutcome: retry, a second effect). Set it to at least ${formatDuration(roundUp(E + M))}.`)
      } else {
        lines.push(`idempotency.lease (${formatDuration(lease)}) covers the effect plus the margin (${human(E + M)}): a gateway that crashes mid-write holds the key until the write would have ended anyway (the gateway renews its own claims while it lives).`)
      }
    }
    if (stale.measured) {
      const worst = stale.latenessMaxMs!
      if (worst > M) {
        warnings.push(`${stale.count} stale write${stale.count === 1 ? '' : 's'} came up to ${human(worst)} after ${stale.count === 1 ? 'its' : 'their'} successor took over (p50 ${human(stale.latenessP50Ms!)}, p99 ${human(stale.latenessP99Ms!)}): ${stale.count === 1 ? 'its writer was' : 'their writers were'} paused or cut off for at least that long, longer than the ${human(M)} margin the advised lease leaves for pauses. Fencing refused ${stale.count === 1 ? 'it' : 'them'} (412). Find what paused ${stale.count === 1 ? 'it' : 'them'} (GC, SIGSTOP, a blocked event loop, a partition); a lease covering such a pause would be at least ${human(roundUp(E + L / 3 + worst))}, and every handover would wait that long too.`)
      } else {
        lines.push(`${stale.count} stale write${stale.count === 1 ? '' : 's'}, at most ${human(worst)} late: pauses within the advised margin (${human(M)}). Leases shorter than advised may be why ${stale.count === 1 ? 'its writer was' : 'their writers were'} superseded.`)
      }
    }
    return { minimumLeaseMs: L, renewalIntervalMs: R, marginMs: M, effectMs: E, effectBasis: basis, brokers: brokerSettings(L, R), lines: [...lines, ...generationLines(gens, stale)], warnings }
  }
  return { lines: [...lines, ...generationLines(gens, stale)], warnings }
}

function generationLines(g: GenerationStats, stale: StaleStats): string[] {
  const out: string[] = []
  if (g.resources) {
    out.push(`Generations: ${g.resources} resource${g.resources === 1 ? '' : 's'} saw ${g.total} token${g.total === 1 ? '' : 's'} (${g.handovers} handover${g.handovers === 1 ? '' : 's'}, ${g.handoversPerHour} per hour; at most ${g.maxPerResource} on one resource${g.medianTenureMs !== undefined ? `; a generation lasted ${human(g.medianTenureMs)} at the median` : ''}).`)
  }
  if (stale.count > stale.measured) out.push(`${stale.count - stale.measured} stale write${stale.count - stale.measured === 1 ? ' has' : 's have'} no lateness recorded (a mark or gateway from before it was kept).`)
  return out
}

/**
 * The report of every fenced route (or only `route`), in config order.
 * @throws Problem 400 for a route not in the config; StoreError when the log cannot be read
 */
export async function buildLeases(config: Config, log: AuditLog, since: number, until: number, route?: string): Promise<LeaseReport> {
  if (route !== undefined && !config.routes.some((r) => r.name === route)) {
    throw new Problem('bad-request', `No route named ${JSON.stringify(route)} in the config (routes: ${config.routes.map((r) => r.name).join(', ')}).`)
  }
  const fenced = config.routes.filter((r) => r.fencing && (route === undefined || r.name === route))
  const routes: RouteLeases[] = []
  for (const rc of fenced) {
    const entries = await log.fenced(since, until, rc.name, LEASES_LIMIT)
    const r = routeLeases(rc, entries, until - since)
    if (entries.length >= LEASES_LIMIT) {
      r.sampled = true
      r.advice.warnings.push(`The window holds more than ${LEASES_LIMIT} fenced attempts on this route: these numbers are from the newest ${LEASES_LIMIT} (since ${new Date(entries[0].time).toISOString()}).`)
    }
    routes.push(r)
  }
  return { since: new Date(since).toISOString(), until: new Date(until).toISOString(), routes, method: METHOD }
}
