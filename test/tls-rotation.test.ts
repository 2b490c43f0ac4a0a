// Contract §5b, rotation: on SIGHUP the listener's files are read again and served to new
// connections, with no request failing meanwhile; a file that cannot be read refuses the reload
// (logged, fencegate_config_reloads_total{result="refused"}) and the running certificate stays.
// With --workers, every worker rotates and the primary's gauge follows.
import https from 'node:https'
import { copyFileSync, renameSync, rmSync } from 'node:fs'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, test } from 'vitest'
import { makePki, type Pki, type Pem } from './helpers/certs.js'
import { freePort, gatewayConfig, spawnGateway, tempDir, writeFileSync, type ChildGateway } from './helpers/gateway.js'
import { httpsSend, type TlsClient } from './helpers/https.js'
import { metric, metrics } from './helpers/http.js'
import { startUpstream, type Upstream } from './helpers/upstream.js'
import { sleep, until } from './helpers/wait.js'

let pki: Pki
let up: Upstream
let trust: TlsClient
const DAY = 86_400

beforeAll(async () => {
  pki = makePki()
  trust = { ca: pki.ca.certPem }
  up = await startUpstream()
})
afterAll(async () => { await up?.close() })

/** Puts a certificate and key at the live paths the way a mounted secret changes: each file replaced whole (rename). */
function install(pem: Pem, live: { cert: string; key: string }): void {
  for (const [from, to] of [[pem.cert, live.cert], [pem.key, live.key]]) {
    copyFileSync(from, `${to}.tmp`)
    renameSync(`${to}.tmp`, to)
  }
}

interface Started { gw: ChildGateway; url: string; live: { cert: string; key: string }; dir: string }

/** A gateway child process (the CLI) serving HTTPS with `pem`, installed at its live paths. */
async function start(pem: Pem, args: string[] = []): Promise<Started> {
  const dir = tempDir('fg-tls-rot-')
  const live = { cert: join(dir, 'tls.crt'), key: join(dir, 'tls.key') }
  install(pem, live)
  const port = await freePort()
  const admin = await freePort()
  const file = join(dir, 'fencegate.yaml')
  writeFileSync(file, gatewayConfig({
    listen: `127.0.0.1:${port}`,
    admin: { listen: `127.0.0.1:${admin}` },
    store: { kind: 'sqlite', path: join(dir, 'fg.db') },
    tls: { cert: live.cert, key: live.key },
    routes: [{ name: 'plain', path: '/plain/*', upstream: up.url }],
  }))
  const gw = await spawnGateway(file, port, admin, join(dir, 'gw.log'), args)
  return { gw, url: `https://127.0.0.1:${port}`, live, dir }
}

/**
 * Requests in a loop, each on a new connection, from `clients` clients, plus one keep-alive
 * client whose connection stays open across the rotation; every failure and every serial seen.
 */
function load(url: string, clients = 4) {
  let running = true
  const failures: string[] = []
  const serials = new Set<string>()
  let count = 0
  const agent = new https.Agent({ keepAlive: true, maxSockets: 1, ca: trust.ca })
  const loop = async (keepAlive: boolean) => {
    while (running) {
      try {
        const r = await httpsSend(`${url}/plain/load`, trust, keepAlive ? { agent } : {})
        if (r.status !== 201) failures.push(`status ${r.status}`)
        serials.add(r.serial)
        count++
      } catch (e) {
        failures.push((e as Error).message)
      }
    }
  }
  const loops = [...Array.from({ length: clients }, () => loop(false)), loop(true)]
  return {
    failures,
    serials,
    count: () => count,
    stop: async () => { running = false; await Promise.all(loops); agent.destroy() },
  }
}

const serialOf = async (url: string) => (await httpsSend(`${url}/plain/probe`, trust)).serial

describe('SIGHUP, one process', () => {
  let s: Started
  let first: Pem
  beforeAll(async () => {
    first = pki.issue('first', { days: 20 })
    s = await start(first)
  })
  afterAll(async () => { await s?.gw.stop() })

  test('under load, the files replaced and SIGHUP sent: no request fails, new connections see the new serial', async () => {
    expect(await serialOf(s.url)).toBe(first.serial)
    const traffic = load(s.url)
    await until(() => traffic.count() > 20, { timeoutMs: 5000 })
    const second = pki.issue('second', { days: 60 })
    install(second, s.live)
    s.gw.child.kill('SIGHUP')
    await until(async () => (await serialOf(s.url)) === second.serial, { timeoutMs: 5000, message: () => s.gw.log() })
    const at = traffic.count()
    await until(() => traffic.count() > at + 20, { timeoutMs: 5000 })
    await traffic.stop()
    expect(traffic.failures).toEqual([])
    expect([...traffic.serials].sort()).toEqual([first.serial, second.serial].sort())
    const m = await metrics(s.gw.adminUrl)
    expect(metric(m, 'fencegate_config_reloads_total', { result: 'applied' })).toBe(1)
    expect(metric(m, 'fencegate_config_reloads_total', { result: 'refused' })).toBe(0)
    const left = metric(m, 'fencegate_tls_certificate_expiry_seconds', { listener: 'proxy' })
    expect(left).toBeGreaterThan(59 * DAY)
    expect(left).toBeLessThanOrEqual(60 * DAY)
  })

  test('a reload with an unreadable key is refused, logged and counted; the running certificate is still served', async () => {
    const served = await serialOf(s.url)
    const before = await metrics(s.gw.adminUrl)
    const third = pki.issue('third')
    install(third, s.live)
    rmSync(s.live.key)
    s.gw.child.kill('SIGHUP')
    await until(async () => metric(await metrics(s.gw.adminUrl), 'fencegate_config_reloads_total', { result: 'refused' }) === 1, { timeoutMs: 5000, message: () => s.gw.log() })
    expect(s.gw.log()).toMatch(/config reload refused/)
    expect(s.gw.log()).toContain(`tls.key: cannot read ${s.live.key}: no such file`)
    // the certificate read before stays, for new connections too
    for (let i = 0; i < 3; i++) expect(await serialOf(s.url)).toBe(served)
    const after = await metrics(s.gw.adminUrl)
    expect(metric(after, 'fencegate_tls_certificate_expiry_seconds', { listener: 'proxy' })).toBeGreaterThan(59 * DAY)
    expect(metric(after, 'fencegate_config_reloads_total', { result: 'applied' })).toBe(metric(before, 'fencegate_config_reloads_total', { result: 'applied' }))
    // the key back: the next reload applies the new pair
    install(third, s.live)
    s.gw.child.kill('SIGHUP')
    await until(async () => (await serialOf(s.url)) === third.serial, { timeoutMs: 5000, message: () => s.gw.log() })
  })

  test('a reload with a key that does not match the certificate is refused', async () => {
    const served = await serialOf(s.url)
    const other = pki.issue('fourth')
    copyFileSync(other.cert, s.live.cert) // the certificate only: its key not yet there
    s.gw.child.kill('SIGHUP')
    await until(async () => metric(await metrics(s.gw.adminUrl), 'fencegate_config_reloads_total', { result: 'refused' }) === 2, { timeoutMs: 5000, message: () => s.gw.log() })
    expect(s.gw.log()).toContain('tls.key: does not match tls.cert')
    expect(await serialOf(s.url)).toBe(served)
  })
})

describe('SIGHUP with --workers 2', () => {
  let s: Started
  let first: Pem
  beforeAll(async () => {
    first = pki.issue('w-first', { days: 20 })
    s = await start(first, ['--workers', '2'])
  }, 30_000)
  afterAll(async () => { await s?.gw.stop() })

  test('every worker serves HTTPS and rotates; the primary\'s /metrics has one proxy expiry series, following the reload', async () => {
    for (let i = 0; i < 4; i++) expect(await serialOf(s.url)).toBe(first.serial)
    let m = await metrics(s.gw.adminUrl)
    expect(m.match(/^fencegate_tls_certificate_expiry_seconds\{/gm)).toHaveLength(1)
    expect(metric(m, 'fencegate_tls_certificate_expiry_seconds', { listener: 'proxy' })).toBeLessThanOrEqual(20 * DAY)
    const traffic = load(s.url)
    await until(() => traffic.count() > 20, { timeoutMs: 5000 })
    const second = pki.issue('w-second', { days: 60 })
    install(second, s.live)
    s.gw.child.kill('SIGHUP')
    // both workers: several new connections in a row, each with the new certificate
    await until(async () => {
      const seen = await Promise.all(Array.from({ length: 6 }, () => serialOf(s.url)))
      return seen.every((x) => x === second.serial)
    }, { timeoutMs: 8000, message: () => s.gw.log() })
    await sleep(200)
    await traffic.stop()
    expect(traffic.failures).toEqual([])
    m = await metrics(s.gw.adminUrl)
    expect(m.match(/^fencegate_tls_certificate_expiry_seconds\{/gm)).toHaveLength(1)
    expect(metric(m, 'fencegate_tls_certificate_expiry_seconds', { listener: 'proxy' })).toBeGreaterThan(59 * DAY)
  }, 30_000)
})
