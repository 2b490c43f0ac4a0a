/**
 * What a lease costs against the fenced writes it guards (contract §3a, issue "Cost"): one cycle
 * of acquire + renew + release on the lease service against three fenced POSTs through the
 * payments route, paired — rounds alternate between the two under the same load on one gateway,
 * and the figure is the median of the rounds' ratios of gateway CPU per cycle (lease ÷ three
 * writes), so a machine whose speed drifts still compares them fairly. Also the plain route's CPU
 * per request with `leases:` configured against without (the prefix compare on a request that is
 * no lease call), paired the same way on two gateways.
 *
 *   node dist/bench/lease-cost.js [--store memory|sqlite|redis|postgres] [--rounds 7] [--cycles 2000] [--concurrency 8]
 *
 * CPU is the gateway process's own user + system time, from /proc; the upstream is
 * ./upstream.ts; requests go over keep-alive connections with undici.
 */
import { readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { Agent, request } from 'undici'
import { BODY, BASE_HEADERS, CLI, HERE, POSTGRES_URL, REDIS_URL, runTag, freePort, runMain, start, tmp, waitHttp, waitLine } from './lib.js'

const argv = process.argv.slice(2)
const opt = (name: string, d: string) => { const i = argv.indexOf(`--${name}`); return i >= 0 ? argv[i + 1] : d }
const store = opt('store', 'sqlite')
const rounds = Number(opt('rounds', '7')), cycles = Number(opt('cycles', '2000')), concurrency = Number(opt('concurrency', '8'))

const cpuSeconds = (pid: number) => { const f = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' '); return (Number(f[11]) + Number(f[12])) / 100 }
const median = (xs: number[]) => { const s = [...xs].sort((a, b) => a - b); return s[Math.floor(s.length / 2)] }

const storeYaml = (name: string): string => {
  if (store === 'memory') return 'store: { kind: memory }'
  if (store === 'sqlite') return `store: { kind: sqlite, path: ${join(tmp(), `${name}.db`)} }`
  if (store === 'redis') return `store: { kind: redis, url: "${REDIS_URL}", keyPrefix: "bench-lease-${runTag}-${name}" }`
  return `store: { kind: postgres, url: "${POSTGRES_URL}", schema: bench_lease_${runTag}_${name.replace(/-/g, '_')} }`
}

async function gateway(name: string, upstream: string, leases: boolean): Promise<{ url: string; pid: number }> {
  const [port, admin] = [await freePort(), await freePort()]
  const file = join(tmp(), `${name}.yaml`)
  writeFileSync(file, `listen: 127.0.0.1:${port}
admin: { listen: 127.0.0.1:${admin} }
${storeYaml(name)}
log: { access: off }
${leases ? 'leases: { resources: ["account:*"], defaultTtl: 30s }\n' : ''}routes:
  - name: payments
    match: { path: "/accounts/:account/*" }
    upstream: { url: ${upstream} }
    fencing: { resource: "account:{param.account}" }
  - name: plain
    match: { path: "/plain/*" }
    upstream: { url: ${upstream} }
`)
  const child = start(name, process.execPath, [CLI, '--config', file])
  await waitHttp(`http://127.0.0.1:${admin}/readyz`, child, 200)
  return { url: `http://127.0.0.1:${port}`, pid: child.proc.pid! }
}

const agent = new Agent({ connections: concurrency * 2, pipelining: 1 })
const call = async (url: string, method: string, headers: Record<string, string>, body?: string): Promise<{ status: number; text: string }> => {
  const r = await request(url, { method: method as 'POST', headers, body, dispatcher: agent })
  return { status: r.statusCode, text: await r.body.text() }
}
const expectStatus = (r: { status: number; text: string }, want: number, what: string) => { if (r.status !== want) throw new Error(`${what}: ${r.status} ${r.text.slice(0, 200)}`) }

/** `n` cycles spread over `concurrency` workers; each worker's cycles in turn. */
async function spread(n: number, cycle: (worker: number, i: number) => Promise<void>): Promise<void> {
  let next = 0
  await Promise.all(Array.from({ length: concurrency }, async (_, w) => { while (next < n) await cycle(w, next++) }))
}

let tokenSeq = 0
const leaseCycle = (gw: string) => async (w: number, i: number) => {
  const at = `${gw}/_fencegate/leases/account%3Al-${runTag}-${w}-${i}`
  const g = await call(at, 'POST', BASE_HEADERS, '{"holder":"bench"}')
  expectStatus(g, 201, 'acquire')
  const token = JSON.parse(g.text).token as string
  expectStatus(await call(at, 'PUT', { 'fencing-token': token }), 200, 'renew')
  expectStatus(await call(at, 'DELETE', { 'fencing-token': token }), 204, 'release')
}
const writesCycle = (gw: string) => async (w: number) => {
  for (let k = 0; k < 3; k++) expectStatus(await call(`${gw}/accounts/w-${runTag}-${w}/charges`, 'POST', { ...BASE_HEADERS, 'fencing-token': String(++tokenSeq) }, BODY), 201, 'fenced write')
}
const plainCycle = (gw: string) => async () => { expectStatus(await call(`${gw}/plain/x`, 'POST', BASE_HEADERS, BODY), 201, 'plain') }

/** Gateway CPU seconds per cycle of `cycle` over `n` cycles. */
async function cpuPer(pid: number, n: number, cycle: (w: number, i: number) => Promise<void>): Promise<number> {
  const before = cpuSeconds(pid)
  await spread(n, cycle)
  return (cpuSeconds(pid) - before) / n
}

await runMain('lease-cost', async () => {
  const up = start('upstream', process.execPath, [join(HERE, 'upstream.js')])
  const upstream = await waitLine(up, /^listening (\S+)/)
  const withLeases = await gateway('leases', upstream, true)
  const without = await gateway('no-leases', upstream, false)
  // warm up both paths of both gateways
  await cpuPer(withLeases.pid, 300, leaseCycle(withLeases.url))
  await cpuPer(withLeases.pid, 300, writesCycle(withLeases.url))
  for (const g of [withLeases, without]) await cpuPer(g.pid, 1000, plainCycle(g.url))
  const leaseRatios: number[] = [], plainRatios: number[] = []
  const leaseUs: number[] = [], writesUs: number[] = [], plainOnUs: number[] = [], plainOffUs: number[] = []
  for (let r = 0; r < rounds; r++) {
    // alternate which goes first, so neither always runs on a warmer or cooler machine
    const order = r % 2 === 0
    const a = order ? await cpuPer(withLeases.pid, cycles, leaseCycle(withLeases.url)) : 0
    const b = await cpuPer(withLeases.pid, cycles, writesCycle(withLeases.url))
    const lease = order ? a : await cpuPer(withLeases.pid, cycles, leaseCycle(withLeases.url))
    leaseUs.push(lease * 1e6); writesUs.push(b * 1e6); leaseRatios.push(lease / b)
    const off = order ? await cpuPer(without.pid, cycles * 3, plainCycle(without.url)) : 0
    const on = await cpuPer(withLeases.pid, cycles * 3, plainCycle(withLeases.url))
    const offAfter = order ? off : await cpuPer(without.pid, cycles * 3, plainCycle(without.url))
    plainOnUs.push(on * 1e6); plainOffUs.push(offAfter * 1e6); plainRatios.push(on / offAfter)
  }
  const out = {
    store, rounds, cycles, concurrency,
    leaseCycleCpuUs: Math.round(median(leaseUs)), threeFencedWritesCpuUs: Math.round(median(writesUs)),
    leaseOverThreeWrites: Math.round(median(leaseRatios) * 1000) / 1000,
    plainRequestCpuUs: { withLeases: Math.round(median(plainOnUs) * 10) / 10, without: Math.round(median(plainOffUs) * 10) / 10 },
    plainWithOverWithout: Math.round(median(plainRatios) * 1000) / 1000,
    ratios: { lease: leaseRatios.map((x) => Math.round(x * 1000) / 1000), plain: plainRatios.map((x) => Math.round(x * 1000) / 1000) },
  }
  process.stdout.write(`${JSON.stringify(out, null, 2)}\n`)
})
