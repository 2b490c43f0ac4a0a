/**
 * Summarises a V8 .cpuprofile (from `BENCH_CPU_PROF=DIR npm run bench`): the functions with the
 * most self time, the same grouped by package or source file, and the inclusive time of
 * fencegate's own functions.
 *
 *   node dist/bench/profile-top.js FILE.cpuprofile [N]
 */
import { readFileSync } from 'node:fs'

interface CallFrame { functionName: string; url: string; lineNumber: number }
interface Node { id: number; callFrame: CallFrame; children?: number[]; hitCount?: number }
interface Profile { nodes: Node[]; samples: number[]; timeDeltas: number[]; startTime: number; endTime: number }

const [file, nArg] = process.argv.slice(2)
if (!file) {
  process.stderr.write('usage: profile-top FILE.cpuprofile [N]\n')
  process.exit(2)
}
const N = Number(nArg ?? 25)
const p = JSON.parse(readFileSync(file, 'utf8')) as Profile

// self time per node from the samples and their time deltas
const self = new Map<number, number>()
for (let i = 0; i < p.samples.length; i++) self.set(p.samples[i], (self.get(p.samples[i]) ?? 0) + (p.timeDeltas[i] ?? 0))
const byId = new Map(p.nodes.map((n) => [n.id, n]))
const parent = new Map<number, number>()
for (const n of p.nodes) for (const c of n.children ?? []) parent.set(c, n.id)
const sampled = [...self.values()].reduce((a, b) => a + b, 0)

const short = (url: string): string => {
  if (!url) return '(native)'
  const nm = url.lastIndexOf('node_modules/')
  if (nm >= 0) {
    const rest = url.slice(nm + 13).split('/')
    return rest[0].startsWith('@') ? `${rest[0]}/${rest[1]}` : rest[0]
  }
  if (url.startsWith('node:')) return url
  const d = url.indexOf('/dist/')
  return d >= 0 ? url.slice(d + 6) : url
}
const label = (f: CallFrame) => `${f.functionName || '(anonymous)'} ${short(f.url)}${f.url ? `:${f.lineNumber + 1}` : ''}`
const special = (f: CallFrame) => f.functionName === '(idle)' || f.functionName === '(program)' || f.functionName === '(garbage collector)'

const add = (m: Map<string, number>, k: string, v: number) => m.set(k, (m.get(k) ?? 0) + v)
// percentages are of the busy time: the gateway idles between the bench's runs
let total = 0
for (const [id, t] of self) if (byId.get(id)!.callFrame.functionName !== '(idle)') total += t
const fnSelf = new Map<string, number>()
const groupSelf = new Map<string, number>()
const inclusive = new Map<string, number>()
for (const [id, t] of self) {
  const n = byId.get(id)!
  if (n.callFrame.functionName === '(idle)') continue
  add(fnSelf, label(n.callFrame), t)
  add(groupSelf, special(n.callFrame) ? n.callFrame.functionName : short(n.callFrame.url), t)
  // inclusive time of fencegate's own functions (dist/src/...), each counted once per stack
  const seen = new Set<string>()
  for (let cur: number | undefined = id; cur !== undefined; cur = parent.get(cur)) {
    const f = byId.get(cur)!.callFrame
    if (f.url.includes('/dist/src/')) {
      const l = label(f)
      if (!seen.has(l)) { seen.add(l); add(inclusive, l, t) }
    }
  }
}

const print = (title: string, m: Map<string, number>, n: number) => {
  process.stdout.write(`\n${title}\n`)
  for (const [k, v] of [...m].sort((a, b) => b[1] - a[1]).slice(0, n)) {
    process.stdout.write(`${((v / total) * 100).toFixed(1).padStart(6)}%  ${(v / 1000).toFixed(0).padStart(7)} ms  ${k}\n`)
  }
}
process.stdout.write(`${file}: ${(sampled / 1e6).toFixed(1)} s sampled, ${(total / 1e6).toFixed(1)} s busy (percentages are of busy time)\n`)
print('self time by package / file', groupSelf, 20)
print('self time by function', fnSelf, N)
print('inclusive time, fencegate functions', inclusive, N)
