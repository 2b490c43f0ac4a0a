/**
 * One measured run of bench/run.ts: the load generators (wrk, or autocannon in the harness),
 * preparing and driving a run's load, and measure(), which turns one run into its figures
 * (req/s, latency, CPU of the proxy, the upstream and the harness, the load outside the bench).
 */
import autocannon from 'autocannon'
import { setTimeout as sleep } from 'node:timers/promises'
import { BODY, BASE_HEADERS, running, tail, liveChildren, cpuSeconds, machineBusySeconds, benchSeconds, foreignMeter, metricSum, scrape, postLoad, runTag, nextKey, nextToken, uniqueRequests } from './lib.js'
import { wrkInstalled, wrkLoad, type WrkStream } from './wrk.js'
import { SECONDS, WARMUP, CONNECTIONS, FOREIGN_LIMIT } from './run-settings.js'
import { type Upstream, type Gateway, type Target } from './run-targets.js'
import { ROUTE_PREFIX, scenarioRequests, primeStale, replayRequests, primeReplay } from './run-scenarios.js'
import { LABEL } from './run-goals.js'

export function median(xs: number[]): number {
  const s = xs.slice().sort((a, b) => a - b)
  const m = s.length >> 1
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2
}

/**
 * How much of the machine's CPU went to processes other than the bench's over `ms`, in % of one
 * core: another job on the box skews every figure, so it is measured before and during runs.
 */
export async function foreignLoad(ms: number): Promise<number | undefined> {
  const stop = foreignMeter()
  await sleep(ms)
  return stop()
}

export interface Figures {
  round: number
  rps: number
  p50: number
  p99: number
  p999: number
  total2xx: number
  non2xx: number
  errors: number
  timeouts: number
  statusCodes: Record<string, number>
  /** % of one core used during the measured run (warm-up included) */
  cpu: { target?: number; upstream?: number; loadgen: number; foreign?: number }
  /** the target process's CPU time (user + system) per request answered, µs (warm-up included) */
  cpuUsPerRequest?: number
  /** gateway counters over the run (warm-up included), when the target is fencegate */
  gateway?: { stored: number; replayed: number; upstreamCalls: number; fencingRejections: number }
  /** the run went wrong (errors, rejections, responses not stored): its figures mean nothing */
  problems: string[]
  /** the machine was busy with something else: the figures are low and noisy */
  warnings: string[]
}

const metrics = async (g: Gateway | undefined): Promise<string | undefined> => (g ? scrape(g.adminUrl) : undefined)

export const LOADGEN = process.env.BENCH_LOADGEN === 'autocannon' ? 'autocannon' : process.env.BENCH_LOADGEN === 'wrk' || wrkInstalled() ? 'wrk' : 'autocannon'

/**
 * The scenario's stream for wrk: one account per connection's worth of paths, a new key per
 * request, and one token per run (equal tokens are accepted; wrk cannot tie a path to a connection,
 * so rising tokens could race each other into 412s).
 */
async function wrkStream(t: Target): Promise<WrkStream> {
  if (t.scenario === 'replay') {
    const { headers, path } = await primeReplay(t.url)
    return { paths: [path], headers, body: BODY }
  }
  if (t.scenario === 'stale') return { paths: await primeStale(t.url), headers: BASE_HEADERS, body: BODY, key: nextKey('stale'), token: nextToken() }
  const prefix = ROUTE_PREFIX[t.scenario]
  const run = round0()
  const paths = Array.from({ length: CONNECTIONS }, (_, i) => `/${prefix}/acct-${runTag}-w${run}-${i}/transfers`)
  return {
    paths, headers: BASE_HEADERS, body: BODY,
    key: t.scenario !== 'fencing' && t.scenario !== 'plain' ? nextKey('w') : undefined,
    token: t.scenario !== 'idempotency' && t.scenario !== 'plain' ? nextToken() : undefined,
  }
}
let wrkRuns = 0
const round0 = () => ++wrkRuns

type Prepared = { wrk: WrkStream } | { shape: Pick<autocannon.Options, 'setupClient' | 'requests'> }

/** The run's request stream, primed (replay, stale) before anything is measured. */
async function prepare(t: Target): Promise<Prepared> {
  if (LOADGEN === 'wrk') return { wrk: await wrkStream(t) }
  if (t.scenario === 'replay') {
    const { headers, path } = await primeReplay(t.url)
    return { shape: replayRequests(headers, path) }
  }
  if (t.scenario === 'stale') return { shape: uniqueRequests({ paths: await primeStale(t.url) }) }
  return { shape: scenarioRequests(t.scenario) }
}

/** The load of one run, with autocannon's result shape whichever generator made it. */
async function load(t: Target, prepared: Prepared): Promise<Pick<autocannon.Result, 'requests' | 'latency' | '2xx' | 'non2xx' | 'errors' | 'timeouts' | 'statusCodeStats'> & { warmup?: Pick<autocannon.Result, 'requests' | '2xx' | 'statusCodeStats'> }> {
  if ('wrk' in prepared) {
    const stream = prepared.wrk
    const warmup = WARMUP > 0 ? await wrkLoad(t.url, stream, WARMUP, CONNECTIONS) : undefined
    // a new key prefix for the measured run: the warm-up's keys must not come back as replays
    const measured = await wrkLoad(t.url, stream.key ? { ...stream, key: `${stream.key}m` } : stream, SECONDS, CONNECTIONS)
    return { ...measured, warmup } as never
  }
  return autocannon({
    ...postLoad(t.url, CONNECTIONS),
    duration: SECONDS,
    ...(WARMUP > 0 ? { warmup: { connections: CONNECTIONS, duration: WARMUP } } : {}),
    ...prepared.shape,
  })
}

export async function measure(t: Target, upstream: Upstream, round: number): Promise<Figures> {
  const prepared = await prepare(t)
  const before = await metrics(t.gateway)
  const cpu0 = {
    target: cpuSeconds(t.child.proc.pid),
    upstream: t.child === upstream.child ? undefined : cpuSeconds(upstream.child.proc.pid),
    self: process.cpuUsage(),
    machine: machineBusySeconds(),
    bench: benchSeconds(),
    at: performance.now(),
  }
  const result = await load(t, prepared)
  const wall = (performance.now() - cpu0.at) / 1000
  const self = process.cpuUsage(cpu0.self)
  const pct = (a?: number, b?: number) => (a === undefined || b === undefined ? undefined : Math.round(((b - a) / wall) * 100))
  const machine = pct(cpu0.machine, machineBusySeconds())
  const bench = pct(cpu0.bench, benchSeconds())
  const foreign = machine === undefined || bench === undefined ? undefined : Math.max(0, machine - bench)
  for (const c of liveChildren()) {
    if (!running(c)) throw new Error(`${c.name} exited (${c.proc.exitCode ?? c.proc.signalCode}) during the ${LABEL[t.name]} ${t.scenario} run; its log ends:\n${tail(c.log)}`)
  }
  const after = await metrics(t.gateway)
  const problems: string[] = []
  const warnings: string[] = []
  if (foreign !== undefined && foreign > FOREIGN_LIMIT) warnings.push(`other processes used ${foreign}% of a core during the run: the machine was not quiet`)
  // a stale run expects 412 for every request, the others 2xx
  const expected = t.scenario === 'stale' ? '412' : undefined
  const unexpected = expected === undefined
    ? result.non2xx
    : Object.entries(result.statusCodeStats).reduce((n, [code, s]) => n + (code === expected ? 0 : s.count), 0)
  if (unexpected) problems.push(`${unexpected} answers other than ${expected ?? '2xx'}: ${JSON.stringify(result.statusCodeStats)}`)
  if (result.errors) problems.push(`${result.errors} connection errors`)
  if (result.timeouts) problems.push(`${result.timeouts} timeouts`)
  let gateway: Figures['gateway']
  if (before !== undefined && after !== undefined) {
    const missing: string[] = []
    const d = (name: string, labels?: Record<string, string>) => {
      const a = metricSum(after, name, labels)
      if (a === undefined) { missing.push(name); return 0 }
      return a - (metricSum(before, name, labels) ?? 0)
    }
    gateway = {
      stored: d('fencegate_idempotency_total', { result: 'stored' }),
      replayed: d('fencegate_idempotency_total', { result: 'replayed' }),
      upstreamCalls: d('fencegate_upstream_duration_seconds_count'),
      fencingRejections: d('fencegate_fencing_rejections_total'),
    }
    if (missing.length) {
      warnings.push(`fencegate's /metrics has no ${[...new Set(missing)].join(', ')}: the checks that use them were skipped`)
    } else {
      // requests in flight when autocannon stops reach the gateway uncounted, hence < and not !==
      if (t.scenario === 'stale') {
        const refused = (result.statusCodeStats['412']?.count ?? 0) + (result.warmup?.statusCodeStats['412']?.count ?? 0)
        if (gateway.fencingRejections < refused) problems.push(`only ${gateway.fencingRejections} fencing rejections for ${refused} answered 412`)
        if (gateway.upstreamCalls) problems.push(`${gateway.upstreamCalls} upstream calls during stale requests`)
        if (gateway.stored) problems.push(`${gateway.stored} responses stored during stale requests`)
      }
      const served = result['2xx'] + (result.warmup?.['2xx'] ?? 0)
      if (t.scenario !== 'stale' && gateway.fencingRejections) problems.push(`${gateway.fencingRejections} fencing rejections`)
      if ((t.scenario === 'unique' || t.scenario === 'idempotency') && gateway.stored < served) problems.push(`only ${gateway.stored} responses stored for ${served} answered`)
      if (t.scenario === 'fencing' && gateway.upstreamCalls < served) problems.push(`only ${gateway.upstreamCalls} upstream calls for ${served} answered`)
      if (t.scenario === 'replay' && gateway.replayed < served) problems.push(`only ${gateway.replayed} replays for ${served} answered`)
      if (t.scenario === 'replay' && gateway.upstreamCalls) problems.push(`${gateway.upstreamCalls} upstream calls during replays`)
    }
  }
  const statusCodes: Record<string, number> = {}
  for (const [code, s] of Object.entries(result.statusCodeStats)) statusCodes[code] = s.count
  const answered = result.requests.total + (result.warmup?.requests.total ?? 0)
  const cpuUsed = cpu0.target === undefined ? undefined : (cpuSeconds(t.child.proc.pid) ?? cpu0.target) - cpu0.target
  return {
    cpuUsPerRequest: cpuUsed === undefined || !answered ? undefined : Math.round((cpuUsed / answered) * 1e6),
    round,
    rps: result.requests.average,
    p50: result.latency.p50,
    p99: result.latency.p99,
    p999: result.latency.p99_9,
    total2xx: result['2xx'],
    non2xx: result.non2xx,
    errors: result.errors,
    timeouts: result.timeouts,
    statusCodes,
    cpu: {
      target: pct(cpu0.target, cpuSeconds(t.child.proc.pid)),
      upstream: pct(cpu0.upstream, t.child === upstream.child ? undefined : cpuSeconds(upstream.child.proc.pid)),
      loadgen: Math.round(((self.user + self.system) / 1e6 / wall) * 100),
      foreign,
    },
    gateway,
    problems,
    warnings,
  }
}
