// store.replicas on PostgreSQL and store.sentinels on Redis: config mistakes name their YAML path;
// a PostgreSQL with fewer synchronous standbys than store.replicas asks for (the shared test
// server has none) answers guarded routes 503 and forwards nothing, and doctor says why.
import { afterAll, beforeAll, describe, expect, test } from 'vitest'
import { randomUUID } from 'node:crypto'
import { parseConfig, ConfigError } from '../../src/config/load.js'
import { inspectStore } from '../../src/store/index.js'
import { gatewayConfig, startTestGateway, type StoreInput, type TestGateway } from '../helpers/gateway.js'
import { expectProblem, post } from '../helpers/http.js'
import { PG_URL, dropPostgresSchema } from '../helpers/stores.js'
import { startUpstream, type Upstream } from '../helpers/upstream.js'

let up: Upstream
beforeAll(async () => { up = await startUpstream() })
afterAll(async () => { await up.close() })

const problems = (store: StoreInput): string => {
  try {
    parseConfig(gatewayConfig({ store, routes: [{ name: 'pay', path: '/pay', upstream: 'http://127.0.0.1:1', fencing: { resource: 'r' } }] }), '/tmp/fencegate.yaml')
    return ''
  } catch (e) {
    expect(e).toBeInstanceOf(ConfigError)
    return (e as Error).message
  }
}

describe('config', () => {
  test('sentinels need a name and redis; a name needs sentinels; replicas is for redis and postgres; replicasTimeout for redis only', () => {
    expect(problems({ kind: 'redis', sentinels: ['127.0.0.1:26379'] })).toMatch(/store\.sentinelName.*needs store\.sentinelName/)
    expect(problems({ kind: 'redis', url: 'redis://127.0.0.1:6379', sentinelName: 'fg' })).toMatch(/store\.sentinels.*needs store\.sentinels/)
    expect(problems({ kind: 'postgres', url: PG_URL, sentinels: ['127.0.0.1:26379'], sentinelName: 'fg' })).toMatch(/store\.sentinels.*only with store\.kind redis/)
    expect(problems({ kind: 'redis', sentinels: ['sentinel-1'], sentinelName: 'fg' })).toMatch(/^\/tmp\/fencegate.yaml:\d+: store\.sentinels\[0\]: must be host:port$/)
    expect(problems({ kind: 'sqlite', replicas: 1 })).toMatch(/store\.replicas.*only with store\.kind redis .* or postgres/)
    expect(problems({ kind: 'postgres', url: PG_URL, replicas: 1, replicasTimeout: '100ms' })).toMatch(/store\.replicasTimeout.*only with store\.kind redis/)
    // a Sentinel setup needs no url
    expect(problems({ kind: 'redis', sentinels: ['127.0.0.1:26379'], sentinelName: 'fg' })).toBe('')
    expect(problems({ kind: 'postgres', url: PG_URL, replicas: 1 })).toBe('')
  })
})

describe('PostgreSQL store.replicas with too few synchronous standbys', () => {
  const schema = `fg_sync_${randomUUID().replaceAll('-', '').slice(0, 12)}`
  let gw: TestGateway
  afterAll(async () => {
    await gw?.close()
    await dropPostgresSchema(schema)
  })

  test('guarded routes answer 503 and forward nothing; plain routes serve; doctor names the shortfall', async () => {
    const store: StoreInput = { kind: 'postgres', url: PG_URL, schema, replicas: 1 }
    gw = await startTestGateway({ store, routes: [
      { name: 'pay', path: '/pay/:id', upstream: up.url, fencing: { resource: '{param.id}' }, idempotency: {} },
      { name: 'plain', path: '/plain', upstream: up.url },
    ] })
    const before = up.count('/pay')
    const r = await post(`${gw.url}/pay/a`, {}, { 'fencing-token': '1', 'idempotency-key': 'k1' })
    expectProblem(r, { status: 503, type: 'store-unavailable' })
    expect(up.count('/pay')).toBe(before)
    expect(gw.logs.join('')).toMatch(/synchronous_standby_names '' makes commits wait for 0 standbys, and store\.replicas asks for 1/)
    expect((await post(`${gw.url}/plain`, {})).status).toBe(201)

    const report = await inspectStore(parseConfig(gatewayConfig({ store, routes: [{ name: 'p', path: '/p', upstream: up.url }] }), '/tmp/x.yaml').store)
    const standbys = report.findings.find((f) => f.id === 'standbys')
    expect(standbys).toMatchObject({ status: 'risk', setting: "synchronous_standby_names '', synchronous_commit on, store.replicas 1" })
    expect(standbys!.consequence).toMatch(/refused with 503 until enough synchronous standbys are configured/)
  })
})
