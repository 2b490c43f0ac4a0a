// kill -9 under load: the gateway runs as a CLI child process (dist/, `npm run build` first) on a
// durable store; workers write through it while it is SIGKILLed three times, each time while
// the ledger holds an applied write unanswered, and restarted on the same store. The history
// checker (./history.ts) must hold across the restarts: no stale write applied, no key applied
// twice (unknownOutcome: reject), replays identical, one effect per 2xx. Requests in flight at
// a kill become unknown outcomes (reason crash) once their 1 s lease ends, and are not applied
// again. Reproduce a failure with the seed it prints: HOSTILE_SEED=<seed> npx vitest run test/hostile/kill-restart.test.ts
// (HOSTILE_DEBUG=1 also prints restart times and the attempts of every key cut off by a kill).
import { randomUUID } from 'node:crypto'
import { join } from 'node:path'
import { rmSync, writeFileSync } from 'node:fs'
import { afterAll, describe, test } from 'vitest'
import { Agent } from 'undici'
import pg from 'pg'
import { tempDir, freePort, spawnGateway, gatewayConfig, type ChildGateway, type StoreInput } from '../helpers/gateway.js'
import { metrics, metric, post } from '../helpers/http.js'
import { sleep, until } from '../helpers/wait.js'
import { Rng, Leases, hostileSeed, startLedger, runWorkload, checkHistory, formatReport, type FaultSpec } from './history.js'

const PG_URL = process.env.PG_URL ?? 'postgres://postgres@127.0.0.1:5432/test'
const run = randomUUID().replaceAll('-', '').slice(0, 10)
const seed = hostileSeed()
const root = new Rng(seed)
const KILLS = 3

// The ledger applies every write as soon as it has read it (no late applies: a write the killed
// process sent lands within milliseconds, long before the next process is up). `slow` holds the
// answer back after applying: what is in flight when the gateway is killed.
const FAULTS: FaultSpec[] = [
  { name: 'none', weight: 58 },
  { name: 'slow', weight: 25, ms: [20, 150] },
  { name: 'slow', weight: 2, ms: [1200, 1400] }, // applied, then 504 after the 1 s upstream timeout
  { name: 'reset-after', weight: 4 },
  { name: 'reset-before', weight: 3 },
  { name: 'busy', weight: 5 },
  { name: 'fail', weight: 3 },
]

const config = (port: number, admin: number, ledger: string, store: StoreInput) => gatewayConfig({
  listen: `127.0.0.1:${port}`,
  admin: { listen: `127.0.0.1:${admin}` },
  store,
  routes: [{
    name: 'ledger', path: '/ledger/:res/*', upstream: { url: ledger, timeout: '1s' },
    fencing: { resource: '{param.res}', serialize: true },
    idempotency: { required: true, lease: '1s', unknownOutcome: 'reject' },
  }],
})

const dirs: string[] = []
const schema = `fgkill_${run}`
afterAll(async () => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true })
  const c = new pg.Client({ connectionString: PG_URL })
  await c.connect()
  await c.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`)
  await c.end()
})

const stores: { kind: string; i: number; store: StoreInput }[] = [
  { kind: 'sqlite', i: 0, store: { kind: 'sqlite', path: './fencegate.db' } },
  { kind: 'postgres', i: 1, store: { kind: 'postgres', url: PG_URL, schema, pool: 4 } },
]

// the two stores side by side: each is a child process, a ledger and mostly waiting
describe.concurrent('kill -9 under load, restart on the same store', () => {
  test.for(stores)('$kind: the history holds across three kills', { timeout: 90_000 }, async (s, { expect, onTestFailed }) => {
    onTestFailed(() => console.error(`HOSTILE_SEED=${seed} (store ${s.kind})`))
    const rng = root.fork(s.i)
    const dir = tempDir('fg-hostile-kill-'); dirs.push(dir)
    const ledger = await startLedger()
    const port = await freePort(), admin = await freePort()
    const file = join(dir, 'fencegate.yaml')
    writeFileSync(file, config(port, admin, ledger.url, s.store))
    const start = () => spawnGateway(file, port, admin, join(dir, 'gateway.log'))
    // a fresh connection per request: no keep-alive socket of a killed process is reused
    const agent = new Agent({ pipelining: 0, headersTimeout: 15_000, bodyTimeout: 15_000 })
    let g: ChildGateway = await start()
    try {
      let kills = 0
      let done = false
      const killer = (async () => {
        const killRng = rng.fork(1000)
        for (let k = 0; k < KILLS; k++) {
          await sleep(killRng.int(400, 900))
          // kill while a write is applied upstream and its answer not yet back (after 3 s, kill anyway)
          await until(() => ledger.holding > 0, { timeoutMs: 3000, intervalMs: 1 }).catch(() => {})
          await g.stop('SIGKILL')
          kills++
          await sleep(killRng.int(0, 200))
          const t0 = Date.now()
          g = await start()
          if (process.env.HOSTILE_DEBUG) console.log(`restart took ${Date.now() - t0} ms`)
        }
        await sleep(500)
        done = true
      })()
      const history = await runWorkload({
        url: `http://127.0.0.1:${port}`,
        routes: ['ledger'],
        resources: 6,
        workers: 6,
        ops: 100,
        until: () => done,
        rng,
        // leases outlast a restart, so a retry after it still holds the newest token and meets
        // its own record (in flight, then unknown) rather than a newer holder's 412
        leases: new Leases(5000),
        faults: FAULTS,
        pAbort: 0.03,
        pPause: 0.02,
        pLostAck: 0.08,
        pRelease: 0.95,
        pDouble: 0.05,
        maxAttempts: 12,
        keyDeadlineMs: 20_000,
        keyPrefix: `${s.kind}-${run}`,
        dispatcher: agent,
      }).finally(() => { done = true })
      await killer
      // the marks survived every kill: per resource, a write with the lowest token the ledger
      // applied (below its highest) is refused by the last process; the checker would see it applied
      const probes: { res: string; token: string; status: number; highest?: string }[] = []
      for (const res of new Set(ledger.effects.map((e) => e.resource))) {
        const tokens = ledger.effects.filter((e) => e.resource === res).map((e) => BigInt(e.token))
        const low = tokens.reduce((a, b) => (b < a ? b : a)), high = tokens.reduce((a, b) => (b > a ? b : a))
        if (low === high) continue
        const r = await post(`${g.url}/${res.replace(':', '/')}/charge`, { probe: true }, { 'fencing-token': String(low), 'idempotency-key': `probe-${res}-${run}` })
        probes.push({ res, token: String(low), status: r.status, highest: r.status === 412 ? r.json().highestToken : r.text })
      }
      await ledger.idle()
      const duplicateForwards = { ledger: metric(await metrics(g.adminUrl), 'fencegate_duplicate_forwards_total', { route: 'ledger' }) }
      const report = checkHistory(history, ledger.effects, { policies: { ledger: 'reject' }, duplicateForwards })
      console.log(formatReport(report, seed, `${s.kind}, ${kills} kills`, 0))
      if (process.env.HOSTILE_DEBUG) {
        const keys = new Set(history.filter((a) => a.status === 0 && !a.error?.startsWith('ECONNREFUSED') && a.abortAfter === undefined).map((a) => a.key))
        for (const k of keys) console.log(k, history.filter((a) => a.key === k).map((a) => `${a.start % 100000}:${a.status || a.error?.slice(0, 40)}:${a.problem ?? ''}:${a.reason ?? ''}`).join(' | '), ledger.effects.filter((e) => e.key === k).map((e) => `#${e.seq}@${e.at % 100000} ${e.fault}`).join(','))
      }
      expect(kills).toBe(KILLS)
      expect(probes.length).toBeGreaterThan(0)
      for (const p of probes) expect(p, `HOSTILE_SEED=${seed}`).toMatchObject({ status: 412 })
      expect(report.violations, formatReport(report, seed, s.kind)).toEqual([])
      // every kill hit a write applied upstream and not yet answered: such a key became an unknown
      // outcome (reason crash) once its lease ended, and its retry was refused, not applied again
      expect(report.stats.crash409, formatReport(report, seed, s.kind)).toBeGreaterThan(0)
      expect(report.stats.refusedConn).toBeGreaterThan(0)
      expect(await g.stop('SIGTERM')).toBe(0)
    } finally {
      if (g.child.exitCode === null) await g.stop('SIGKILL')
      await agent.close()
      await ledger.close()
    }
  })
})
