// The history checker (./history.ts) over a few hundred writes per store kind: workers with
// leases and rising claim generations write through a real in-process gateway to a ledger that
// applies whatever reaches it; workers pause past their leases, lose acks, abort mid-flight; the
// ledger answers slowly, applies late, resets. The checker then verifies the ledger's history.
// Reproduce a failure with the seed it prints: HOSTILE_SEED=<seed> npx vitest run test/hostile/history.test.ts
import { randomUUID } from 'node:crypto'
import { afterAll, describe, expect, onTestFailed, test } from 'vitest'
import { Agent } from 'undici'
import { startTestGateway, type RouteSpec, type StoreInput } from '../helpers/gateway.js'
import { metrics, metric } from '../helpers/http.js'
import { dropPostgresSchema, dropRedisPrefix, PG_URL, REDIS_URL } from '../helpers/stores.js'
import { Rng, Leases, hostileSeed, startLedger, runWorkload, checkHistory, formatReport, type Attempt, type Effect, type FaultSpec, type WorkloadOptions } from './history.js'

const run = randomUUID().replaceAll('-', '').slice(0, 10)
const seed = hostileSeed()
const root = new Rng(seed)

const UPSTREAM_TIMEOUT = 500
const LEASE = 1500 // idempotency lease: how long an unknown outcome holds its resource (serialize)

// What the ledger does to a request. `late` applies after the gateway's upstream timeout (504)
// but well within the idempotency lease, the window `fencing.serialize` holds the resource for.
const FAULTS: FaultSpec[] = [
  { name: 'none', weight: 66 },
  { name: 'slow', weight: 10, ms: [5, 60] },
  { name: 'slow', weight: 3, ms: [UPSTREAM_TIMEOUT + 150, UPSTREAM_TIMEOUT + 300] }, // applied, then 504
  { name: 'late', weight: 2, ms: [UPSTREAM_TIMEOUT + 100, UPSTREAM_TIMEOUT + 300] }, // 504, then applied
  { name: 'reset-after', weight: 5 },
  { name: 'reset-before', weight: 4 },
  { name: 'busy', weight: 6 },
  { name: 'fail', weight: 4 },
]

const workload = (url: string, rng: Rng, keyPrefix: string, dispatcher: Agent): WorkloadOptions => ({
  url,
  routes: ['reject', 'retry'],
  resources: 3,
  workers: 6,
  ops: 300,
  rng,
  leases: new Leases(150),
  faults: FAULTS,
  pAbort: 0.04,
  pPause: 0.08,
  pLostAck: 0.1,
  pDouble: 0.05,
  maxAttempts: 8,
  keyDeadlineMs: 8000,
  keyPrefix,
  dispatcher,
})

// `fencing.serialize: true`: without it the gateway promises no order of application, only of
// admission (docs/limits.md: the check-to-apply window), and the `late` fault does apply a
// stale write after a newer one; with it, one process holds newer tokens back until older ones
// ended, or their unknown outcome's lease did. Route `reject` and route `retry` differ only in
// `unknownOutcome`.
const route = (name: 'reject' | 'retry', ledger: string): RouteSpec => ({
  name, path: `/${name}/:res/*`, upstream: { url: ledger, timeout: `${UPSTREAM_TIMEOUT}ms` },
  fencing: { resource: `${name}:{param.res}`, serialize: true },
  idempotency: { required: true, lease: `${LEASE}ms`, unknownOutcome: name },
})

interface StoreKind { kind: string; store: StoreInput; drop?: () => Promise<void> }

const stores: StoreKind[] = [
  { kind: 'memory', store: { kind: 'memory' } },
  { kind: 'sqlite', store: { kind: 'sqlite', path: '@DIR@/fencegate.db' } },
  {
    kind: 'redis',
    store: { kind: 'redis', url: REDIS_URL, keyPrefix: `fghist-${run}` },
    drop: () => dropRedisPrefix(`fghist-${run}`),
  },
  {
    kind: 'postgres',
    store: { kind: 'postgres', url: PG_URL, schema: `fghist_${run}`, pool: 4 },
    drop: () => dropPostgresSchema(`fghist_${run}`),
  },
]

const agents: Agent[] = []
const newAgent = () => { const a = new Agent({ connections: 16, headersTimeout: 15_000, bodyTimeout: 15_000 }); agents.push(a); return a }
afterAll(async () => { await Promise.all(agents.map((a) => a.close())) })

describe('the history checker', () => {
  test('self-test: the same workload sent straight to the ledger, without the gateway, is reported', { timeout: 60_000 }, async () => {
    onTestFailed(() => console.error(`HOSTILE_SEED=${seed}`))
    const ledger = await startLedger()
    try {
      // no gateway: nothing answers 504 for the ledger, so no fault may outlast the client's patience
      const history = await runWorkload({ ...workload(ledger.url, root.fork(100), `self-${run}`, newAgent()), ops: 200 })
      await ledger.idle()
      const report = checkHistory(history, ledger.effects, { policies: { reject: 'reject', retry: 'reject' } })
      const kinds = new Set(report.violations.map((x) => x.kind))
      console.log(formatReport(report, seed, 'self-test (no gateway)', 3))
      expect(kinds.has('stale-write-applied'), formatReport(report, seed, 'self-test')).toBe(true)
      expect(kinds.has('key-applied-twice'), formatReport(report, seed, 'self-test')).toBe(true)
    } finally {
      await ledger.close()
    }
  })
})

describe('the history checker on a doctored history', () => {
  const eff = (seq: number, route: string, res: string, token: string, key: string, status = 201): Effect => ({
    seq, at: seq, route, resource: `${route}:${res}`, token, key, body: '{}', fault: 'none', status,
    response: Buffer.from(JSON.stringify({ effect: seq, resource: `${route}:${res}`, token, key, status })),
  })
  const att = (key: string, over: Partial<Attempt>): Attempt => ({
    worker: 0, route: 'reject', resource: 'reject:r1', token: '5', key, attempt: 1, fault: 'none', start: 0, end: 0,
    status: 201, replayed: false, body: Buffer.alloc(0), headers: { 'content-type': 'application/json' }, ...over,
  })
  const answer = (e: Effect, replayed = false): Partial<Attempt> => ({
    status: e.status, body: e.response, replayed, token: e.token, resource: e.resource, route: e.route,
    headers: { 'content-type': 'application/json', 'x-ledger-effect': String(e.seq), ...(replayed ? { 'idempotent-replayed': 'true' } : {}) },
  })

  test('each property can fail, and is reported under its own name', () => {
    const e = [
      eff(1, 'reject', 'r1', '5', 'k1'),
      eff(2, 'reject', 'r1', '4', 'k2'), // a stale write applied
      eff(3, 'reject', 'r1', '5', 'k1'), // k1 applied twice under reject
      eff(4, 'retry', 'r1', '7', 'k3'),
      eff(5, 'retry', 'r1', '7', 'k3'), // an extra application the metric does not count
      eff(6, 'reject', 'r2', '5', 'k5'), // applied although every attempt was refused
      eff(7, 'reject', 'r3', '5', 'k8'),
    ]
    const history = [
      att('k1', answer(e[0])),
      att('k1', { ...answer(e[0], true), attempt: 2, body: Buffer.from('{"effect":1,"tampered":true}') }),
      att('k2', answer(e[1])),
      att('k4', { ...answer(e[0]), headers: { 'x-ledger-effect': '99' } }),
      att('k5', { status: 412, problem: 'stale-fencing-token', highestToken: '6', resource: 'reject:r2' }),
      att('k6', { status: 412, problem: 'stale-fencing-token', highestToken: '5' }), // 412 for a token at the mark
      att('k7', { ...answer(e[0], true), key: 'k7', body: Buffer.from('{"never":"answered"}') }),
      att('k8', answer(e[6])),
      att('k8', { ...answer(e[6]), attempt: 2 }),
    ]
    const report = checkHistory(history, e, { policies: { reject: 'reject', retry: 'retry' }, duplicateForwards: { reject: 0, retry: 0 } })
    expect(new Set(report.violations.map((x) => x.kind))).toEqual(new Set([
      'stale-write-applied', 'key-applied-twice', 'duplicate-not-counted', 'replay-differs', 'replay-without-effect',
      'answered-twice', 'no-effect-for-answer', 'effect-answered-twice', 'refused-but-applied', 'bad-stale-refusal',
    ]))
    // and a history made right passes
    const ok = [eff(1, 'reject', 'r1', '5', 'k1'), eff(2, 'reject', 'r1', '6', 'k2')]
    const fine = checkHistory([att('k1', answer(ok[0])), att('k1', { ...answer(ok[0], true), attempt: 2 }), att('k2', answer(ok[1]))], ok, { policies: { reject: 'reject' }, duplicateForwards: { reject: 0 } })
    expect(fine.violations).toEqual([])
  })
})

// The four store kinds run side by side: the workload mostly waits (leases, holds, faults)
describe.concurrent('through the gateway', () => {
  afterAll(async () => { for (const s of stores) await s.drop?.() })

  test.for(stores.map((s, i) => ({ ...s, i })))('on $kind: no stale write applied, no key twice under reject, duplicates counted under retry, replays identical, one effect per 2xx', { timeout: 90_000 }, async (s, { expect, onTestFailed }) => {
    onTestFailed(() => console.error(`HOSTILE_SEED=${seed} (store ${s.kind})`))
    const ledger = await startLedger()
    const gw = await startTestGateway({ store: s.store, routes: [route('reject', ledger.url), route('retry', ledger.url)] })
    try {
      const history = await runWorkload(workload(gw.url, root.fork(s.i), `${s.kind}-${run}`, newAgent()))
      await ledger.idle()
      const text = await metrics(gw.adminUrl)
      const duplicateForwards = {
        reject: metric(text, 'fencegate_duplicate_forwards_total', { route: 'reject' }),
        retry: metric(text, 'fencegate_duplicate_forwards_total', { route: 'retry' }),
      }
      const report = checkHistory(history, ledger.effects, { policies: { reject: 'reject', retry: 'retry' }, duplicateForwards })
      console.log(formatReport(report, seed, `${s.kind}: duplicate forwards ${JSON.stringify(duplicateForwards)}`, 0))
      expect(report.violations, formatReport(report, seed, s.kind)).toEqual([])
      // the workload did reach the corners it is meant to test
      expect(report.stats.effects).toBeGreaterThan(100)
      expect(report.stats.replays).toBeGreaterThan(0)
      expect(report.stats.stale412).toBeGreaterThan(0)
      expect(report.stats.unknown409).toBeGreaterThan(0)
    } finally {
      await gw.close()
      await ledger.close()
    }
  })
})
