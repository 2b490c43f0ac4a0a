// `fencing.serialize: store` with a killed replica whose clock runs 20 s ahead (libfaketime, real
// processes), on Redis and on PostgreSQL. The replica registers token 5 and is killed (SIGKILL)
// while its request is upstream; nothing unregisters it. Its registration holds newer tokens back
// for the request's own bound — docs/limits.md: serializeWait, one upstream.timeout for the
// answer, one more for the hold of an unknown outcome (no idempotency record), plus 2 s of
// margin — counted on the store's clock: a true-clock replica's token 6 is applied after that
// bound, not before (the order is kept) and not 20 s later (the killed replica's clock counts
// for nothing).
import { randomUUID } from 'node:crypto'
import { join } from 'node:path'
import { rmSync, writeFileSync } from 'node:fs'
import { afterAll, beforeAll, describe, expect, test } from 'vitest'
import { startUpstream, type Upstream } from '../helpers/upstream.js'
import { tempDir, freePort, spawnGateway, gatewayConfig, type ChildGateway, type StoreInput } from '../helpers/gateway.js'
import { post } from '../helpers/http.js'
import { until } from '../helpers/wait.js'
import { skewed } from '../helpers/faketime.js'
import { dropPostgresSchema, dropRedisPrefix, PG_URL, REDIS_URL } from '../helpers/stores.js'

const run = randomUUID().replaceAll('-', '').slice(0, 10)

/** The killed replica's route: upstream.timeout 2 s, serializeWait 1 s, no idempotency. */
const KILLED = { timeoutMs: 2_000, serializeWaitMs: 1_000 }
/** The documented hold of its registration: serializeWait + 2 × upstream.timeout + 2 s (src/fencing/window.ts). */
const BOUND_MS = KILLED.serializeWaitMs + 2 * KILLED.timeoutMs + 2_000
/** Slack for a loaded machine: polls, store calls, process scheduling. */
const SLACK_MS = 3_000

const stores: Record<'redis' | 'postgres', { store: StoreInput; drop(): Promise<void> }> = {
  redis: { store: { kind: 'redis', url: REDIS_URL, keyPrefix: `fgkill-${run}` }, drop: () => dropRedisPrefix(`fgkill-${run}`) },
  postgres: { store: { kind: 'postgres', url: PG_URL, schema: `fgkill_${run}`, pool: 4 }, drop: () => dropPostgresSchema(`fgkill_${run}`) },
}

let up: Upstream
beforeAll(async () => { up = await startUpstream() })
afterAll(async () => { await up?.close() })

for (const [kind, shared] of Object.entries(stores)) {
  describe(`a killed replica 20 s ahead, sharing ${kind}`, () => {
    const dir = tempDir('fg-skew-kill-')
    const started: ChildGateway[] = []
    const start = async (name: string, route: { timeoutMs: number; serializeWaitMs: number }, launch = {}) => {
      const port = await freePort(), admin = await freePort()
      const file = join(dir, `${name}.yaml`)
      writeFileSync(file, gatewayConfig({
        listen: `127.0.0.1:${port}`,
        admin: { listen: `127.0.0.1:${admin}` },
        store: shared.store,
        routes: [{
          name: 'ledger',
          path: '/ledger/:res/*',
          upstream: { url: up.url, timeout: `${route.timeoutMs}ms` },
          fencing: { resource: '{param.res}', serialize: 'store', serializeWait: `${route.serializeWaitMs}ms` },
        }],
      }))
      const g = await spawnGateway(file, port, admin, join(dir, `${name}.log`), [], launch)
      started.push(g)
      return g
    }
    afterAll(async () => {
      await Promise.all(started.map((g) => g.stop('SIGKILL')))
      await shared.drop()
      rmSync(dir, { recursive: true, force: true })
    })

    test(`its registration holds token 6 of a true-clock replica for the documented ${BOUND_MS / 1000} s, on the store's clock, then 6 is applied`, async () => {
      const res = `${kind}-killed`
      // a true-clock replica that waits long enough to see the hold end
      const patient = await start('patient', { timeoutMs: 2_000, serializeWaitMs: 30_000 })
      const doomed = await start('doomed', KILLED, skewed('+20s'))
      const t0 = Date.now()
      const sent = post(`${doomed.url}/ledger/${res}/hang`, {}, { 'fencing-token': '5' }).catch(() => undefined)
      await until(() => up.count(`/ledger/${res}/hang`) === 1, { intervalMs: 10, message: 'token 5 to reach the upstream' })
      const t1 = Date.now()
      await doomed.stop('SIGKILL')
      await sent

      const newer = await post(`${patient.url}/ledger/${res}/apply`, {}, { 'fencing-token': '6' })
      const applied = Date.now()
      expect(newer.status).toBe(201)
      expect(up.applied.filter((e) => e.url.includes(`/${res}/`)).map((e) => `${e.event} ${e.token}`)).toEqual(['arrived 6', 'applied 6'])
      // registered between t0 and t1, so held until at least t0 + bound: never early
      expect(applied - t0).toBeGreaterThanOrEqual(BOUND_MS - 250)
      // and let go at t1 + bound at the latest: the killed replica's clock 20 s ahead adds nothing
      expect(applied - t1).toBeLessThan(BOUND_MS + SLACK_MS)
    }, 40_000)
  })
}
