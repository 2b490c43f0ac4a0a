/**
 * Where a request's CPU goes, by layer: a V8 .cpuprofile's busy time (idle and module loading
 * left out) split into the layers a proxied request passes through — the kernel's socket calls,
 * Node's HTTP server and streams, the garbage collector, undici, Hono, prom-client, the store's
 * client, SHA-256, and fencegate's own code by folder — in µs per request when the number of
 * requests the profile covers is given. Two profiles side by side (the floor's and fencegate's,
 * taken under the same load) show what fencegate adds, layer by layer.
 *
 *   node dist/bench/profile-layers.js A.cpuprofile[=REQUESTS] [B.cpuprofile[=REQUESTS] ...]
 *
 * Sampling attributes a socket write's kernel time to the JavaScript frame that made it, and
 * inlined functions to their caller: read a layer to within a few µs, not a function to one.
 */
import { readFileSync } from 'node:fs'

interface CallFrame { functionName: string; url: string }
interface Node { id: number; callFrame: CallFrame; children?: number[] }
interface Profile { nodes: Node[]; samples: number[]; timeDeltas: number[] }

const SYSCALLS = new Set(['writev', 'writeBuffer', 'writeUtf8String', 'writeLatin1String', 'read', 'close', 'fstat', 'readv', 'shutdown'])

/** The layer of one sampled frame; undefined for idle. */
function layerOf(f: CallFrame): string | undefined {
  const { functionName: fn, url } = f
  if (fn === '(idle)') return undefined
  if (fn === '(garbage collector)') return 'garbage collector'
  if (!url) {
    if (SYSCALLS.has(fn)) return 'kernel: socket reads and writes'
    return 'V8 and Node native (program, microtasks, timers)'
  }
  if (url.startsWith('wasm://')) return 'undici (llhttp parser, wasm)'
  const nm = url.lastIndexOf('node_modules/')
  if (nm >= 0) {
    const parts = url.slice(nm + 13).split('/')
    const pkg = parts[0].startsWith('@') ? `${parts[0]}/${parts[1]}` : parts[0]
    if (pkg === 'hono' || pkg === '@hono/node-server') return 'Hono (router, URL decoding)'
    if (pkg === 'undici') return 'undici (upstream HTTP client)'
    if (pkg === 'prom-client') return 'prom-client (metrics)'
    if (['ioredis', 'redis-parser', 'pg', 'pg-protocol', 'pg-pool', 'better-sqlite3', 'denque', 'cluster-key-slot'].includes(pkg)) return `store client (${pkg.startsWith('pg') ? 'pg' : pkg})`
    if (pkg.startsWith('@opentelemetry')) return 'OpenTelemetry'
    return `other package (${pkg})`
  }
  if (url.startsWith('node:internal/crypto')) return 'SHA-256 (fingerprint, key hashes)'
  if (url.startsWith('node:internal/deps/undici')) return 'undici (upstream HTTP client)'
  if (url.startsWith('node:')) return 'Node HTTP server, net, streams, events'
  const d = url.indexOf('/dist/src/')
  if (d >= 0) {
    const rest = url.slice(d + 10)
    const slash = rest.indexOf('/')
    return `fencegate: ${slash < 0 ? rest.replace(/\.js$/, '') : `${rest.slice(0, slash)}/`}`
  }
  return 'the proxy script itself'
}

/** Busy µs per layer; module loading (start-up) is left out. */
function layers(file: string): Map<string, number> {
  const p = JSON.parse(readFileSync(file, 'utf8')) as Profile
  const byId = new Map(p.nodes.map((n) => [n.id, n]))
  const parent = new Map<number, number>()
  for (const n of p.nodes) for (const c of n.children ?? []) parent.set(c, n.id)
  const startUp = (id: number): boolean => {
    for (let cur: number | undefined = id; cur !== undefined; cur = parent.get(cur)) {
      const u = byId.get(cur)!.callFrame.url
      if (u.startsWith('node:internal/modules/') || u.startsWith('node:internal/bootstrap/')) return true
    }
    return false
  }
  const out = new Map<string, number>()
  for (let i = 0; i < p.samples.length; i++) {
    const id = p.samples[i]
    const layer = layerOf(byId.get(id)!.callFrame)
    if (layer === undefined || startUp(id)) continue
    out.set(layer, (out.get(layer) ?? 0) + (p.timeDeltas[i] ?? 0))
  }
  return out
}

const args = process.argv.slice(2)
if (!args.length) {
  process.stderr.write('usage: profile-layers A.cpuprofile[=REQUESTS] [B.cpuprofile[=REQUESTS] ...]\n')
  process.exit(2)
}
const runs = args.map((a) => {
  const eq = a.lastIndexOf('=')
  const file = eq > 0 ? a.slice(0, eq) : a
  const requests = eq > 0 ? Number(a.slice(eq + 1)) : 0
  return { name: file.split('/').pop()!.replace(/\.cpuprofile$/, ''), requests, layers: layers(file) }
})
const names = [...new Set(runs.flatMap((r) => [...r.layers.keys()]))]
const total = (r: (typeof runs)[number]) => [...r.layers.values()].reduce((a, b) => a + b, 0)
names.sort((a, b) => (runs.at(-1)!.layers.get(b) ?? 0) - (runs.at(-1)!.layers.get(a) ?? 0))
const cell = (r: (typeof runs)[number], us: number) => (r.requests ? `${(us / r.requests).toFixed(1)} µs` : `${((us / total(r)) * 100).toFixed(1)} %`).padStart(12)
process.stdout.write(`${'layer'.padEnd(52)}${runs.map((r) => r.name.slice(0, 11).padStart(12)).join('')}\n`)
for (const n of names) process.stdout.write(`${n.padEnd(52)}${runs.map((r) => cell(r, r.layers.get(n) ?? 0)).join('')}\n`)
process.stdout.write(`${'all busy time'.padEnd(52)}${runs.map((r) => cell(r, total(r))).join('')}\n`)
