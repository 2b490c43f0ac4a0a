/**
 * `--workers N`: the metrics of N worker processes summed in the primary, with counters that
 * never go down when a worker dies.
 *
 * prom-client's AggregatorRegistry asks the live workers at scrape time, so a dead worker's
 * counts vanish from the sum: a counter drops, and Prometheus reads the drop as a reset and
 * counts the survivors' whole totals again in `increase()`. Here the primary keeps each
 * worker's last snapshot (`registry.getMetricsAsJSON()`: all of it at every scrape, and its
 * `fencegate_*` metrics every PUSH_MS while it serves requests), and when a worker exits it
 * moves that snapshot's counters and histograms (buckets, sums and counts) into a carried total
 * that every later exposition adds to the live workers'. Gauges describe live processes and are
 * not carried. The series keep their labels (no `worker` label), so dashboards, alerts and
 * cardinality are those of a single process.
 *
 * Bound: a worker killed with SIGKILL loses what it counted after its last snapshot, at most
 * PUSH_MS of its requests; a worker that stops on SIGTERM sends a last one before it exits.
 */
import type { Worker } from 'node:cluster'
import { AggregatorRegistry, Registry, type Metric, type MetricObjectWithValues, type MetricValue } from 'prom-client'

type MetricJson = MetricObjectWithValues<MetricValue<string>>
type Snapshot = MetricJson[]

const ASK = 'fencegate:metrics?'
const SNAPSHOT = 'fencegate:metrics'
/** how often a serving worker sends its counts unasked, ms: the most of its counts a SIGKILL loses */
export const PUSH_MS = 100
/** how long a scrape waits for a worker's snapshot before it uses the last one, ms */
const ASK_TIMEOUT_MS = 1000

interface Message { type?: string; id?: number; metrics?: Snapshot }

/**
 * In a worker: answers the primary's asks with `registry`'s whole snapshot, and sends the
 * `fencegate_*` part every PUSH_MS in which `activity.requests` moved.
 * @returns `flush()`, which stops the pushes, sends a last whole snapshot and resolves once it is
 *   written to the channel
 */
export function serveWorkerMetrics(registry: Registry, activity: { readonly requests: number }): { flush(): Promise<void> } {
  const own = new Registry()
  for (const m of registry.getMetricsAsArray()) if ((m as unknown as { name: string }).name.startsWith('fencegate_')) own.registerMetric(m as unknown as Metric)
  const send = async (from: Registry, id?: number): Promise<void> => {
    const metrics = await from.getMetricsAsJSON() as Snapshot
    await new Promise<void>((resolve) => {
      if (!process.connected) return resolve()
      process.send!({ type: SNAPSHOT, id, metrics }, undefined, {}, () => resolve())
    })
  }
  const onMessage = (m: Message) => { if (m?.type === ASK) void send(registry, m.id).catch(() => {}) }
  process.on('message', onMessage)
  let pushed = activity.requests
  const timer = setInterval(() => {
    if (activity.requests === pushed) return
    pushed = activity.requests
    void send(own).catch(() => {})
  }, PUSH_MS)
  timer.unref()
  return {
    flush: () => {
      clearInterval(timer)
      process.off('message', onMessage)
      return send(registry).catch(() => {})
    },
  }
}

/** In the primary: each worker's last snapshot, the dead workers' carried counts, and their sum. */
export class ClusterMetrics {
  /** by worker id, by metric name: the last value each metric was sent with */
  readonly #last = new Map<number, Map<string, MetricJson>>()
  readonly #waiting = new Map<number, () => void>()
  #carried: Snapshot = []
  #asks = 0

  /** Follows `worker`'s snapshots from now on. */
  watch(worker: Worker): void {
    const last = new Map<string, MetricJson>()
    this.#last.set(worker.id, last)
    worker.on('message', (m: Message) => {
      if (m?.type !== SNAPSHOT || !m.metrics) return
      for (const metric of m.metrics) last.set(metric.name, metric)
      if (m.id !== undefined) this.#waiting.get(m.id)?.()
    })
  }

  /** `worker` exited: its last snapshot's counters and histograms are carried from now on. */
  exited(worker: Worker): void {
    const last = this.#last.get(worker.id)
    this.#last.delete(worker.id)
    if (!last?.size) return
    const counting = [...last.values()].filter((m) => String(m.type) === 'counter' || String(m.type) === 'histogram')
    this.#carried = AggregatorRegistry.aggregate([this.#carried, counting]).getMetricsAsArray()
      .map((m) => (m as unknown as { get(): MetricJson }).get())
  }

  /**
   * The sum over the live workers (asked now; the last snapshot of one that does not answer
   * within ASK_TIMEOUT_MS) and the carried counts, as a registry to expose.
   */
  async collect(workers: Iterable<Worker>): Promise<Registry> {
    await Promise.all([...workers].filter((w) => !w.isDead()).map((w) => this.#ask(w)))
    return AggregatorRegistry.aggregate([...[...this.#last.values()].map((l) => [...l.values()]), this.#carried])
  }

  #ask(worker: Worker): Promise<void> {
    const id = ++this.#asks
    return new Promise<void>((resolve) => {
      const done = () => { clearTimeout(timer); this.#waiting.delete(id); resolve() }
      const timer = setTimeout(done, ASK_TIMEOUT_MS)
      this.#waiting.set(id, done)
      // a worker killed before its exit is seen: the send fails through the callback, not as an
      // 'error' event that would stop the primary
      try { worker.send({ type: ASK, id }, undefined, undefined, (e) => { if (e) done() }) } catch { done() }
    })
  }
}
