// The attempt log and the exactly-once report (contract §8), and operator resolution of an
// unknown outcome (issue 5 §2), through a real gateway, real sockets, real stores, and the
// real CLI (dist/src/cli.js, built by `npm test`'s pretest).
import { writeFileSync, rmSync } from 'node:fs'
import { hostname } from 'node:os'
import { join } from 'node:path'
import { randomUUID } from 'node:crypto'
import { afterEach, describe, expect, test } from 'vitest'
import Database from 'better-sqlite3'
import pg from 'pg'
import { gatewayConfig, startTestGateway, tempDir, type GatewaySpec, type RouteSpec, type StoreInput, type TestGateway } from '../helpers/gateway.js'
import { runCli } from '../helpers/run.js'
import { startUpstream, type Upstream } from '../helpers/upstream.js'
import { expectProblem, metric, metrics, post, send } from '../helpers/http.js'
import { until } from '../helpers/wait.js'

const PG_URL = process.env.PG_URL ?? 'postgres://postgres@127.0.0.1:5432/test'
const TOKEN = 'audit-secret'
const auth = { authorization: `Bearer ${TOKEN}` }
const WRITE_TOKEN = 'audit-write-secret'
const writeAuth = { authorization: `Bearer ${WRITE_TOKEN}` }

const cleanups: (() => Promise<void> | void)[] = []
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c()
})

/**
 * Writes the config to a file (so the CLI reads the same one) and starts a gateway on it, with
 * the admin tokens. `routes` gets the upstream's URL; @DIR@ in `store` is the test's folder.
 */
async function setup(store: StoreInput, routes: (upstream: string) => RouteSpec[], more: Partial<GatewaySpec> = {}): Promise<{ gw: TestGateway; up: Upstream; file: string; dir: string }> {
  const up = await startUpstream()
  cleanups.push(() => up.close())
  const dir = tempDir('fg-audit-')
  cleanups.push(() => rmSync(dir, { recursive: true, force: true }))
  const text = gatewayConfig({ admin: { token: TOKEN, writeToken: WRITE_TOKEN }, store, ...more, routes: routes(up.url) }).replaceAll('@DIR@', dir)
  const file = join(dir, 'fencegate.yaml')
  writeFileSync(file, text)
  const gw = await startTestGateway(text)
  cleanups.push(() => gw.close())
  return { gw, up, file, dir }
}

const SQLITE: StoreInput = { kind: 'sqlite', path: '@DIR@/fg.db' }
const paymentsRoute = (upstream: string): RouteSpec => ({
  name: 'payments', path: '/accounts/:account/*', methods: ['POST'], upstream,
  fencing: { resource: 'account:{param.account}' }, idempotency: { required: true },
})

const cli = (...args: string[]) => runCli(args, { timeout: 20_000 })

/**
 * Polls the report (`get`: the CLI's or the admin API's JSON) until the attempts of its routes
 * are `attempts`: entries are written asynchronously, after the response.
 */
const reportWith = (get: () => any, attempts: number[]) => until(async () => {
  const r = await get()
  expect(r.routes.map((x: { attempts: number }) => x.attempts)).toEqual(attempts)
  return r
}, { intervalMs: 50, message: `the report to count ${attempts.join(', ')} attempts` })
/** GET /audit of `gw`, with the read token */
const adminAudit = (gw: TestGateway) => async () => (await send(`${gw.adminUrl}/audit`, { headers: auth })).json()

const auditJson = async (file: string, ...args: string[]) => {
  const r = await runCli(['audit', '--config', file, '--json', ...args], { timeout: 20_000 })
  if (r.status !== 0) throw new Error(`fencegate audit exited ${r.status}: ${r.stderr}`)
  return JSON.parse(r.stdout)
}

/** The seed's timeline: worker A (33) charges, worker B (34) retries the same job, A (33) again. */
async function seedTimeline(gw: TestGateway) {
  const body = { amount: 1000, currency: 'eur' }
  const a1 = await post(`${gw.url}/accounts/acct-1/charges`, body, { 'fencing-token': '33', 'idempotency-key': 'job-7' })
  const b = await post(`${gw.url}/accounts/acct-1/charges`, body, { 'fencing-token': '34', 'idempotency-key': 'job-7' })
  const a2 = await post(`${gw.url}/accounts/acct-1/charges`, body, { 'fencing-token': '33', 'idempotency-key': 'job-7' })
  return [a1.status, b.status, b.headers['idempotent-replayed'], a2.status]
}

describe('attempt log (sqlite store)', () => {
  test('a forwarded, a replayed and a stale request are each recorded with what the gateway decided, never the raw key', async () => {
    const { gw, dir } = await setup(SQLITE, (up) => [paymentsRoute(up)])
    const sentAt = performance.now()
    expect(await seedTimeline(gw)).toEqual([201, 201, 'true', 412])
    const timelineMs = performance.now() - sentAt

    const db = new Database(join(dir, 'fg.db'), { readonly: true })
    cleanups.push(() => { db.close() })
    const rows = await until(() => {
      const all = db.prepare('SELECT * FROM fg_audit_v1 ORDER BY rowid').all() as Record<string, unknown>[]
      return all.length >= 3 && all
    }, { intervalMs: 50, message: 'three rows in fg_audit_v1' })
    expect(rows.map((r) => [r.outcome, r.token, r.status, r.upstream_status])).toEqual([
      ['forwarded', '33', 201, 201],
      ['replayed', '34', 201, null],
      ['stale', '33', 412, null],
    ])
    for (const r of rows) {
      expect(r).toMatchObject({ kind: 'attempt', route: 'payments', method: 'POST', resource: 'account:acct-1', replica: `${hostname()}:${process.pid}` })
      expect(r.time as number).toBeGreaterThan(Date.now() - 60_000)
      // measured in the gateway, µs-rounded: some time passed, and no more than the client waited
      expect(r.duration_ms as number).toBeGreaterThan(0)
      expect(r.duration_ms as number).toBeLessThan(timelineMs)
      expect(r.trace_id).toBeNull() // tracing is off
    }
    // the key is there only as its hash, on every attempt that carried it: the stale one too
    // (fencing refused it in the same store call as the claim, which left the key untouched)
    expect(rows[0].key_hash).toMatch(/^[0-9a-f]{64}$/)
    expect(rows[1].key_hash).toBe(rows[0].key_hash)
    expect(rows[2].key_hash).toBe(rows[0].key_hash)
    expect(rows[2].result).toBeNull()
    expect(rows[0].fingerprint).toMatch(/^[0-9a-f]{64}$/)
    expect(rows[0].result).toBe('stored')
    expect(rows[1].result).toBe('replayed')
    expect(JSON.stringify(rows)).not.toContain('job-7')
  })
})

describe('a route with neither fencing nor idempotency (sqlite store)', () => {
  test('writes nothing to the attempt log; attemptLog: true puts its requests there', async () => {
    const { gw, dir } = await setup(SQLITE, (up) => [
      paymentsRoute(up),
      { name: 'plain', path: '/plain/*', upstream: up },
      { name: 'logged', path: '/logged/*', upstream: up, attemptLog: true },
    ])
    for (let i = 0; i < 5; i++) expect((await post(`${gw.url}/plain/${i}`, { i })).status).toBe(201)
    expect((await post(`${gw.url}/logged/1`, {})).status).toBe(201)
    // a fenced request after them: once its entry is written, any earlier one would be too
    expect((await post(`${gw.url}/accounts/acct-1/charges`, { amount: 1 }, { 'fencing-token': '1', 'idempotency-key': 'plain-1' })).status).toBe(201)
    const db = new Database(join(dir, 'fg.db'), { readonly: true })
    cleanups.push(() => { db.close() })
    const rows = await until(() => {
      const all = db.prepare('SELECT route, outcome FROM fg_audit_v1 ORDER BY rowid').all() as { route: string }[]
      return all.some((r) => r.route === 'payments') && all
    }, { intervalMs: 50, message: 'the fenced request in fg_audit_v1' })
    expect(rows).toEqual([{ route: 'logged', outcome: 'forwarded' }, { route: 'payments', outcome: 'forwarded' }])
  })
})

describe('fencegate audit and GET /audit', () => {
  test('the seed timeline (33, 34 replayed, 33 stale) reads forwarded 1, replayed 1, stale 1, from the CLI and the admin API alike', async () => {
    const { gw, file } = await setup(SQLITE, (up) => [paymentsRoute(up), { name: 'reads', path: '/accounts/:account/*', upstream: up, attemptLog: true }])
    expect(await seedTimeline(gw)).toEqual([201, 201, 'true', 412])
    expect((await send(`${gw.url}/accounts/acct-1/charges`)).status).toBe(201) // a read, on the unfenced route

    const report = await reportWith(() => auditJson(file), [3, 1])
    expect(Object.keys(report)).toEqual(['since', 'until', 'routes'])
    expect(Date.parse(report.until) - Date.parse(report.since)).toBe(24 * 3_600_000) // --since defaults to 24h
    expect(report.until).toMatch(/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z$/)
    const [payments, reads] = report.routes
    expect(Object.keys(payments)).toEqual(['route', 'attempts', 'keys', 'forwarded', 'replayed', 'stale', 'tokenMissing',
      'inFlightConflicts', 'keyReused', 'released', 'unknownOutcomes', 'duplicateForwards', 'overtaken', 'claim'])
    const { claim, ...counts } = payments
    expect(counts).toEqual({
      route: 'payments', attempts: 3, keys: 1, forwarded: 1, replayed: 1, stale: 1, tokenMissing: 0,
      inFlightConflicts: 0, keyReused: 0, released: 0, unknownOutcomes: { resolved: 0, unresolved: 0 },
      duplicateForwards: 0, overtaken: 0,
    })
    expect(claim.guarantees.length).toBeGreaterThan(0)
    expect(claim.assumptions.length).toBeGreaterThan(0)
    expect(claim.notGuaranteed.length).toBeGreaterThan(0)
    expect(claim.guarantees.join(' ')).toMatch(/At most once per key/)
    expect(reads).toMatchObject({ route: 'reads', attempts: 1, forwarded: 1, keys: 0 })
    expect(reads.claim.notGuaranteed[0]).toMatch(/Neither fencing nor idempotency/)

    // --route and --since narrow it
    const only = await auditJson(file, '--route', 'payments', '--since', '1h')
    expect(only.routes.map((r: { route: string }) => r.route)).toEqual(['payments'])
    expect(Date.parse(only.until) - Date.parse(only.since)).toBe(3_600_000)
    expect(only.routes[0].forwarded).toBe(1)
    const future = await auditJson(file, '--since', new Date(Date.now() + 60_000).toISOString())
    expect(future.routes[0].attempts).toBe(0)

    // the admin API answers with the same JSON
    const r = await send(`${gw.adminUrl}/audit?since=1h&route=payments`, { headers: auth })
    expect(r.status).toBe(200)
    expect(r.headers['content-type']).toMatch(/^application\/json/)
    const viaAdmin = r.json()
    expect({ ...viaAdmin, since: 0, until: 0 }).toEqual({ ...only, since: 0, until: 0 })

    // people get a table per route
    const human = await cli('audit', '--config', file, '--route', 'payments')
    expect(human.status).toBe(0)
    expect(human.stdout).toMatch(/^route payments$/m)
    expect(human.stdout).toMatch(/^ {2}forwarded +1 /m)
    expect(human.stdout).toMatch(/^ {2}replayed +1 /m)
    expect(human.stdout).toMatch(/^ {2}stale +1 /m)
    expect(human.stdout).toMatch(/^ {2}guarantees:$/m)
    expect(human.stdout).toMatch(/^ {2}not guaranteed:$/m)

    // mistakes are told, with exit 2
    const bad = await cli('audit', '--config', file, '--route', 'nope')
    expect(bad.status).toBe(2)
    expect(bad.stderr).toMatch(/no route named "nope"/)
    expect((await cli('audit', '--config', file, '--since', 'yesterday')).status).toBe(2)
  })

  test('GET /audit needs the admin token (401 with WWW-Authenticate), and says what is wrong with a bad query', async () => {
    const { gw } = await setup({ kind: 'memory' }, (up) => [paymentsRoute(up)])
    const r = await send(`${gw.adminUrl}/audit`)
    expectProblem(r, { status: 401, type: 'unauthorized', headers: { 'www-authenticate': /^Bearer/ } })
    const wrong = await send(`${gw.adminUrl}/audit`, { headers: { authorization: 'Bearer nope' } })
    expect(wrong.status).toBe(401)
    // the memory store's log lives in the process: the admin API is how to read it
    expect(await seedTimeline(gw)).toEqual([201, 201, 'true', 412])
    const ok = await reportWith(adminAudit(gw), [3])
    expect(ok.routes[0]).toMatchObject({ forwarded: 1, replayed: 1, stale: 1 })
    const badSince = await send(`${gw.adminUrl}/audit?since=soon`, { headers: auth })
    expectProblem(badSince, { status: 400, type: 'bad-request' })
    expect((await send(`${gw.adminUrl}/audit?route=nope`, { headers: auth })).status).toBe(400)
  })
})

describe('overtaken writes in the report', () => {
  test('an older-token write that ends after a newer one was sent is counted as overtaken', async () => {
    const { gw, up } = await setup({ kind: 'memory' }, (up) => [
      { name: 'ledger', path: '/ledger/:account/*', upstream: { url: up, timeout: '5s' }, fencing: { resource: 'account:{param.account}' } },
    ])
    const slow = post(`${gw.url}/ledger/a/apply?ms=500`, { n: 1 }, { 'fencing-token': '5' })
    await until(() => up.applied.length >= 1, { message: 'token 5 to reach the upstream' })
    expect((await post(`${gw.url}/ledger/a/apply?ms=0`, { n: 2 }, { 'fencing-token': '6' })).status).toBe(201)
    expect((await slow).status).toBe(201)
    // the upstream applied 5 after 6: only the upstream's own check could have stopped that
    expect(up.applied.filter((x) => x.event === 'applied').map((x) => x.token)).toEqual(['6', '5'])
    const report = await reportWith(adminAudit(gw), [2])
    expect(report.routes[0]).toMatchObject({ attempts: 2, forwarded: 2, stale: 0, overtaken: 1 })
  })
})

describe('resolving an unknown outcome', () => {
  const hanging = (up: string): RouteSpec[] => [{ name: 'ledger', path: '/ledger/*', upstream: { url: up, timeout: '300ms' }, idempotency: { required: true } }]

  test('a key answering 409 outcome-unknown becomes retryable (failed) with the CLI, then settled (completed) with POST /resolve; the report counts both', async () => {
    const { gw, up, file } = await setup(SQLITE, hanging)
    const url = `${gw.url}/ledger/apply-then-hang`
    const key = { 'idempotency-key': '"pay-42"' }
    // the upstream applies the effect and never answers: the outcome is unknown
    expect((await post(url, { amount: 5 }, key)).status).toBe(504)
    expectProblem(await post(url, { amount: 5 }, key), { status: 409, type: 'outcome-unknown' })
    expect(up.count('/ledger/apply-then-hang')).toBe(1)

    let report = await reportWith(() => auditJson(file), [2])
    expect(report.routes[0].unknownOutcomes).toEqual({ resolved: 0, unresolved: 1 })

    // the operator checked the upstream and found nothing applied: failed
    const r = await cli('resolve', '--config', file, '--route', 'ledger', '--key', 'pay-42', '--as', 'failed', '--reason', 'upstream has no charge for this key')
    expect(r.stderr).toBe('')
    expect(r.status).toBe(0)
    expect(r.stdout).toMatch(/outcome was unknown \(timeout\); resolved as failed: released/)
    expect(r.stdout).not.toContain('pay-42')
    // the retry is forwarded again (and hangs again: a second unknown outcome)
    expect((await post(url, { amount: 5 }, key)).status).toBe(504)
    expect(up.count('/ledger/apply-then-hang')).toBe(2)
    report = await reportWith(() => auditJson(file), [3])
    expect(report.routes[0].unknownOutcomes).toEqual({ resolved: 1, unresolved: 1 })

    // this time the operator finds it applied: completed, over the admin API
    const noToken = await send(`${gw.adminUrl}/resolve`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ route: 'ledger', key: 'pay-42', as: 'completed' }) })
    expect(noToken.status).toBe(401)
    // the read token does not allow writes (403); the write token does
    const readToken = await send(`${gw.adminUrl}/resolve`, { method: 'POST', headers: { ...auth, 'content-type': 'application/json' }, body: JSON.stringify({ route: 'ledger', key: 'pay-42', as: 'completed' }) })
    expect(readToken.status).toBe(403)
    const done = await send(`${gw.adminUrl}/resolve`, { method: 'POST', headers: { ...writeAuth, 'content-type': 'application/json' }, body: JSON.stringify({ route: 'ledger', key: 'pay-42', as: 'completed', reason: 'ledger shows charge ch_42' }) })
    expect(done.status).toBe(200)
    expect(done.json()).toMatchObject({ route: 'ledger', resolution: 'completed', previousReason: 'timeout', keyHash: expect.stringMatching(/^[0-9a-f]{64}$/) })
    expectProblem(await post(url, { amount: 5 }, key), { status: 409, type: 'response-not-stored', members: { resolvedBy: 'operator' } })
    expect(up.count('/ledger/apply-then-hang')).toBe(2)
    report = await reportWith(() => auditJson(file), [4])
    expect(report.routes[0].unknownOutcomes).toEqual({ resolved: 2, unresolved: 0 })
    // who and why (issue 15 §1): in the report, JSON and text
    expect(report.operatorActions).toEqual([
      expect.objectContaining({ kind: 'resolve', route: 'ledger', resolution: 'failed', reason: 'upstream has no charge for this key', by: expect.stringMatching(/^cli:.+@/) }),
      expect.objectContaining({ kind: 'resolve', route: 'ledger', resolution: 'completed', reason: 'ledger shows charge ch_42', by: expect.stringMatching(/^admin-api:127\.0\.0\.1/) }),
    ])
    const text = await cli('audit', '--config', file)
    expect(text.stdout).toMatch(/operator actions\n.*resolved as failed  by cli:.*reason: upstream has no charge for this key/)

    // nothing left to resolve: said so, exit 1; a key never used: 404 on the admin API
    const again = await cli('resolve', '--config', file, '--route', 'ledger', '--key', 'pay-42', '--as', 'failed')
    expect(again.status).toBe(1)
    expect(again.stderr).toMatch(/Only an unknown outcome can be resolved/)
    const missing = await send(`${gw.adminUrl}/resolve`, { method: 'POST', headers: { ...writeAuth, 'content-type': 'application/json' }, body: JSON.stringify({ route: 'ledger', key: 'never', as: 'failed' }) })
    expectProblem(missing, { status: 404, type: 'record-not-found' })
    const badAs = await cli('resolve', '--config', file, '--route', 'ledger', '--key', 'pay-42', '--as', 'maybe')
    expect(badAs.status).toBe(2)
  })
})

describe('a full audit queue', () => {
  test('drops entries and counts them, and every request is still answered normally', async () => {
    const schema = `fgaudit_${randomUUID().replaceAll('-', '').slice(0, 12)}`
    const admin = new pg.Client({ connectionString: PG_URL })
    await admin.connect()
    cleanups.push(async () => { await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`); await admin.end() })
    const { gw } = await setup({ kind: 'postgres', url: PG_URL, schema }, (up) => [paymentsRoute(up)], { audit: { queueSize: 3 } })
    // hold the attempt log table: appends wait, and the queue behind them fills up
    await admin.query('BEGIN')
    await admin.query(`LOCK TABLE "${schema}".fg_audit_v1 IN ACCESS EXCLUSIVE MODE`)
    const statuses: number[] = []
    for (let i = 0; i < 12; i++) {
      const r = await post(`${gw.url}/accounts/acct-${i}/charges`, { amount: i }, { 'fencing-token': '1', 'idempotency-key': `k-${i}` })
      statuses.push(r.status)
    }
    expect(statuses).toEqual(Array(12).fill(201))
    const dropped = metric(await metrics(gw.adminUrl, TOKEN), 'fencegate_audit_dropped_total', { reason: 'queue_full' })
    expect(dropped).toBeGreaterThanOrEqual(12 - 1 - 3 - 1) // one batch waiting on the lock, three queued
    await admin.query('COMMIT')
    // what was not dropped is written once the table is free again
    const report = await reportWith(adminAudit(gw), [12 - dropped])
    expect(report.routes[0].attempts).toBe(12 - dropped)
    expect(report.routes[0].forwarded).toBe(12 - dropped)
  })
})
