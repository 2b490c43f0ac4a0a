// Two gateway processes (replicas A and B, each on its own port) sharing one store: once Redis,
// once PostgreSQL. What a load balancer in front of them must not be able to tell apart from
// one gateway. Each run has its own key prefix / schema, removed afterwards.
import { randomUUID } from 'node:crypto'
import { join } from 'node:path'
import { rmSync, writeFileSync } from 'node:fs'
import { afterAll, beforeAll, describe, expect, test } from 'vitest'
import { startUpstream, type Upstream } from './helpers/upstream.js'
import { tempDir, freePort, spawnGateway, ledgerConfig, type ChildGateway, type StoreInput } from './helpers/gateway.js'
import { expectProblem, post, metrics, metric } from './helpers/http.js'
import { until } from './helpers/wait.js'
import { dropPostgresSchema, dropRedisPrefix, PG_URL, REDIS_URL } from './helpers/stores.js'

const run = randomUUID().replaceAll('-', '').slice(0, 10)

interface Shared {
  kind: 'redis' | 'postgres'
  /** the config's store */
  store: StoreInput
  drop(): Promise<void>
}

const stores: Shared[] = [
  {
    kind: 'redis',
    store: { kind: 'redis', url: REDIS_URL, keyPrefix: `fgrep-${run}` },
    drop: () => dropRedisPrefix(`fgrep-${run}`),
  },
  {
    kind: 'postgres',
    store: { kind: 'postgres', url: PG_URL, schema: `fgrep_${run}`, pool: 4 },
    drop: () => dropPostgresSchema(`fgrep_${run}`),
  },
]

let up: Upstream
beforeAll(async () => { up = await startUpstream() })
afterAll(async () => { await up?.close() })

describe.each(stores)('two replicas sharing $kind', (shared) => {
  const dir = tempDir('fg-replicas-')
  let a: ChildGateway, b: ChildGateway

  const start = async (name: string) => {
    const port = await freePort(), admin = await freePort()
    const file = join(dir, `${name}.yaml`)
    writeFileSync(file, ledgerConfig({ port, admin, upstream: up.url, store: shared.store, lease: '10s' }))
    return spawnGateway(file, port, admin, join(dir, `${name}.log`))
  }

  beforeAll(async () => {
    a = await start('a')
    b = await start('b')
  })
  afterAll(async () => {
    await a?.stop()
    await b?.stop()
    await shared.drop()
    rmSync(dir, { recursive: true, force: true })
  })

  // resources (and so upstream paths) are per store: both describe blocks share the upstream
  const write = (g: ChildGateway, res: string, token: string, key: string, path = 'charge') =>
    post(`${g.url}/ledger/${shared.kind}-${res}/${path}`, { res }, { 'fencing-token': token, 'idempotency-key': key })
  const calls = (res: string, path = '') => up.count(`/ledger/${shared.kind}-${res}/${path}`)

  test('a stale token sent to B after a newer one passed A is rejected (412)', async () => {
    expect((await write(a, 'stale', '7', 'k-a')).status).toBe(201)
    expectProblem(await write(b, 'stale', '6', 'k-b'), { status: 412, type: 'stale-fencing-token', members: { token: '6', highestToken: '7' } })
    // and the other way round, at the top of the range
    expect((await write(b, 'stale', '9223372036854775807', 'k-b2')).status).toBe(201)
    expectProblem(await write(a, 'stale', '9223372036854775806', 'k-a2'), { status: 412, type: 'stale-fencing-token', members: { highestToken: '9223372036854775807' } })
  })

  test('a key completed on A replays on B, byte for byte, without calling the upstream', async () => {
    const first = await write(a, 'replay', '1', 'k-replay')
    expect(first.status).toBe(201)
    const before = calls('replay')
    const again = await write(b, 'replay', '1', 'k-replay')
    expect(again.status).toBe(201)
    expect(again.headers['idempotent-replayed']).toBe('true')
    expect(again.body.equals(first.body)).toBe(true)
    expect(calls('replay')).toBe(before)
  })

  test('100 concurrent same-key requests split across both reach the upstream once', async () => {
    const replies = await Promise.all(Array.from({ length: 100 }, (_, i) => write(i % 2 ? a : b, 'race', '1', 'one-key')))
    expect(calls('race')).toBe(1)
    const fresh = replies.filter((r) => r.status === 201 && r.headers['idempotent-replayed'] === undefined)
    expect(fresh).toHaveLength(1)
    for (const r of replies) {
      if (r === fresh[0]) continue
      // the others were told it is in flight, or (once it completed) got the replay
      if (r.status === 409) expectProblem(r, { status: 409, type: 'request-in-flight' })
      else expect([r.status, r.headers['idempotent-replayed']]).toEqual([201, 'true'])
    }
    const stored = metric(await metrics(a.adminUrl), 'fencegate_idempotency_total', { result: 'stored' }) +
      metric(await metrics(b.adminUrl), 'fencegate_idempotency_total', { result: 'stored' })
    expect(stored).toBeGreaterThanOrEqual(1)
  })

  test('a claim in flight on A gets 409 request-in-flight on B', async () => {
    const slow = write(a, 'held', '1', 'k-held', 'slow?ms=1500')
    // wait until A's request reached the upstream: the claim is held from then on
    await until(() => calls('held', 'slow') > 0, { timeoutMs: 2000, message: 'A\'s request to reach the upstream' })
    expect(calls('held', 'slow')).toBe(1)
    const onB = await write(b, 'held', '1', 'k-held', 'slow?ms=1500')
    expectProblem(onB, { status: 409, type: 'request-in-flight', headers: { 'retry-after': /^[1-9]\d*$/ } })
    expect((await slow).status).toBe(200)
    // once A finished, B replays A's answer
    const after = await write(b, 'held', '1', 'k-held', 'slow?ms=1500')
    expect([after.status, after.headers['idempotent-replayed']]).toEqual([200, 'true'])
    expect(calls('held', 'slow')).toBe(1)
  })
})
