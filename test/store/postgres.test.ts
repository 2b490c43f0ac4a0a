// The conformance suite against a real PostgreSQL (PG_URL, default postgres://postgres@127.0.0.1:5432/test).
// The run gets its own schema, emptied after each test and dropped at the end, so runs can overlap.
import { randomUUID } from 'node:crypto'
import { afterAll, beforeAll, describe, expect, test } from 'vitest'
import pg from 'pg'
import { LEASE_ROUTE, migratePostgres, PostgresStore, StoreError } from '../../src/store/index.js'
import { describeStoreConformance, key, req, sampleResponse, T0 } from './conformance.js'

const URL = process.env.PG_URL ?? 'postgres://postgres@127.0.0.1:5432/test'
const schema = `fgtest_${randomUUID().replaceAll('-', '').slice(0, 12)}`
const admin = new pg.Pool({ connectionString: URL, max: 2 })
const open = (over: Partial<Parameters<typeof PostgresStore.open>[0]> = {}) =>
  PostgresStore.open({ url: URL, schema, pool: 4, reapIntervalMs: 0, clock: 'caller', ...over })

beforeAll(async () => { await migratePostgres({ url: URL, schema }) })
afterAll(async () => {
  await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`)
  await admin.query(`DROP SCHEMA IF EXISTS "${schema}_m" CASCADE`)
  await admin.end()
})

/**
 * An engine-level fault: a trigger that refuses every INSERT and UPDATE of the records (only those
 * of `key` when given), as a full disk or a broken constraint would; fences never touch that table.
 * `body` replaces the refusal (a pg_sleep, to make the statement time out). Returns its removal.
 */
async function faultOnRecords(options: { key?: string; body?: string } = {}): Promise<() => Promise<void>> {
  const when = options.key === undefined ? '' : `WHEN (NEW.key = '${options.key}')`
  await admin.query(`CREATE OR REPLACE FUNCTION "${schema}".fg_test_fault() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN ${options.body ?? "RAISE EXCEPTION 'test fault: records refused'"}; RETURN NEW; END $$;
    CREATE TRIGGER fg_test_fault BEFORE INSERT OR UPDATE ON "${schema}".fg_records_v1 FOR EACH ROW ${when}
      EXECUTE FUNCTION "${schema}".fg_test_fault()`)
  return removeFault
}
const removeFault = async () => { await admin.query(`DROP TRIGGER IF EXISTS fg_test_fault ON "${schema}".fg_records_v1`) }

describeStoreConformance('postgres', () => open(), {
  makeSecond: () => open(),
  onStoreClock: () => open({ clock: 'store' }),
  failClaims: () => faultOnRecords(),
  cleanup: async () => {
    await removeFault() // a test that failed before removing its fault must not fail the next ones
    await admin.query(`TRUNCATE "${schema}".fg_fences_v1, "${schema}".fg_records_v1, "${schema}".fg_audit_v1, "${schema}".fg_leases_v1`)
  },
})

describe('PostgresStore', () => {
  test('tokens are BIGINT in the table; a mark written by SQL at 2^63-1 is compared exactly', async () => {
    const s = await open()
    try {
      await admin.query(`INSERT INTO "${schema}".fg_fences_v1 (resource, highest) VALUES ('sql', 9223372036854775807)`)
      expect(await s.fence('sql', 9223372036854775806n)).toMatchObject({ accepted: false, highest: 9223372036854775807n })
      expect(await s.fence('sql', 9223372036854775807n)).toMatchObject({ accepted: true, highest: 9223372036854775807n })
      const { rows } = await admin.query(`SELECT pg_typeof(highest)::text AS t FROM "${schema}".fg_fences_v1 WHERE resource = 'sql'`)
      expect(rows[0].t).toBe('bigint')
    } finally {
      await s.close()
      await admin.query(`TRUNCATE "${schema}".fg_fences_v1`)
    }
  })

  test('a call the server refuses fails alone: the others batched with it still answer', async () => {
    const s = await open()
    try {
      // a NUL cannot be stored in a text column: that call fails, its batch mates must not
      const results = await Promise.allSettled([s.fence('iso/a', 1n), s.fence('iso/\u0000bad', 1n), s.fence('iso/b', 2n), s.fence('iso/a', 0n)])
      expect(results.map((r) => r.status)).toEqual(['fulfilled', 'rejected', 'fulfilled', 'fulfilled'])
      expect((results[1] as PromiseRejectedResult).reason).toBeInstanceOf(StoreError)
      // retried in order: the lower token after the higher one is still stale
      expect((results[3] as PromiseFulfilledResult<unknown>).value).toMatchObject({ accepted: false, highest: 1n })
      expect(await s.highest('iso/b')).toBe(2n)
    } finally {
      await s.close()
    }
  })

  test('the reaper deletes expired records in batches and leaves live ones', async () => {
    const s = await open()
    try {
      for (let i = 0; i < 25; i++) await s.claim(key(`old-${i}`), req(`c${i}`, { ttlMs: 1000 }), T0)
      await s.claim(key('live'), req('cl', { ttlMs: 60_000 }), T0)
      expect(await s.reap(T0 + 5000, 10, 2)).toBe(20) // two batches of ten, then it stops for this round
      expect(await s.reap(T0 + 5000, 10, 2)).toBe(5)
      expect(await s.claim(key('live'), req('c2'), T0 + 5000)).toEqual({ kind: 'in_flight', leaseUntil: T0 + 10_000 })
      const { rows } = await admin.query(`SELECT count(*)::int AS n FROM "${schema}".fg_records_v1`)
      expect(rows[0].n).toBe(1)
    } finally {
      await s.close()
      await admin.query(`TRUNCATE "${schema}".fg_records_v1`)
    }
  })

  test('migrate is idempotent, even run by several replicas at once, and keeps the epoch', async () => {
    const m = `${schema}_m`
    const results = await Promise.all([1, 2, 3].map(() => migratePostgres({ url: URL, schema: m })))
    expect(new Set(results.map((r) => r.epoch)).size).toBe(1)
    expect((await migratePostgres({ url: URL, schema: m })).epoch).toBe(results[0].epoch)
    const s = await PostgresStore.open({ url: URL, schema: m, reapIntervalMs: 0 })
    expect(s.epoch).toBe(results[0].epoch)
    await s.close()
  })

  test('without migrate, a missing schema stops open() with a message saying what to run', async () => {
    const err = await PostgresStore.open({ url: URL, schema: 'fg_never_created', reapIntervalMs: 0 }).then(() => undefined, (e: unknown) => e)
    expect(err).toBeInstanceOf(StoreError)
    expect((err as Error).message).toContain('fencegate migrate')
  })

  test('a schema made by an older fencegate (no v2 fence batches) stops open() with a message saying what to run; migrate brings it up to date', async () => {
    const m = `${schema}_old`
    try {
      await migratePostgres({ url: URL, schema: m })
      // what a migration of the version before left: no since, no v2 batches, no late_ms
      await admin.query(`DROP FUNCTION "${m}".fg_admit_many_v2; DROP FUNCTION "${m}".fg_fence_many_v2;
        ALTER TABLE "${m}".fg_audit_v1 DROP COLUMN late_ms, DROP COLUMN upstream_ms, DROP COLUMN highest_token; ALTER TABLE "${m}".fg_fences_v1 DROP COLUMN since`)
      const err = await PostgresStore.open({ url: URL, schema: m, reapIntervalMs: 0 }).then(() => undefined, (e: unknown) => e)
      expect(err).toBeInstanceOf(StoreError)
      expect((err as Error).message).toMatch(/older fencegate: run `fencegate migrate/)
      await admin.query(`INSERT INTO "${m}".fg_fences_v1 (resource, highest) VALUES ('kept', 8)`)
      const s = await PostgresStore.open({ url: URL, schema: m, reapIntervalMs: 0, migrate: true, clock: 'caller' })
      try {
        expect(await s.mark('kept')).toEqual({ highest: 8n })
        expect(await s.fence('kept', 8n, T0)).toEqual({ accepted: true, highest: 8n })
        expect(await s.fence('kept', 9n, T0 + 1)).toEqual({ accepted: true, highest: 9n, since: T0 + 1, raised: true })
      } finally {
        await s.close()
      }
    } finally {
      await admin.query(`DROP SCHEMA IF EXISTS "${m}" CASCADE`)
    }
  })

  test('a schema from before leases (no fg_lease_many_v1, no lease_until in the attempt log) stops open() naming what it lacks; migrate adds them', async () => {
    const m = `${schema}_lease`
    try {
      await migratePostgres({ url: URL, schema: m })
      await admin.query(`DROP FUNCTION "${m}".fg_lease_many_v1; ALTER TABLE "${m}".fg_audit_v1 DROP COLUMN lease_until`)
      const err = await PostgresStore.open({ url: URL, schema: m, reapIntervalMs: 0 }).then(() => undefined, (e: unknown) => e)
      expect(err).toBeInstanceOf(StoreError)
      expect((err as Error).message).toMatch(/older fencegate: run `fencegate migrate.*; it lacks fg_lease_many_v1, fg_audit_v1\.lease_until$/)
      const s = await PostgresStore.open({ url: URL, schema: m, reapIntervalMs: 0, migrate: true, clock: 'caller' })
      try {
        expect(await s.acquireLease('res/l', 'w1', 5_000, T0)).toMatchObject({ granted: true, lease: { token: 1n, holder: 'w1' } })
        await s.audit.append([{ time: T0, replica: 'h:1', route: LEASE_ROUTE, kind: 'lease', result: 'granted', resource: 'res/l', token: '1', leaseUntil: T0 + 5_000, by: 'w1' }])
        expect(await s.audit.timeline({ resource: 'res/l' }, T0, 10)).toMatchObject([{ kind: 'lease', leaseUntil: T0 + 5_000, by: 'w1' }])
      } finally {
        await s.close()
      }
    } finally {
      await admin.query(`DROP SCHEMA IF EXISTS "${m}" CASCADE`)
    }
  })

  test('a schema from before releases put back what a claim took over (no after_reason, no v3 settle batch) stops open(); migrate adds them', async () => {
    const m = `${schema}_rel`
    try {
      await migratePostgres({ url: URL, schema: m })
      await admin.query(`DROP FUNCTION "${m}".fg_settle_many_v3; ALTER TABLE "${m}".fg_records_v1 DROP COLUMN after_reason`)
      const err = await PostgresStore.open({ url: URL, schema: m, reapIntervalMs: 0 }).then(() => undefined, (e: unknown) => e)
      expect((err as Error).message).toMatch(/older fencegate: run `fencegate migrate/)
      const s = await PostgresStore.open({ url: URL, schema: m, reapIntervalMs: 0, migrate: true, clock: 'caller' })
      try {
        await s.claim(key(), req('c1'), T0)
        await s.finish(key(), 'c1', { kind: 'unknown', reason: 'reset' }, 60_000, T0 + 1)
        await s.claim(key(), req('c2', { retryUnknown: true }), T0 + 2)
        expect(await s.release(key(), 'c2')).toEqual({ kind: 'restored' })
      } finally {
        await s.close()
      }
    } finally {
      await admin.query(`DROP SCHEMA IF EXISTS "${m}" CASCADE`)
    }
  })

  test('a gateway from before (the v2 settle batch) releasing a claim that took over an unknown outcome puts that outcome back too', async () => {
    const s = await open()
    try {
      const k = key()
      await s.claim(k, req('c1'), T0)
      await s.finish(k, 'c1', { kind: 'unknown', reason: 'timeout' }, 60_000, T0 + 1)
      expect(await s.claim(k, req('c2', { retryUnknown: true }), T0 + 2)).toEqual({ kind: 'claimed', after: 'timeout' })
      await admin.query(`SELECT "${schema}".fg_settle_many_v2(ARRAY[$1], ARRAY[$2], ARRAY[$3], ARRAY['c2'], ARRAY[NULL]::text[], ARRAY[0]::bigint[],
        ARRAY[NULL]::integer[], ARRAY[NULL]::text[], ARRAY[NULL]::bytea[], ARRAY[NULL]::text[], ARRAY[NULL]::bigint[])`, [k.route, k.scope, k.key])
      expect(await s.claim(k, req('c3'), T0 + 3)).toEqual({ kind: 'unknown', reason: 'timeout' })
    } finally {
      await s.close()
      await admin.query(`TRUNCATE "${schema}".fg_records_v1`)
    }
  })

  test('a gateway from before settle (the v2 claim and v3 settle batches) during a rolling upgrade: its takeover of a probed unknown outcome holds no probe, its release puts the outcome back with its probe and count', async () => {
    const s = await open()
    try {
      const k = key()
      const probe = 'GET /charges?idempotencyKey=key-1'
      await s.claim(k, req('c1', { probe }), T0)
      await s.finish(k, 'c1', { kind: 'unknown', reason: 'timeout', probeInMs: 2_000 }, 60_000, T0 + 10)
      expect(await s.takeProbe(k, { seen: 0, afterMs: 2_000, nextInMs: 30_000 }, T0 + 2_010)).toMatchObject({ kind: 'taken', probes: 1 })
      const { rows } = await admin.query(`SELECT o_kind, o_after FROM "${schema}".fg_claim_many_v2(ARRAY[$1], ARRAY[$2], ARRAY[$3], ARRAY['fp-1'], ARRAY['old'],
        ARRAY[10000]::bigint[], ARRAY[60000]::bigint[], ARRAY[true], ARRAY[$4]::bigint[])`, [k.route, k.scope, k.key, T0 + 2_020])
      expect(rows).toEqual([{ o_kind: 'claimed', o_after: 'timeout' }])
      expect(await s.takeProbe(k, { seen: 0, afterMs: 0, nextInMs: 30_000 }, T0 + 20_000)).toEqual({ kind: 'not_due' })
      const released = await admin.query(`SELECT o_kind FROM "${schema}".fg_settle_many_v3(ARRAY[$1], ARRAY[$2], ARRAY[$3], ARRAY['old'], ARRAY[NULL]::text[], ARRAY[0]::bigint[],
        ARRAY[NULL]::integer[], ARRAY[NULL]::text[], ARRAY[NULL]::bytea[], ARRAY[NULL]::text[], ARRAY[NULL]::bigint[])`, [k.route, k.scope, k.key])
      expect(released.rows).toEqual([{ o_kind: 'restored' }])
      expect((await s.unknowns(T0 + 2_030)).map((u) => [u.reason, u.probe, u.probes, u.nextProbe])).toEqual([['timeout', probe, 1, T0 + 2_010 + 30_000]])
      // an older gateway's finish of its own claim leaves no probe behind
      await admin.query(`SELECT * FROM "${schema}".fg_admit_many_v3(ARRAY['res/old'], ARRAY[1]::bigint[], ARRAY[$1], ARRAY[$2], ARRAY['old-2'], ARRAY['fp'], ARRAY['o2'],
        ARRAY[10000]::bigint[], ARRAY[60000]::bigint[], ARRAY[false], ARRAY[$3]::bigint[])`, [k.route, k.scope, T0])
      await admin.query(`SELECT o_kind FROM "${schema}".fg_settle_many_v3(ARRAY[$1], ARRAY[$2], ARRAY['old-2'], ARRAY['o2'], ARRAY['unknown'], ARRAY[60000]::bigint[],
        ARRAY[NULL]::integer[], ARRAY[NULL]::text[], ARRAY[NULL]::bytea[], ARRAY['reset'], ARRAY[$3]::bigint[])`, [k.route, k.scope, T0 + 1])
      const old = (await s.unknowns(T0 + 2)).find((u) => u.key.key === 'old-2')
      expect(old).toEqual({ key: { ...k, key: 'old-2' }, reason: 'reset', leaseUntil: 0, expiresAt: T0 + 1 + 60_000 })
    } finally {
      await s.close()
      await admin.query(`TRUNCATE "${schema}".fg_fences_v1, "${schema}".fg_records_v1`)
    }
  })

  test('a gateway from before since was kept (the v1 batches) still keeps it, on the database\'s clock, during a rolling upgrade', async () => {
    const s = await open()
    try {
      const before = Date.now()
      const { rows } = await admin.query(`SELECT * FROM "${schema}".fg_fence_many_v1(ARRAY['v1'], ARRAY[5]::bigint[])`)
      expect(rows).toEqual([{ o_i: 1, o_accepted: true, o_highest: '5' }])
      await admin.query(`SELECT * FROM "${schema}".fg_admit_many_v1(ARRAY['v1'], ARRAY[6]::bigint[], ARRAY['r'], ARRAY['s'], ARRAY['k'], ARRAY['fp'], ARRAY['c'], ARRAY[1]::bigint[], ARRAY[2]::bigint[], ARRAY[false], ARRAY[0]::bigint[])`)
      const m = await s.mark('v1')
      expect(m?.highest).toBe(6n)
      expect(m!.since!).toBeGreaterThanOrEqual(before - 5000)
      expect(m!.since!).toBeLessThanOrEqual(Date.now() + 5000)
      expect(await s.fence('v1', 5n, T0)).toEqual({ accepted: false, highest: 6n, since: m!.since })
    } finally {
      await s.close()
      await admin.query(`TRUNCATE "${schema}".fg_fences_v1, "${schema}".fg_records_v1`)
    }
  })

  test('a half-failed admit (the server refuses the claim step): StoreError, the mark raised as a lone fence raises it, no claim held; its batch mates are admitted', async () => {
    const s = await open()
    try {
      await faultOnRecords({ key: 'refused' })
      // one batch: the server refuses it whole, each call is made again alone, and only the
      // refused one fails — after its lone fence
      const [ok, refused] = await Promise.allSettled([
        s.admit({ resource: 'half/a', token: 3n }, key('fine'), req('c1'), T0),
        s.admit({ resource: 'half/b', token: 4n }, key('refused'), req('c2'), T0),
      ])
      expect(ok).toEqual({ status: 'fulfilled', value: { fence: { accepted: true, highest: 3n, since: T0, raised: true }, claim: { kind: 'claimed' } } })
      expect(refused.status).toBe('rejected')
      const err = (refused as PromiseRejectedResult).reason
      expect(err).toBeInstanceOf(StoreError)
      expect(err.op).toBe('admit')
      expect(err.cause.code).toBe('P0001')
      expect(await s.mark('half/b')).toEqual({ highest: 4n, since: T0 })
      // the lone fence is the gateway's doing: the admit function itself still rolls the fence back
      await expect(admin.query(`SELECT * FROM "${schema}".fg_admit_many_v2(ARRAY['half/sql'], ARRAY[4]::bigint[], ARRAY['r'], ARRAY['s'], ARRAY['refused'],
        ARRAY['fp'], ARRAY['c'], ARRAY[1]::bigint[], ARRAY[2]::bigint[], ARRAY[false], ARRAY[0]::bigint[])`)).rejects.toThrow(/test fault/)
      expect(await s.mark('half/sql')).toBeUndefined()
      await removeFault()
      expect(await s.claim(key('refused'), req('c3'), T0 + 1)).toEqual({ kind: 'claimed' })
    } finally {
      await removeFault()
      await s.close()
      await admin.query(`TRUNCATE "${schema}".fg_fences_v1, "${schema}".fg_records_v1`)
    }
  })

  test('an admit that times out changes nothing: no lone fence after a statement timeout', async () => {
    const s = await open({ statementTimeoutMs: 200 })
    try {
      await faultOnRecords({ body: 'PERFORM pg_sleep(2)' })
      const err = await s.admit({ resource: 'slow', token: 4n }, key('slow'), req('c1'), T0).then(() => undefined, (e: unknown) => e)
      expect(err).toBeInstanceOf(StoreError)
      expect(((err as Error).cause as { code?: string }).code).toBe('57014') // query_canceled: the statement timeout
      expect(await s.mark('slow')).toBeUndefined()
    } finally {
      await removeFault()
      await s.close()
      await admin.query(`TRUNCATE "${schema}".fg_fences_v1, "${schema}".fg_records_v1`)
    }
  })

  test('an unreachable server fails open() fast with StoreError', async () => {
    const t = Date.now()
    const err = await PostgresStore.open({ url: 'postgres://postgres@127.0.0.1:1/test', schema, reapIntervalMs: 0 }).then(() => undefined, (e: unknown) => e)
    expect(err).toBeInstanceOf(StoreError)
    expect(Date.now() - t).toBeLessThan(3000)
  })

  test('a connection the server ends fails the calls on it with StoreError, never the process; the pool recovers', async () => {
    const app = `fg-test-${randomUUID().slice(0, 8)}`
    const s = await open({ url: `${URL}?application_name=${app}` })
    try {
      await s.fence('kill', 1n)
      // a long statement on one connection, then the server ends every connection of ours
      const pending = s.claim(key('during'), req('c1'), T0).then((v) => v, (e: unknown) => e)
      await admin.query('SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1', [app])
      const r = await pending
      // the claim either ran before the kill, or failed as a StoreError: nothing else
      if (r instanceof Error) expect(r).toBeInstanceOf(StoreError)
      await new Promise((ok) => setTimeout(ok, 50))
      expect(await s.fence('kill', 2n)).toMatchObject({ accepted: true, highest: 2n })
      await s.finish(key('x'), 'c', { kind: 'completed', response: sampleResponse() }, 1000, T0)
    } finally {
      await s.close()
      await admin.query(`TRUNCATE "${schema}".fg_fences_v1, "${schema}".fg_records_v1`)
    }
  })
})
