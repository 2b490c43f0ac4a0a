// Issue 15 §2, contract §2: SIGHUP reloads the config file without dropping a request in flight
// (each finishes under the config it started with, none becomes an unknown outcome); a file
// that does not validate, or changes what needs a restart, is refused, logged and counted, and
// the running config kept. With --workers, the primary forwards the reload. Real processes.
import { rmSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, test } from 'vitest'
import { startUpstream, type Upstream } from './helpers/upstream.js'
import { freePort, ledgerConfig, spawnGateway, tempDir, type ChildGateway } from './helpers/gateway.js'
import { runCli } from './helpers/run.js'
import { metric, metrics, post } from './helpers/http.js'
import { until } from './helpers/wait.js'

const dir = tempDir('fg-reload-')
let a: Upstream
let b: Upstream
const children: ChildGateway[] = []

beforeAll(async () => { a = await startUpstream(); b = await startUpstream() })
afterAll(async () => {
  for (const c of children) if (c.child.exitCode === null) await c.stop('SIGKILL')
  await a?.close()
  await b?.close()
  rmSync(dir, { recursive: true, force: true })
})

/** Waits (up to 10 s) until the gateway's log contains `text`. */
const logged = (gw: ChildGateway, text: string) =>
  until(() => gw.log().includes(text), { timeoutMs: 10_000, message: () => `${JSON.stringify(text)} in the gateway's log: ${gw.log()}` })

const charge = (gw: ChildGateway, i: number, path = 'slow?ms=1500') =>
  post(`${gw.url}/ledger/r${i}/${path}`, { amount: i }, { 'fencing-token': '1', 'idempotency-key': `key-${i}` })

describe('SIGHUP', () => {
  test('20 requests in flight finish under the old config, none unknown; new requests follow the new one; bad files are refused', async () => {
    const port = await freePort()
    const admin = await freePort()
    const file = join(dir, 'single.yaml')
    const store = { kind: 'sqlite', path: './single.db' } as const
    const configFor = (upstream: string, timeout?: string) => ledgerConfig({ port, admin, store, upstream, timeout })
    writeFileSync(file, configFor(a.url))
    const gw = await spawnGateway(file, port, admin, join(dir, 'single.log'))
    children.push(gw)

    // 20 requests held by upstream A for 1.5 s each
    const inFlight = Array.from({ length: 20 }, (_, i) => charge(gw, i))
    await until(() => a.count('/ledger/') === 20, { timeoutMs: 10_000, message: '20 requests held at upstream A' })

    // the route now points at upstream B
    writeFileSync(file, configFor(b.url))
    gw.child.kill('SIGHUP')
    await logged(gw, '"msg":"config reloaded"')
    expect(gw.child.exitCode).toBe(null)
    const fresh = await charge(gw, 100, 'apply')
    expect(fresh.status).toBe(201)
    expect(b.count('/ledger/r100/')).toBe(1)
    expect(a.count('/ledger/r100/')).toBe(0)

    // every request admitted before the reload completes, from upstream A
    const answers = await Promise.all(inFlight)
    expect(answers.map((r) => r.status)).toEqual(Array(20).fill(200))
    expect(a.count('/ledger/')).toBe(20)
    // and its response was stored: a retry is replayed, not sent to either upstream
    const retry = await charge(gw, 7)
    expect(retry.status).toBe(200)
    expect(retry.headers['idempotent-replayed']).toBe('true')
    expect(a.count('/ledger/') + b.count('/ledger/')).toBe(21)

    let m = await metrics(gw.adminUrl)
    for (const reason of ['timeout', 'reset', 'client_abort', 'crash']) expect(metric(m, 'fencegate_unknown_outcomes_total', { route: 'ledger', reason })).toBe(0)
    expect(metric(m, 'fencegate_idempotency_total', { route: 'ledger', result: 'stored' })).toBe(21)
    expect(metric(m, 'fencegate_config_reloads_total', { result: 'applied' })).toBe(1)
    expect(metric(m, 'fencegate_config_reloads_total', { result: 'refused' })).toBe(0)

    // a file that does not validate: refused, logged, counted; the running config stays
    writeFileSync(file, configFor(b.url, 'soon'))
    gw.child.kill('SIGHUP')
    await logged(gw, 'config reload refused: the file does not validate')
    expect(gw.log()).toContain('routes[0].upstream.timeout: \\"soon\\" is not a duration')
    // a file that changes what needs a restart: refused, naming it
    writeFileSync(file, ledgerConfig({ port: await freePort(), admin, store: { kind: 'sqlite', path: './other.db' }, upstream: a.url }))
    gw.child.kill('SIGHUP')
    await logged(gw, 'config reload refused: it changes listen, store.path')
    m = await metrics(gw.adminUrl)
    expect(metric(m, 'fencegate_config_reloads_total', { result: 'refused' })).toBe(2)
    expect(metric(m, 'fencegate_config_reloads_total', { result: 'applied' })).toBe(1)
    // still serving, still with upstream B
    expect((await charge(gw, 101, 'apply')).status).toBe(201)
    expect(b.count('/ledger/r101/')).toBe(1)

    expect(await gw.stop()).toBe(0)
    // the attempt log agrees: no unknown outcome on the route
    writeFileSync(join(dir, 'single-audit.yaml'), configFor(b.url))
    const report = JSON.parse((await runCli(['audit', '--config', join(dir, 'single-audit.yaml'), '--json'])).stdout)
    expect(report.routes[0]).toMatchObject({ route: 'ledger', attempts: 23, unknownOutcomes: { resolved: 0, unresolved: 0 } })
  }, 40_000)

  test('--workers 2: the primary checks the file and forwards the reload to every worker', async () => {
    const port = await freePort()
    const admin = await freePort()
    const file = join(dir, 'workers.yaml')
    const store = { kind: 'sqlite', path: './workers.db' } as const
    writeFileSync(file, ledgerConfig({ port, admin, store, upstream: a.url }))
    const gw = await spawnGateway(file, port, admin, join(dir, 'workers.log'), ['--workers', '2'])
    children.push(gw)
    const before = a.count('/ledger/')
    const bBefore = b.count('/ledger/')
    writeFileSync(file, ledgerConfig({ port, admin, store, upstream: b.url }))
    gw.child.kill('SIGHUP')
    // the primary and both workers say so
    await until(() => gw.log().split('"msg":"config reloaded').length - 1 === 3, { timeoutMs: 10_000, message: () => `three "config reloaded" lines in the gateway's log: ${gw.log()}` })
    // every worker now sends to B (fresh connections are spread over the workers)
    for (let i = 200; i < 210; i++) expect((await charge(gw, i, 'apply')).status).toBe(201)
    expect(b.count('/ledger/') - bBefore).toBe(10)
    expect(a.count('/ledger/')).toBe(before)
    // a bad file: refused once, by the primary, and not forwarded
    writeFileSync(file, 'routes: [\n')
    gw.child.kill('SIGHUP')
    await logged(gw, 'config reload refused')
    expect(metric(await metrics(gw.adminUrl), 'fencegate_config_reloads_total', { result: 'refused' })).toBe(1)
    expect(gw.log().split('config reload refused').length - 1).toBe(1)
    expect((await charge(gw, 300, 'apply')).status).toBe(201)
    expect(await gw.stop()).toBe(0)
  }, 40_000)
})
