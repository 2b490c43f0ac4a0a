// `fencegate doctor` on a store a gateway found gone back in time (contract §3): the loss note
// says what was seen, by which gateway and when, and that it is not accepted; after
// `fencegate store accept-loss` the doctor tells when, by whom and why it was accepted.
// SQLite and Redis, each with a real gateway and the real CLI.
import { afterAll, beforeAll, describe, expect, test } from 'vitest'
import { join } from 'node:path'
import { hostname } from 'node:os'
import { writeFileSync } from 'node:fs'
import Database from 'better-sqlite3'
import { Redis } from 'ioredis'
import { startUpstream, type Upstream } from './helpers/upstream.js'
import { startTestGateway, gatewayConfig, type StoreInput, type TestGateway } from './helpers/gateway.js'
import { runCli } from './helpers/run.js'
import { expectProblem, post } from './helpers/http.js'

const REDIS_URL = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379'
let up: Upstream
let redis: Redis
beforeAll(async () => { up = await startUpstream(); redis = new Redis(REDIS_URL) })
afterAll(async () => { await up?.close(); redis?.disconnect() })

const cases: [string, (id: string) => StoreInput, (gw: TestGateway, id: string) => Promise<void>][] = [
  ['sqlite', () => ({ kind: 'sqlite', path: '@DIR@/fg.db' }), async (gw) => {
    const db = new Database(join(gw.dir, 'fg.db'))
    try { db.prepare("UPDATE fg_meta_v1 SET value = CAST(CAST(value AS INTEGER) - 1 AS TEXT) WHERE name = 'seq'").run() } finally { db.close() }
  }],
  ['redis', (id) => ({ kind: 'redis', url: REDIS_URL, keyPrefix: id }), async (_gw, id) => { await redis.decr(`{fg:${id}:seq}`) }],
]

describe('fencegate doctor and a loss a gateway detected', () => {
  for (const [kind, storeOf, rollBack] of cases) {
    test(`${kind}: noted (when, which gateway, not accepted), then accepted (when, by whom, why)`, async () => {
      const id = `fg_doc_loss_${process.pid}_${Date.now()}`
      const route = { name: 'ledger', path: '/ledger/:res', upstream: up.url, fencing: { resource: '{param.res}' } }
      const store = storeOf(id)
      const gw = await startTestGateway({ store, routes: [route] })
      const file = join(gw.dir, 'doctor.yaml')
      writeFileSync(file, gatewayConfig({ store: kind === 'sqlite' ? { kind: 'sqlite', path: join(gw.dir, 'fg.db') } : store, routes: [route] }))
      try {
        const clean = await runCli(['doctor', '--config', file])
        expect(clean.stdout).not.toContain('state-loss')
        expect(clean.stdout).not.toContain('loss-accepted')

        expect((await post(`${gw.url}/ledger/a`, {}, { 'fencing-token': '5' })).status).toBe(201)
        await rollBack(gw, id)
        const before = Date.now()
        expectProblem(await post(`${gw.url}/ledger/a`, {}, { 'fencing-token': '6' }), { status: 503, type: 'store-state-lost' })

        const noted = await runCli(['doctor', '--config', file])
        expect(noted.status, noted.stdout).toBe(1)
        const m = /RISK\s+state-loss: loss noted in the store, write sequence: sequence \d+ after \d+ was seen \(by gateway (\S+) at (\S+), on \S+\); not accepted yet/.exec(noted.stdout)
        expect(m, noted.stdout).not.toBeNull()
        expect(m![1]).toBe(`${hostname()}:${process.pid}`)
        expect(Date.parse(m![2])).toBeGreaterThanOrEqual(before - 1000)
        expect(Date.parse(m![2])).toBeLessThanOrEqual(Date.now())
        expect(noted.stdout).not.toContain('loss-accepted')

        const accept = await runCli(['store', 'accept-loss', '--config', file, '--reason', 'restored mark checked against the ledger'])
        expect(accept.status).toBe(0)
        const after = await runCli(['doctor', '--config', file])
        expect(after.stdout).not.toContain('state-loss')
        const a = /OK\s+loss-accepted: the last loss of acknowledged state was accepted at (\S+) \(\d+ s ago\) by (cli:\S+) on \S+: reason: restored mark checked against the ledger/.exec(after.stdout)
        expect(a, after.stdout).not.toBeNull()
        expect(a![2]).toMatch(new RegExp(`@${hostname()}$`))
        expect(Date.parse(a![1])).toBeGreaterThanOrEqual(Date.parse(m![2]))
        const json = JSON.parse((await runCli(['doctor', '--config', file, '--json'])).stdout)
        expect(json.findings.filter((f: { id: string }) => f.id === 'loss-accepted')).toHaveLength(1)
        expect(json.findings.filter((f: { id: string }) => f.id === 'state-loss')).toHaveLength(0)
      } finally {
        await gw.close()
        if (kind === 'redis') { const keys = await redis.keys(`*fg:${id}:*`); if (keys.length) await redis.del(...keys) }
      }
    }, 60_000)
  }
})
