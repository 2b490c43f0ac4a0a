/**
 * Instructions per request of one proxy, counted by valgrind's callgrind: a figure that repeats
 * to within ~0.5 % from run to run (0.2 % between two runs of one build) on a shared VM whose req/s and CPU-seconds per request swing by
 * 20 % or more between two runs of the same build. For A/B decisions on small changes; it counts
 * user-space instructions only (no syscalls, no cache misses), so it complements `run.ts`, it does
 * not replace it.
 *
 *   npx tsc -p . && node dist/bench/instructions.js [TARGET] [REQUESTS]
 *
 * TARGET: `floor`, `hono`, or a gateway: `memory` (default), `sqlite`, or a path to a compiled
 * fencegate (a `dist` folder, e.g. a copy of the build before a change) run with the memory store.
 * The requests are run.ts's `unique` stream on one connection, one at a time, so each request is
 * handled alone and the count does not depend on how requests happen to batch; 500 warm-up
 * requests (not counted) come first. REQUESTS defaults to 1000 (about a minute under valgrind).
 * BENCH_ROUTE picks the route's checks: `both` (default), `fencing`, `idempotency`, or `plain` (neither:
 * the request body is streamed, nothing stored); the requests carry only the headers it checks.
 * BENCH_SERIALIZE sets the fenced route's `fencing.serialize` (`true` or `store`; default off).
 * BENCH_STORE=sqlite runs a gateway given by path with the SQLite store.
 * BENCH_SETTLE=1 gives the idempotent route an `idempotency.settle` block (bench/gateways.ts).
 *
 * Needs valgrind (Debian: `apt-get install valgrind`).
 */
import autocannon from 'autocannon'
import { spawnSync } from 'node:child_process'
import { readdirSync, readFileSync } from 'node:fs'
import { join, resolve } from 'node:path'
import { BenchError, HERE, benchRoute, freePort, runMain, start, startUpstream, stopChild, tmp, uniqueRequests, waitHttp, waitLine, writeGatewayConfig } from './lib.js'

const target = process.argv[2] ?? 'memory'
const requests = Number(process.argv[3] ?? 1000)
const WARMUP = 500
const ROUTE = process.env.BENCH_ROUTE ?? 'both'
const CHECKS: Record<string, { fencing: boolean; idempotency: boolean }> = {
  both: { fencing: true, idempotency: true },
  fencing: { fencing: true, idempotency: false },
  idempotency: { fencing: false, idempotency: true },
  plain: { fencing: false, idempotency: false },
}
const known = Object.hasOwn(CHECKS, ROUTE)
const checks = { ...(known ? CHECKS[ROUTE] : CHECKS.both), settle: process.env.BENCH_SETTLE === '1' }

/** Sends `amount` requests on one connection, one after the other; throws on any non-2xx answer. */
async function serial(url: string, amount: number): Promise<void> {
  const r = await autocannon({ url, connections: 1, amount, timeout: 60, ...uniqueRequests({ key: checks.idempotency, token: checks.fencing }) })
  if (r.non2xx || r.errors || r.timeouts) throw new BenchError(`${target}: ${r.non2xx} non-2xx answers, ${r.errors} errors, ${r.timeouts} timeouts`)
}

await runMain('instructions', async () => {
  if (!known) throw new BenchError(`BENCH_ROUTE must be one of ${Object.keys(CHECKS).join(', ')}, got "${ROUTE}"`)
  if (!Number.isInteger(requests) || requests < 1) throw new BenchError(`REQUESTS must be a positive integer, got "${process.argv[3]}"`)
  if (spawnSync('valgrind', ['--version']).status !== 0) throw new BenchError('valgrind is not on PATH (Debian: apt-get install valgrind)')
  const upstream = await startUpstream()
  const out = join(tmp(), 'callgrind.out')
  const port = await freePort()
  const valgrind = ['--tool=callgrind', '--smc-check=all-non-file', `--callgrind-out-file=${out}`, process.execPath]
  let args: string[]
  let ready: (child: ReturnType<typeof start>) => Promise<void>
  if (target === 'floor' || target === 'hono') {
    args = [join(HERE, target === 'floor' ? 'floor-proxy.js' : 'hono-floor.js'), upstream.url, String(port)]
    ready = async (child) => { await waitLine(child, /^(listening)/, 180_000) }
  } else {
    const cli = target === 'memory' || target === 'sqlite' ? join(HERE, '../src/cli.js') : resolve(target, 'src/cli.js')
    const store = target === 'sqlite' || process.env.BENCH_STORE === 'sqlite' ? `  kind: sqlite\n  path: ${join(tmp(), 'store.db')}` : '  kind: memory'
    const adminPort = await freePort()
    let route = benchRoute('bench', 'accounts', upstream.url, checks)
    if (process.env.BENCH_SERIALIZE) route = route.replace('      resource: "account:{param.account}"\n', `$&      serialize: ${process.env.BENCH_SERIALIZE}\n`)
    const config = writeGatewayConfig('instructions', store, upstream.url, { port, adminPort }, route)
    args = [cli, '--config', config]
    ready = (child) => waitHttp(`http://127.0.0.1:${adminPort}/readyz`, child, 200, 180_000)
  }
  const child = start(`callgrind-${target.replace(/\W+/g, '_')}`, 'valgrind', [...valgrind, ...args])
  await ready(child)
  const url = `http://127.0.0.1:${port}`
  await serial(url, WARMUP)
  const control = (flag: string) => {
    const r = spawnSync('callgrind_control', [flag, String(child.proc.pid)], { encoding: 'utf8' })
    if (r.status !== 0) throw new BenchError(`callgrind_control ${flag} failed: ${r.stderr || r.stdout}`)
  }
  control('-z') // forget start-up and warm-up
  await serial(url, requests)
  control('-d')
  await stopChild(child)
  // the dump written by -d: <out>.<n>
  const dir = join(out, '..')
  const dumps = readdirSync(dir).filter((f) => f.startsWith('callgrind.out.')).sort()
  // callgrind.out itself holds what ran after the dump (shut-down): never the figure
  if (!dumps.length) throw new BenchError(`callgrind wrote no dump for callgrind_control -d in ${dir}`)
  const text = readFileSync(join(dir, dumps[0]), 'utf8')
  const total = Number(/^(?:summary|totals): (\d+)/m.exec(text)?.[1])
  if (!Number.isFinite(total)) throw new BenchError(`no instruction total in ${dumps[0]}`)
  const serialize = process.env.BENCH_SERIALIZE ? `, serialize: ${process.env.BENCH_SERIALIZE}` : ''
  process.stdout.write(`${target} (${ROUTE}${serialize}${checks.settle ? ', settle' : ''}): ${Math.round(total / requests)} instructions per request (${requests} requests, one at a time)\n`)
})
