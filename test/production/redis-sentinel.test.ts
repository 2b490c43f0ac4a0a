// Issue 26 item 5 on a real Sentinel failover: a private Redis primary, a replica that follows it
// through a TCP proxy of the test's own (so replication can be cut while the primary still
// answers), and one Sentinel; a gateway finds the primary through the Sentinel. Replication is
// cut, a write is made, the primary is killed and Sentinel promotes the replica, which lacks it.
// Without store.replicas that write was acknowledged: the promotion is state loss (503
// store-state-lost, nothing forwarded on what the replica lacked). With store.replicas: 1 the
// write was refused (WAIT), so nothing acknowledged is lost: no alarm, the gateway follows.
import { afterEach, beforeAll, describe, expect, test } from 'vitest'
import { spawn, type ChildProcess } from 'node:child_process'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import net from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Redis } from 'ioredis'
import { startUpstream, type Upstream } from '../helpers/upstream.js'
import { freePort, startTestGateway, type RouteSpec, type TestGateway } from '../helpers/gateway.js'
import { expectProblem, metric, metrics, post, type Reply } from '../helpers/http.js'
import { until } from '../helpers/wait.js'

let up: Upstream
const cleanups: (() => Promise<void> | void)[] = []
beforeAll(async () => {
  up = await startUpstream()
  return () => up.close()
})
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c()
})

function redis(args: string[]): ChildProcess {
  const p = spawn('redis-server', args, { stdio: 'ignore' })
  cleanups.push(() => { p.kill('SIGKILL') })
  return p
}

const answers = (port: number) => until(async () => {
  const r = new Redis({ port, lazyConnect: true, retryStrategy: () => null, maxRetriesPerRequest: 0 })
  r.on('error', () => {})
  try { await r.connect(); return (await r.ping()) === 'PONG' } catch { return false } finally { r.disconnect() }
}, { timeoutMs: 10_000, intervalMs: 50, message: `redis on ${port} to answer` })

/** A TCP proxy that can stop passing bytes (both ways) while keeping the connections open. */
async function proxy(target: number): Promise<{ port: number; cut(): void }> {
  let open = true
  const sockets: net.Socket[] = []
  const server = net.createServer((c) => {
    const u = net.connect(target, '127.0.0.1')
    sockets.push(c, u)
    c.on('data', (d) => { if (open) u.write(d) })
    u.on('data', (d) => { if (open) c.write(d) })
    c.on('error', () => u.destroy())
    u.on('error', () => c.destroy())
    c.on('close', () => u.destroy())
    u.on('close', () => c.destroy())
  })
  await new Promise<void>((ok) => server.listen(0, '127.0.0.1', ok))
  cleanups.push(() => { for (const s of sockets) s.destroy(); server.close() })
  return { port: (server.address() as net.AddressInfo).port, cut: () => { open = false } }
}

interface Setup { primary: ChildProcess; primaryPort: number; replicaPort: number; dir: string; cut(): void; sentinel: string }

async function start(): Promise<Setup> {
  const dir = mkdtempSync(join(tmpdir(), 'fg-sentinel-'))
  cleanups.push(() => rmSync(dir, { recursive: true, force: true }))
  const [primaryPort, replicaPort, sentinelPort] = [await freePort(), await freePort(), await freePort()]
  const base = ['--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir]
  const primary = redis(['--port', String(primaryPort), ...base, '--dbfilename', 'p.rdb'])
  await answers(primaryPort)
  const link = await proxy(primaryPort)
  redis(['--port', String(replicaPort), ...base, '--dbfilename', 'r.rdb', '--replicaof', '127.0.0.1', String(link.port), '--replica-announce-ip', '127.0.0.1', '--repl-timeout', '60'])
  await answers(replicaPort)
  const r = new Redis({ port: replicaPort })
  await until(async () => /master_link_status:up/.test(await r.info('replication')), { timeoutMs: 20_000, intervalMs: 50, message: 'the replica to be in sync' })
  r.disconnect()
  const conf = join(dir, 'sentinel.conf')
  writeFileSync(conf, [
    `port ${sentinelPort}`, 'bind 127.0.0.1', `dir ${dir}`,
    `sentinel monitor fgm 127.0.0.1 ${primaryPort} 1`, 'sentinel down-after-milliseconds fgm 1000', 'sentinel failover-timeout fgm 10000', '',
  ].join('\n'))
  redis([conf, '--sentinel'])
  await answers(sentinelPort)
  const s = new Redis({ port: sentinelPort })
  cleanups.push(() => s.disconnect())
  // the Sentinel must know the replica (from the primary's INFO) before it can promote it
  await until(async () => ((await s.call('SENTINEL', 'REPLICAS', 'fgm')) as unknown[]).length === 1, { timeoutMs: 20_000, intervalMs: 100, message: 'the Sentinel to find the replica' })
  return { primary, primaryPort, replicaPort, dir, cut: link.cut, sentinel: `127.0.0.1:${sentinelPort}` }
}

const ledger = (): RouteSpec => ({ name: 'ledger', path: '/ledger/:res', upstream: up.url, fencing: { resource: '{param.res}' }, idempotency: {} })
const write = (gw: TestGateway, res: string, token: number, key: string) =>
  post(`${gw.url}/ledger/${res}`, { token }, { 'fencing-token': String(token), 'idempotency-key': key })

/** Requests sent every 20 ms until stopped: the load a failover happens under. */
function load(gw: TestGateway, res: string, token: number) {
  const replies: Reply[] = []
  let on = true
  const done = (async () => {
    for (let i = 0; on; i++) {
      replies.push(await write(gw, res, token, `load-${token}-${i}`).catch(() => ({ status: 0 }) as Reply))
      await new Promise((r) => setTimeout(r, 20))
    }
  })()
  return { replies, stop: async () => { on = false; await done } }
}

const problemType = (r: Reply) => (r.status === 503 ? String((r.json() as { type?: string }).type).replace(/^.*:/, '') : '')

describe('Redis Sentinel failover', () => {
  test('without store.replicas: the promoted replica lacks an acknowledged write — 503 store-state-lost, nothing forwarded on it', async () => {
    const s = await start()
    const gw = await startTestGateway({ store: { kind: 'redis', sentinels: [s.sentinel], sentinelName: 'fgm', keyPrefix: 'fgsent' }, routes: [ledger()] })
    cleanups.push(() => gw.close())
    const res = `acct-${Date.now()}`
    expect((await write(gw, res, 100, 'k-100')).status).toBe(201)
    const replica = new Redis({ port: s.replicaPort })
    cleanups.push(() => replica.disconnect())
    await until(async () => (await replica.get(`{fg:fgsent:f:${res}}`)) === '100', { timeoutMs: 5000, intervalMs: 50, message: 'token 100 to reach the replica' })
    s.cut()
    expect((await write(gw, res, 200, 'k-200')).status).toBe(201)
    const applied = up.count(`/ledger/${res}`)

    const stale = load(gw, res, 150)
    s.primary.kill('SIGKILL')
    await until(async () => problemType(stale.replies.at(-1) ?? ({ status: 0 } as Reply)) === 'store-state-lost', { timeoutMs: 30_000, intervalMs: 100, message: 'the gateway to report the loss' })
    await stale.stop()
    // token 150 was never forwarded (the mark of 200 is what the replica lacks), k-200 not twice
    expect(stale.replies.filter((r) => r.status < 500)).toEqual([])
    expect(up.count(`/ledger/${res}`)).toBe(applied)
    expectProblem(await write(gw, res, 200, 'k-200'), { status: 503, type: 'store-state-lost' })
    expect(up.count(`/ledger/${res}`)).toBe(applied)
    expect(metric(await metrics(gw.adminUrl), 'fencegate_store_state_lost', { store: 'redis' })).toBe(1)
    expect(gw.logs.join('')).toMatch(/store went back in time.*a replica took over as primary/)
    // the loss note is on the promoted replica: a gateway started now finds it and refuses too
    const note = JSON.parse((await replica.get('{fg:fgsent:lossnote}')) ?? '{}')
    expect(note).toMatchObject({ signal: 'replication-id', seen: expect.stringMatching(/a replica took over as primary/) })
    const later = await startTestGateway({ store: { kind: 'redis', sentinels: [s.sentinel], sentinelName: 'fgm', keyPrefix: 'fgsent' }, routes: [ledger()] })
    cleanups.push(() => later.close())
    expectProblem(await write(later, res, 300, 'k-300'), { status: 503, type: 'store-state-lost' })
    expect(up.count(`/ledger/${res}`)).toBe(applied)
  }, 45_000)

  test('with store.replicas: 1: the write the replica lacks was refused (WAIT), so the failover loses nothing acknowledged and raises no alarm', async () => {
    const s = await start()
    const gw = await startTestGateway({ store: { kind: 'redis', sentinels: [s.sentinel], sentinelName: 'fgm', keyPrefix: 'fgsent', replicas: 1, timeout: '1s' }, routes: [ledger()] })
    cleanups.push(() => gw.close())
    const res = `acct-${Date.now()}`
    expect((await write(gw, res, 100, 'k-100')).status).toBe(201)
    s.cut()
    expectProblem(await write(gw, res, 200, 'k-200'), { status: 503, type: 'store-unavailable' })
    const applied = up.count(`/ledger/${res}`)

    const during = load(gw, res, 150)
    s.primary.kill('SIGKILL')
    // the old primary comes back empty; Sentinel makes it a replica of the promoted one, so WAIT is met again
    await new Promise((r) => setTimeout(r, 3000))
    redis(['--port', String(s.primaryPort), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', s.dir, '--dbfilename', 'p2.rdb'])
    await until(async () => during.replies.some((r) => r.status === 201), { timeoutMs: 40_000, intervalMs: 200, message: 'writes to pass on the promoted primary' }).catch(async (e) => {
      const seen = [...new Set(during.replies.map((r) => `${r.status} ${problemType(r)} ${r.status === 503 ? String((r.json() as { detail?: string }).detail) : ''}`))]
      const n = new Redis({ port: s.replicaPort })
      const info = await n.info('replication')
      n.disconnect()
      throw new Error(`${(e as Error).message}: ${seen.join(' | ')}; promoted: ${info.replace(/\r?\n/g, ' ')}; log ${gw.logs.slice(-5).join('')}`)
    })
    await during.stop()
    // only 503 store-unavailable before the promoted primary had a replica again; never a loss
    expect(during.replies.filter((r) => r.status !== 201 && !(r.status === 503 && problemType(r) === 'store-unavailable')).map((r) => r.status)).toEqual([])
    expect(metric(await metrics(gw.adminUrl), 'fencegate_store_state_lost', { store: 'redis' })).toBe(0)
    // every 201 was forwarded once, nothing else was
    expect(up.count(`/ledger/${res}`)).toBe(applied + during.replies.filter((r) => r.status === 201).length)
  }, 60_000)
})
