/**
 * What the bench reads off the machine and the gateway (re-exported by bench/lib.ts): memory and
 * CPU time from /proc, the load of processes outside the bench, sums from a /metrics exposition.
 */
import { readFileSync } from 'node:fs'
import { children, running } from './children.js'

// ---------------------------------------------------------------------------------- /proc

/** Resident set size of a process, bytes (Linux /proc/<pid>/status VmRSS; undefined elsewhere). */
export function rssBytes(pid: number | undefined): number | undefined {
  if (pid === undefined) return undefined
  try {
    const m = /^VmRSS:\s+(\d+)\s+kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))
    return m ? Number(m[1]) * 1024 : undefined
  } catch {
    return undefined
  }
}

/**
 * user+system CPU seconds of a process and its descendants (a gateway's `--workers`), from
 * Linux /proc; undefined elsewhere.
 */
export function cpuSeconds(pid: number | undefined): number | undefined {
  if (pid === undefined) return undefined
  const one = (p: number): number => {
    const stat = readFileSync(`/proc/${p}/stat`, 'utf8')
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
    return (Number(f[11]) + Number(f[12])) / 100 // utime, stime in USER_HZ (100 on mainstream Linux)
  }
  const kids = (p: number): number[] => {
    try {
      return readFileSync(`/proc/${p}/task/${p}/children`, 'utf8').trim().split(/\s+/).filter(Boolean).map(Number)
    } catch {
      return []
    }
  }
  try {
    let total = 0
    const todo = [pid]
    while (todo.length) {
      const p = todo.pop()!
      total += one(p)
      todo.push(...kids(p))
    }
    return total
  } catch {
    return undefined
  }
}

/** Busy CPU seconds of the whole machine, all cores (Linux /proc/stat; undefined elsewhere). */
export function machineBusySeconds(): number | undefined {
  try {
    const f = readFileSync('/proc/stat', 'utf8').split('\n')[0].trim().split(/\s+/).slice(1).map(Number)
    const [user, nice, system, , , irq, softirq, steal] = f
    return (user + nice + system + irq + softirq + (steal ?? 0)) / 100
  } catch {
    return undefined
  }
}

/** CPU seconds used by this process and its running children. */
export function benchSeconds(): number | undefined {
  const u = process.cpuUsage()
  let total = (u.user + u.system) / 1e6
  for (const c of children) {
    if (!running(c)) continue
    const s = cpuSeconds(c.proc.pid)
    if (s === undefined) return undefined
    total += s
  }
  return total
}

/**
 * Measures CPU use between `begin()` and the returned function's call: % of one core used by
 * the machine outside this harness and its children (a neighbour's load skews every figure;
 * a redis or postgres server counts as outside).
 */
export function foreignMeter(): () => number | undefined {
  const m0 = machineBusySeconds(), b0 = benchSeconds(), t0 = performance.now()
  return () => {
    const m1 = machineBusySeconds(), b1 = benchSeconds(), wall = (performance.now() - t0) / 1000
    if (m0 === undefined || m1 === undefined || b0 === undefined || b1 === undefined || wall <= 0) return undefined
    return Math.max(0, Math.round((((m1 - m0) - (b1 - b0)) / wall) * 100))
  }
}

// ------------------------------------------------------------------------------- /metrics

/**
 * Sums the samples of a Prometheus (or OpenMetrics) text exposition whose name and labels
 * match: 0 when the family has no such sample yet, undefined when the exposition has no such
 * family at all (a renamed metric).
 */
export function metricSum(text: string, name: string, labels: Record<string, string> = {}): number | undefined {
  const family = name.replace(/_(count|sum|bucket)$/, '')
  if (!text.includes(`# TYPE ${family} `) && !text.includes(`# TYPE ${family.replace(/_total$/, '')} `)) return undefined
  let sum = 0
  for (const line of text.split('\n')) {
    if (!line.startsWith(`${name}{`) && !line.startsWith(`${name} `)) continue
    if (!Object.entries(labels).every(([k, v]) => line.includes(`${k}="${v}"`))) continue
    const rest = line.slice(line.startsWith(`${name}{`) ? line.indexOf('}', name.length) + 1 : name.length)
    const value = Number(rest.split(' # ')[0].trim().split(/\s+/)[0])
    if (!Number.isFinite(value)) return undefined
    sum += value
  }
  return sum
}

export async function scrape(adminUrl: string): Promise<string> {
  const r = await fetch(`${adminUrl}/metrics`)
  return r.text()
}

export const MiB = (bytes: number | undefined) => (bytes === undefined ? undefined : Math.round((bytes / 2 ** 20) * 10) / 10)
