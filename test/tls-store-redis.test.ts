// Contract §5b, store.tls with Redis: TLS-only redis-servers (`--port 0 --tls-port N
// --tls-auth-clients yes`) the test starts in a temp folder. One server as the store: a write
// forwarded, its retry replayed, a stale token 412, the store's client certificate in the expiry
// gauge, `fencegate doctor` saying the link is TLS. Through a TLS-only Sentinel to a TLS-only
// primary with a TLS-only replica (store.replicas: 1, so WAIT needs the replica's TLS link):
// ioredis reaches the primary a Sentinel names over TLS only when told
// enableTLSForSentinelMode, which the store sets for rediss://. A TLS-only Redis Cluster
// (`--tls-cluster yes`): every node reached over TLS at the address it announces.
import { spawn, spawnSync, type ChildProcess } from 'node:child_process'
import { rmSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { Redis } from 'ioredis'
import { afterAll, afterEach, beforeAll, describe, expect, test } from 'vitest'
import { inspectStore } from '../src/store/index.js'
import { parseConfig } from '../src/config/load.js'
import { makePki, type Pem, type Pki } from './helpers/certs.js'
import { networkInterfaces } from 'node:os'
import { freePort, startTestGateway, tempDir, type RouteSpec, type StoreInput, type TestGateway } from './helpers/gateway.js'
import { expectProblem, metric, metrics, post, send } from './helpers/http.js'
import { startUpstream, type Upstream } from './helpers/upstream.js'
import { until } from './helpers/wait.js'

let pki: Pki
let server: Pem
let client: Pem
let up: Upstream
let dir: string
const DAY = 86_400
const cleanups: (() => Promise<void> | void)[] = []

beforeAll(async () => {
  pki = makePki()
  server = pki.issue('redis')
  // what redis-server itself presents when it connects out (a replica to its primary, a Sentinel)
  client = pki.issue('fencegate', { client: true, days: 45 })
  up = await startUpstream()
  dir = tempDir('fg-redis-tls-')
})
afterEach(async () => { for (const c of cleanups.splice(0).reverse()) await c() })
afterAll(async () => { await up?.close(); rmSync(dir, { recursive: true, force: true }) })

/** redis-server's TLS-only arguments: no cleartext port, clients must present a certificate the CA signed. */
const tlsArgs = (port: number) => [
  '--port', '0', '--tls-port', String(port), '--bind', '127.0.0.1',
  '--tls-cert-file', server.cert, '--tls-key-file', server.key, '--tls-ca-cert-file', pki.ca.cert,
  '--tls-client-cert-file', client.cert, '--tls-client-key-file', client.key,
  '--tls-auth-clients', 'yes', '--tls-replication', 'yes',
]

function redis(args: string[]): ChildProcess {
  const p = spawn('redis-server', args, { stdio: 'ignore' })
  cleanups.push(() => { p.kill('SIGKILL') })
  return p
}

/** A client of the test's own to a TLS-only server (with the client certificate). */
const tlsClient = (port: number) => {
  const r = new Redis({ port, host: '127.0.0.1', lazyConnect: true, retryStrategy: () => null, maxRetriesPerRequest: 0, tls: { ca: pki.ca.certPem, cert: client.certPem, key: client.keyPem } })
  r.on('error', () => {})
  return r
}

const answers = (port: number) => until(async () => {
  const r = tlsClient(port)
  try { await r.connect(); return (await r.ping()) === 'PONG' } catch { return false } finally { r.disconnect() }
}, { timeoutMs: 10_000, intervalMs: 50, message: `redis on TLS port ${port} to answer` })

async function server1(name: string): Promise<number> {
  const port = await freePort()
  redis([...tlsArgs(port), '--save', '', '--appendonly', 'no', '--dir', dir, '--dbfilename', `${name}.rdb`])
  await answers(port)
  return port
}

const ledger = (): RouteSpec => ({ name: 'ledger', path: '/ledger/:res', upstream: up.url, fencing: { resource: '{param.res}' }, idempotency: {} })
const write = (gw: TestGateway, res: string, token: number, key: string) =>
  post(`${gw.url}/ledger/${res}`, { token }, { 'fencing-token': String(token), 'idempotency-key': key })

/** Writes, their retry, a stale token: what a working store does. */
async function exercise(gw: TestGateway): Promise<void> {
  // the gateway starts before its store answers (contract §2); a cluster's slots take a while
  await until(async () => (await send(`${gw.adminUrl}/readyz`)).status === 200, { timeoutMs: 15_000, intervalMs: 100, message: 'the gateway to reach its store (/readyz 200)' })
  const res = `acct-${Date.now()}`
  const first = await write(gw, res, 10, `${res}-a`)
  expect(first.status, first.text).toBe(201)
  const retry = await write(gw, res, 10, `${res}-a`)
  expect(retry.status).toBe(201)
  expect(retry.headers['idempotent-replayed']).toBe('true')
  expect(retry.text).toBe(first.text)
  expectProblem(await write(gw, res, 9, `${res}-b`), { status: 412, type: 'stale-fencing-token' })
  expect(up.count(`/ledger/${res}`)).toBe(1)
}

describe('one TLS-only redis-server', () => {
  test('the store over rediss:// with the client certificate: forwarded, replayed, 412; the gauge and doctor say TLS', async () => {
    const port = await server1('one')
    const store: StoreInput = { kind: 'redis', url: `rediss://127.0.0.1:${port}`, keyPrefix: 'fgtls', tls: { ca: pki.ca.cert, cert: client.cert, key: client.key } }
    const gw = await startTestGateway({ store, routes: [ledger()] })
    cleanups.push(() => gw.close())
    await exercise(gw)
    const left = metric(await metrics(gw.adminUrl), 'fencegate_tls_certificate_expiry_seconds', { store: 'redis' })
    expect(left).toBeGreaterThan(44 * DAY)
    expect(left).toBeLessThanOrEqual(45 * DAY)
    const config = parseConfig(`store:\n  kind: redis\n  url: rediss://127.0.0.1:${port}\n  tls: { ca: ${pki.ca.cert}, cert: ${client.cert}, key: ${client.key} }\nroutes:\n  - name: r\n    match: { path: /r/* }\n    upstream: { url: http://127.0.0.1:1 }\n`, join(dir, 'fencegate.yaml'))
    const report = await inspectStore(config.store)
    expect(report.findings).toContainEqual(expect.objectContaining({ id: 'tls', status: 'ok', setting: expect.stringContaining('store link TLS: rediss://') }))
  })

  test('without the client certificate the server refuses the link: fenced writes fail closed (503), nothing forwarded', async () => {
    const port = await server1('noclient')
    const gw = await startTestGateway({ store: { kind: 'redis', url: `rediss://127.0.0.1:${port}`, keyPrefix: 'fgtls2', tls: { ca: pki.ca.cert } }, routes: [ledger()] })
    cleanups.push(() => gw.close())
    const before = up.seen.length
    expectProblem(await write(gw, 'acct-x', 1, 'x-1'), { status: 503, type: 'store-unavailable' })
    expect(up.seen.length).toBe(before)
  })
})

describe('Sentinel over TLS', () => {
  test('a TLS-only Sentinel naming a TLS-only primary with a TLS-only replica (store.replicas: 1)', async () => {
    const primary = await server1('primary')
    const replicaPort = await freePort()
    redis([...tlsArgs(replicaPort), '--save', '', '--appendonly', 'no', '--dir', dir, '--dbfilename', 'replica.rdb', '--replicaof', '127.0.0.1', String(primary), '--replica-announce-ip', '127.0.0.1'])
    await answers(replicaPort)
    const r = tlsClient(replicaPort)
    await r.connect()
    await until(async () => /master_link_status:up/.test(await r.info('replication')), { timeoutMs: 20_000, intervalMs: 50, message: 'the replica to be in sync over TLS' })
    r.disconnect()
    const sentinelPort = await freePort()
    const conf = join(dir, 'sentinel.conf')
    writeFileSync(conf, [
      'port 0', `tls-port ${sentinelPort}`, 'bind 127.0.0.1', `dir ${dir}`,
      `tls-cert-file ${server.cert}`, `tls-key-file ${server.key}`, `tls-ca-cert-file ${pki.ca.cert}`,
      `tls-client-cert-file ${client.cert}`, `tls-client-key-file ${client.key}`,
      'tls-auth-clients yes', 'tls-replication yes',
      `sentinel monitor fgm 127.0.0.1 ${primary} 1`, 'sentinel down-after-milliseconds fgm 1000', '',
    ].join('\n'))
    redis([conf, '--sentinel'])
    await until(async () => {
      const s = tlsClient(sentinelPort)
      try { await s.connect(); return ((await s.call('SENTINEL', 'REPLICAS', 'fgm')) as unknown[]).length === 1 } catch { return false } finally { s.disconnect() }
    }, { timeoutMs: 20_000, intervalMs: 100, message: 'the Sentinel to answer over TLS and know the replica' })
    const gw = await startTestGateway({
      store: { kind: 'redis', url: 'rediss://primary', sentinels: [`127.0.0.1:${sentinelPort}`], sentinelName: 'fgm', keyPrefix: 'fgtls3', replicas: 1, tls: { ca: pki.ca.cert, cert: client.cert, key: client.key } },
      routes: [ledger()],
    })
    cleanups.push(() => gw.close())
    await exercise(gw)
  })
})

describe('Redis Cluster over TLS', () => {
  test('three TLS-only masters joined over TLS: the store on rediss:// seeds with the client certificate', async () => {
    const nodes: number[] = []
    for (let i = 0; i < 3; i++) {
      const port = await freePort()
      const bus = await freePort()
      redis([...tlsArgs(port), '--tls-cluster', 'yes', '--cluster-enabled', 'yes', '--cluster-port', String(bus), '--cluster-config-file', join(dir, `nodes-${port}.conf`),
        '--cluster-node-timeout', '2000', '--save', '', '--appendonly', 'no', '--dir', dir, '--dbfilename', `c${port}.rdb`])
      await answers(port)
      nodes.push(port)
    }
    const create = spawnSync('redis-cli', ['--tls', '--cacert', pki.ca.cert, '--cert', client.cert, '--key', client.key, '--cluster', 'create', ...nodes.map((p) => `127.0.0.1:${p}`), '--cluster-yes'], { encoding: 'utf8', timeout: 30_000 })
    expect(create.status, `${create.stdout}${create.stderr}`).toBe(0)
    await until(async () => {
      const r = tlsClient(nodes[0])
      try { await r.connect(); return /cluster_state:ok/.test(String(await r.call('CLUSTER', 'INFO'))) } catch { return false } finally { r.disconnect() }
    }, { timeoutMs: 20_000, intervalMs: 100, message: 'the TLS cluster to be ok' })
    const gw = await startTestGateway({
      store: { kind: 'redis', cluster: true, url: nodes.map((p) => `rediss://127.0.0.1:${p}`).join(','), keyPrefix: 'fgtlsc', tls: { ca: pki.ca.cert, cert: client.cert, key: client.key } },
      routes: [ledger()],
    })
    cleanups.push(() => gw.close())
    await exercise(gw)
  })
})

test('doctor warns when a store on another address is reached in cleartext', async () => {
  // this host's own non-loopback address stands for another host: the link leaves loopback
  const address = Object.values(networkInterfaces()).flat().find((a) => a && a.family === 'IPv4' && !a.internal)?.address
  expect(address, 'a non-loopback IPv4 address on this host').toBeDefined()
  const port = await freePort()
  redis(['--port', String(port), '--bind', address!, '--protected-mode', 'no', '--save', '', '--appendonly', 'no', '--dir', dir, '--dbfilename', 'plain.rdb'])
  await until(async () => {
    const r = new Redis({ port, host: address, lazyConnect: true, retryStrategy: () => null, maxRetriesPerRequest: 0 })
    r.on('error', () => {})
    try { await r.connect(); return (await r.ping()) === 'PONG' } catch { return false } finally { r.disconnect() }
  }, { timeoutMs: 10_000, intervalMs: 50, message: 'the cleartext redis to answer' })
  const config = parseConfig(`store:\n  kind: redis\n  url: redis://${address}:${port}\nroutes:\n  - name: r\n    match: { path: /r/* }\n    upstream: { url: http://127.0.0.1:1 }\n`, join(dir, 'fencegate.yaml'))
  const report = await inspectStore(config.store)
  const tls = report.findings.find((f) => f.id === 'tls')
  expect(tls).toMatchObject({ status: 'risk', setting: `store link cleartext: redis:// (cleartext) to ${address}` })
  expect(tls!.consequence).toContain('rediss://')
  // the same server on loopback in cleartext: no finding (one host)
  const local = await inspectStore(parseConfig(`store:\n  kind: redis\n  url: redis://127.0.0.1:6379\nroutes:\n  - name: r\n    match: { path: /r/* }\n    upstream: { url: http://127.0.0.1:1 }\n`, join(dir, 'fencegate.yaml')).store)
  expect(local.findings.map((f) => f.id)).not.toContain('tls')
})
