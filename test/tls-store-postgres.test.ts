// Contract §5b, store.tls with PostgreSQL: a private cluster the test starts (initdb into a temp
// folder) with `ssl = on`, a server certificate naming only `localhost`, and pg_hba taking only
// TLS connections that present a client certificate the CA signed. store.tls is verified as
// sslmode=verify-full: the URL's host `localhost` is accepted; the same server reached as
// 127.0.0.1, a name its certificate does not hold, is refused, and the gateway fails closed
// (503 store-unavailable, nothing forwarded).
import { copyFileSync, chmodSync, chownSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, beforeAll, expect, test } from 'vitest'
import { inspectStore } from '../src/store/index.js'
import { parseConfig } from '../src/config/load.js'
import { makePki, type Pem, type Pki } from './helpers/certs.js'
import { freePort, startTestGateway, type RouteSpec, type TestGateway } from './helpers/gateway.js'
import { expectProblem, metric, metrics, post } from './helpers/http.js'
import { startUpstream, type Upstream } from './helpers/upstream.js'
import { pgOwner, pgProgram } from './production/pg-cluster.js'

let pki: Pki
let client: Pem
let up: Upstream
let root: string
let port: number
const DAY = 86_400

beforeAll(async () => {
  pki = makePki()
  const server = pki.issue('postgres', { san: 'DNS:localhost' })
  client = pki.issue('fencegate', { client: true, days: 50 })
  up = await startUpstream()
  root = mkdtempSync(join(tmpdir(), 'fg-pg-tls-'))
  chownSync(root, pgOwner.uid, pgOwner.gid)
  const data = join(root, 'data')
  await pgProgram('initdb', ['-D', data, '-A', 'trust', '-U', 'postgres', '--no-sync'], root)
  // the server's files owned by postgres, the key readable by it alone (postgres refuses others)
  for (const [from, to] of [[server.cert, 'server.crt'], [server.key, 'server.key'], [pki.ca.cert, 'ca.crt']]) {
    copyFileSync(from, join(data, to))
    chownSync(join(data, to), pgOwner.uid, pgOwner.gid)
    chmodSync(join(data, to), 0o600)
  }
  port = await freePort()
  writeFileSync(join(data, 'postgresql.conf'), [
    "listen_addresses = '127.0.0.1'", `port = ${port}`, `unix_socket_directories = '${root}'`, 'fsync = off', 'shared_buffers = 16MB', 'max_connections = 30',
    'ssl = on', "ssl_cert_file = 'server.crt'", "ssl_key_file = 'server.key'", "ssl_ca_file = 'ca.crt'", '',
  ].join('\n'), { flag: 'a' })
  writeFileSync(join(data, 'pg_hba.conf'), ['local all all trust', 'hostssl all all 127.0.0.1/32 trust clientcert=verify-ca', 'hostnossl all all 0.0.0.0/0 reject', ''].join('\n'))
  await pgProgram('pg_ctl', ['-D', data, '-l', join(root, 'log'), '-w', '-t', '30', 'start'])
}, 90_000)

afterAll(async () => {
  await up?.close()
  if (root) {
    await pgProgram('pg_ctl', ['-D', join(root, 'data'), '-m', 'immediate', '-w', 'stop']).catch(() => {})
    rmSync(root, { recursive: true, force: true })
  }
})

const ledger = (): RouteSpec => ({ name: 'ledger', path: '/ledger/:res', upstream: up.url, fencing: { resource: '{param.res}' }, idempotency: {} })
const write = (gw: TestGateway, res: string, token: number, key: string) =>
  post(`${gw.url}/ledger/${res}`, { token }, { 'fencing-token': String(token), 'idempotency-key': key })
const tls = () => ({ ca: pki.ca.cert, cert: client.cert, key: client.key })

test('verify-full, the right name: the store over TLS — forwarded, replayed, 412; the gauge and doctor say TLS', async () => {
  const url = `postgres://postgres@localhost:${port}/postgres?sslmode=verify-full`
  const gw = await startTestGateway({ store: { kind: 'postgres', url, migrate: true, tls: tls() }, routes: [ledger()] })
  try {
    const res = `acct-${Date.now()}`
    const first = await write(gw, res, 5, `${res}-a`)
    expect(first.status, first.text).toBe(201)
    const retry = await write(gw, res, 5, `${res}-a`)
    expect(retry.headers['idempotent-replayed']).toBe('true')
    expectProblem(await write(gw, res, 4, `${res}-b`), { status: 412, type: 'stale-fencing-token' })
    expect(up.count(`/ledger/${res}`)).toBe(1)
    const left = metric(await metrics(gw.adminUrl), 'fencegate_tls_certificate_expiry_seconds', { store: 'postgres' })
    expect(left).toBeGreaterThan(49 * DAY)
    expect(left).toBeLessThanOrEqual(50 * DAY)
  } finally {
    await gw.close()
  }
  const config = parseConfig(`store:\n  kind: postgres\n  url: ${url}\n  tls: { ca: ${pki.ca.cert}, cert: ${client.cert}, key: ${client.key} }\nroutes:\n  - name: r\n    match: { path: /r/* }\n    upstream: { url: http://127.0.0.1:1 }\n`, join(root, 'fencegate.yaml'))
  const report = await inspectStore(config.store)
  expect(report.findings).toContainEqual(expect.objectContaining({ id: 'tls', status: 'ok', setting: expect.stringContaining('sslmode=verify-full') }))
})

test('verify-full, a name the certificate does not hold: refused, the gateway fails closed (503, nothing forwarded)', async () => {
  const gw = await startTestGateway({ store: { kind: 'postgres', url: `postgres://postgres@127.0.0.1:${port}/postgres`, migrate: true, tls: tls() }, routes: [ledger()] })
  try {
    const before = up.seen.length
    expectProblem(await write(gw, 'acct-wrong', 1, 'wrong-1'), { status: 503, type: 'store-unavailable' })
    expect(up.seen.length).toBe(before)
    expect(gw.logs.join('')).toMatch(/Hostname\/IP does not match|altnames/)
  } finally {
    await gw.close()
  }
})
