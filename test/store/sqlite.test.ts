import { spawn } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { createInterface } from 'node:readline'
import { fileURLToPath } from 'node:url'
import { afterEach, describe, expect, test } from 'vitest'
import Database from 'better-sqlite3'
import { SqliteStore, StoreError, type Store } from '../../src/store/index.js'
import { describeStoreConformance, key, req, sampleResponse, T0 } from './conformance.js'

const dirs: string[] = []
const freshPath = (): string => {
  const dir = mkdtempSync(join(tmpdir(), 'fencegate-sqlite-'))
  dirs.push(dir)
  return join(dir, 'store.db')
}
const removeDirs = () => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true })
}
const open = (path: string) => new SqliteStore({ path, reapIntervalMs: 0 })

/**
 * An engine-level fault: triggers that refuse every insert into and update of the records table
 * (RAISE(ABORT): the statement is undone, the transaction goes on), made through a second
 * connection to the file, so the claim step fails inside SQLite while fences still work.
 * @returns removes the triggers and closes the connection
 */
const faults = new Set<Database.Database>()
async function failClaims(path: string): Promise<() => Promise<void>> {
  const db = new Database(path, { timeout: 5_000 })
  faults.add(db)
  db.exec(`CREATE TRIGGER fg_test_fail_claim_insert BEFORE INSERT ON fg_records_v1 BEGIN SELECT RAISE(ABORT, 'injected: records refused'); END;
    CREATE TRIGGER fg_test_fail_claim_update BEFORE UPDATE ON fg_records_v1 BEGIN SELECT RAISE(ABORT, 'injected: records refused'); END;`)
  return async () => {
    if (!db.open) return
    db.exec('DROP TRIGGER IF EXISTS fg_test_fail_claim_insert; DROP TRIGGER IF EXISTS fg_test_fail_claim_update')
    db.close()
    faults.delete(db)
  }
}
const closeFaults = () => {
  for (const db of faults) db.close()
  faults.clear()
}

// the conformance suite: a fresh file per test; makeSecond opens the same file again
let current = ''
const paths = new WeakMap<Store, string>()
const opened = (path: string): SqliteStore => {
  const s = open(path)
  paths.set(s, path)
  return s
}
describeStoreConformance(
  'sqlite',
  async () => {
    current = freshPath()
    return opened(current)
  },
  {
    makeSecond: async () => opened(current),
    failClaims: (s) => failClaims(paths.get(s)!),
    cleanup: () => {
      closeFaults()
      removeDirs()
    },
  },
)

describe('SqliteStore', () => {
  const stores: Store[] = []
  afterEach(async () => {
    for (const s of stores.splice(0).reverse()) await s.close().catch(() => {})
    removeDirs()
  })
  const track = <S extends Store>(s: S): S => {
    stores.push(s)
    return s
  }

  test('the mark and a completed record survive closing and reopening the file', async () => {
    const path = freshPath()
    const first = open(path)
    await first.fence('res/a', 9223372036854775807n)
    await first.fence('res/b', 2n ** 53n + 1n)
    await first.claim(key(), req('c1'), T0)
    await first.finish(key(), 'c1', { kind: 'completed', response: sampleResponse() }, 60_000, T0 + 10)
    await first.claim(key('k-unknown'), req('c2'), T0)
    await first.finish(key('k-unknown'), 'c2', { kind: 'unknown', reason: 'client_abort' }, 60_000, T0 + 10)
    const epoch = first.epoch
    await first.close()

    const again = track(open(path))
    expect(again.epoch).toBe(epoch)
    expect(await again.highest('res/a')).toBe(9223372036854775807n)
    expect(await again.fence('res/a', 9223372036854775806n)).toMatchObject({ accepted: false, highest: 9223372036854775807n })
    expect(await again.fence('res/b', 2n ** 53n)).toMatchObject({ accepted: false, highest: 2n ** 53n + 1n })
    const r = await again.claim(key(), req('c3'), T0 + 20)
    expect(r.kind).toBe('completed')
    if (r.kind === 'completed') {
      const want = sampleResponse()
      expect(r.response.status).toBe(want.status)
      expect(r.response.headers).toEqual(want.headers)
      expect(Buffer.compare(r.response.body, want.body)).toBe(0)
    }
    expect(await again.claim(key('k-unknown'), req('c4'), T0 + 20)).toEqual({ kind: 'unknown', reason: 'client_abort' })
  })

  test('a file made before marks kept their since, or the attempt log its effect durations: opened, the columns are added; old marks have no since', async () => {
    const path = freshPath()
    const old = new Database(path)
    old.exec(`CREATE TABLE fg_meta_v1 (name TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
      CREATE TABLE fg_fences_v1 (resource TEXT PRIMARY KEY, highest INTEGER NOT NULL) WITHOUT ROWID;
      CREATE TABLE fg_audit_v1 (time INTEGER NOT NULL, kind TEXT NOT NULL, replica TEXT NOT NULL, route TEXT NOT NULL, method TEXT,
        resource TEXT, token TEXT, key_hash TEXT, fingerprint TEXT, outcome TEXT, result TEXT, unknown TEXT,
        abandoned INTEGER NOT NULL DEFAULT 0, duplicate INTEGER NOT NULL DEFAULT 0, overtaken INTEGER NOT NULL DEFAULT 0,
        status INTEGER, upstream_status INTEGER, duration_ms REAL, trace_id TEXT, resolution TEXT);
      INSERT INTO fg_fences_v1 VALUES ('res/old', 12);`)
    old.close()
    const s = track(open(path))
    expect(await s.mark('res/old')).toEqual({ highest: 12n })
    expect(await s.fence('res/old', 12n, T0)).toEqual({ accepted: true, highest: 12n })
    expect(await s.fence('res/old', 11n, T0)).toEqual({ accepted: false, highest: 12n })
    expect(await s.fence('res/old', 13n, T0 + 1)).toEqual({ accepted: true, highest: 13n, since: T0 + 1, raised: true })
    const entry = { time: Date.now(), kind: 'attempt' as const, replica: 'h:1', route: 'pay', resource: 'res/old', token: '13', outcome: 'forwarded' as const, upstreamMs: 12.5, lateMs: 3 }
    await s.audit.append([entry])
    expect(await s.audit.timeline({ resource: 'res/old' }, 0, 10)).toEqual([entry])
  })

  test('a fresh file gets a new epoch', async () => {
    const a = track(open(freshPath()))
    const b = track(open(freshPath()))
    expect(a.epoch).toMatch(/^[0-9a-f-]{36}$/)
    expect(b.epoch).not.toBe(a.epoch)
  })

  test("a second SqliteStore on the same file sees the first's writes", async () => {
    const path = freshPath()
    const a = track(open(path))
    const b = track(open(path))
    expect(b.epoch).toBe(a.epoch)

    await a.fence('res/a', 41n)
    expect(await b.highest('res/a')).toBe(41n)
    expect(await b.fence('res/a', 40n)).toMatchObject({ accepted: false, highest: 41n })

    expect((await a.claim(key(), req('c1'), T0)).kind).toBe('claimed')
    expect(await b.claim(key(), req('c2'), T0 + 1)).toEqual({ kind: 'in_flight', leaseUntil: T0 + 10_000 })
    await b.finish(key(), 'c2', { kind: 'not_stored', status: 500 }, 60_000, T0 + 2) // not b's claim: no-op
    await a.finish(key(), 'c1', { kind: 'completed', response: sampleResponse() }, 60_000, T0 + 3)
    const r = await b.claim(key(), req('c3'), T0 + 4)
    expect(r.kind).toBe('completed')
    if (r.kind === 'completed') expect(Buffer.compare(r.response.body, sampleResponse().body)).toBe(0)
  })

  test('a half-failed admit in a group commit: its claim step fails alone; the mark its fence raised and the other calls of the batch commit', async () => {
    const path = freshPath()
    const s = track(open(path))
    await s.fence('res/half', 5n, T0 - 1_000)
    // a fault on one key's record only: its insert is refused inside SQLite (the statement is undone, the transaction goes on)
    const db = new Database(path)
    db.exec(`CREATE TRIGGER fg_test_fail_one BEFORE INSERT ON fg_records_v1 WHEN substr(NEW.id, -10) = char(10) || 'k-refused'
      BEGIN SELECT RAISE(ABORT, 'injected: record refused'); END`)
    // made in one turn of the event loop: one transaction
    const [before, refused, admitted, claimed, after] = await Promise.allSettled([
      s.fence('res/before', 1n, T0),
      s.admit({ resource: 'res/half', token: 7n }, key('k-refused'), req('a1'), T0),
      s.admit({ resource: 'res/other', token: 2n }, key('k-ok'), req('a2'), T0),
      s.claim(key('k-ok-2'), req('c1'), T0),
      s.fence('res/after', 3n, T0),
    ])
    expect(refused.status).toBe('rejected')
    const err = (refused as PromiseRejectedResult).reason
    expect(err).toBeInstanceOf(StoreError)
    expect(err).toMatchObject({ op: 'admit', message: expect.stringMatching(/^sqlite admit: injected: record refused$/) })
    expect(before).toEqual({ status: 'fulfilled', value: { accepted: true, highest: 1n, since: T0, raised: true } })
    expect(admitted).toEqual({ status: 'fulfilled', value: { fence: { accepted: true, highest: 2n, since: T0, raised: true }, claim: { kind: 'claimed' } } })
    expect(claimed).toEqual({ status: 'fulfilled', value: { kind: 'claimed' } })
    expect(after).toEqual({ status: 'fulfilled', value: { accepted: true, highest: 3n, since: T0, raised: true } })

    // what committed, as another process opening the file reads it
    const reader = track(open(path))
    expect(await reader.mark('res/half')).toEqual({ highest: 7n, since: T0 })
    for (const [r, t] of [['res/before', 1n], ['res/other', 2n], ['res/after', 3n]] as const) expect(await reader.mark(r)).toEqual({ highest: t, since: T0 })
    expect(await reader.claim(key('k-ok'), req('probe'), T0 + 1)).toEqual({ kind: 'in_flight', leaseUntil: T0 + 10_000 })
    expect(await reader.claim(key('k-ok-2'), req('probe'), T0 + 1)).toEqual({ kind: 'in_flight', leaseUntil: T0 + 10_000 })
    // no claim is held: once the fault is gone the same admit with a new claimId is admitted
    db.exec('DROP TRIGGER fg_test_fail_one')
    db.close()
    expect(await s.admit({ resource: 'res/half', token: 7n }, key('k-refused'), req('a3'), T0 + 2)).toEqual({ fence: { accepted: true, highest: 7n, since: T0 }, claim: { kind: 'claimed' } })
  })

  describe('the attempt log, off the request path', () => {
    const entry = (route: string) => ({ time: Date.now(), kind: 'attempt' as const, replica: 'h:1', route, outcome: 'forwarded' as const })
    const routes = (path: string) => {
      const db = new Database(path, { readonly: true })
      try {
        return (db.prepare('SELECT route FROM fg_audit_v1 ORDER BY rowid').pluck().all() as string[])
      } finally {
        db.close()
      }
    }

    test('an append commits in a transaction of its own after the group commit of its turn; one the file refuses fails alone, whole', async () => {
      const path = freshPath()
      const s = track(open(path))
      const settled: string[] = []
      const done = (what: string) => () => { settled.push(what) }
      // asked first, in the same turn as the writes: still settled after them, on a later turn
      await Promise.all([
        s.audit.append([entry('first')]).then(done('append')),
        s.fence('res/log', 1n, T0).then(done('fence')),
        s.claim(key('log'), req('c1'), T0).then(done('claim')),
      ])
      expect(settled).toEqual(['fence', 'claim', 'append'])

      const db = new Database(path)
      db.exec("CREATE TRIGGER fg_test_fail_log BEFORE INSERT ON fg_audit_v1 WHEN NEW.route = 'refused' BEGIN SELECT RAISE(ABORT, 'injected: entry refused'); END")
      const [ok, fenced, refused, later] = await Promise.allSettled([
        s.audit.append([entry('ok-1')]),
        s.fence('res/log', 2n, T0 + 1),
        s.audit.append([entry('undone'), entry('refused')]),
        s.audit.append([entry('ok-2')]),
      ])
      db.close()
      expect(fenced).toEqual({ status: 'fulfilled', value: { accepted: true, highest: 2n, since: T0 + 1, raised: true } })
      expect(ok.status).toBe('fulfilled')
      expect(later.status).toBe('fulfilled')
      expect(refused.status).toBe('rejected')
      expect((refused as PromiseRejectedResult).reason).toMatchObject({ name: 'StoreError', op: 'audit_append', message: 'sqlite audit_append: injected: entry refused' })
      // in the order appended; the refused append left nothing, not even its first entry
      expect(routes(path)).toEqual(['first', 'ok-1', 'ok-2'])
    })

    test("under another connection's lock an append waits on timers and fails alone with StoreError once its time is up; writes made meanwhile are not held up by it", async () => {
      const path = freshPath()
      const s = track(new SqliteStore({ path, reapIntervalMs: 0, busyTimeoutMs: 150 }))
      await s.fence('res/locked', 1n, T0)
      const holder = new Database(path)
      holder.exec('BEGIN IMMEDIATE')
      const t0 = performance.now()
      const appended = s.audit.append([entry('locked')]).then(() => undefined, (e: unknown) => e)
      const ticks: number[] = []
      for (let i = 0; i < 5; i++) {
        const at = performance.now()
        await new Promise((r) => setTimeout(r, 10))
        ticks.push(performance.now() - at)
      }
      const err = await appended
      const waited = performance.now() - t0
      expect(err).toBeInstanceOf(StoreError)
      expect(err).toMatchObject({ op: 'audit_append', message: expect.stringMatching(/locked by another process/) })
      expect(waited).toBeGreaterThanOrEqual(145)
      expect(Math.max(...ticks)).toBeLessThan(50)
      // released: a fence asked with an append in one turn goes first, then the append
      const settled: string[] = []
      const both = Promise.all([
        s.audit.append([entry('after')]).then(() => { settled.push('append') }),
        s.fence('res/locked', 2n, T0).then(() => { settled.push('fence') }),
      ])
      setTimeout(() => holder.exec('COMMIT'), 30)
      await both
      holder.close()
      expect(settled).toEqual(['fence', 'append'])
      expect(routes(path)).toEqual(['after'])
    })

    test('entries past the retention are deleted by the log\'s transactions', async () => {
      const path = freshPath()
      const s = track(new SqliteStore({ path, reapIntervalMs: 0, auditRetentionMs: 60_000 }))
      await s.audit.append([{ ...entry('old'), time: Date.now() - 120_000 }, entry('new')])
      expect(routes(path)).toEqual(['new'])
    })

    test('close() writes what was appended before it; appends after it reject with StoreError', async () => {
      const path = freshPath()
      const s = open(path)
      const before = s.audit.append([entry('before-close')])
      await s.close()
      await before
      await expect(s.audit.append([entry('after-close')])).rejects.toMatchObject({ name: 'StoreError', op: 'audit_append' })
      expect(routes(path)).toEqual(['before-close'])
    })
  })

  test('two OS processes on one file: each key is claimed once, fences stay monotonic', async () => {
    const path = freshPath()
    // create the file and schema first, so the workers do not race on initialisation
    await open(path).close()
    const workers = 2
    const rounds = 1000
    // long enough for the processes to meet on ten keys even when they take turns slowly (a loaded CI, Node 24)
    const claimMs = 1500
    const viteNode = fileURLToPath(new URL('../../node_modules/vite-node/vite-node.mjs', import.meta.url))
    const script = fileURLToPath(new URL('./sqlite-worker.ts', import.meta.url))

    const children = Array.from({ length: workers }, (_, w) => {
      const child = spawn(process.execPath, [viteNode, script], {
        env: { ...process.env, FG_DB: path, FG_WORKER: String(w), FG_WORKERS: String(workers), FG_ROUNDS: String(rounds) },
        stdio: ['pipe', 'pipe', 'pipe'],
      })
      let stderr = ''
      child.stderr.on('data', (d) => { stderr += d })
      const it = createInterface({ input: child.stdout })[Symbol.asyncIterator]()
      const next = async (): Promise<string> => {
        const { value, done } = await it.next()
        if (done) throw new Error(`worker ${w} ended early: ${stderr}`)
        return value
      }
      const exited = new Promise<number | null>((resolve) => child.on('close', resolve))
      return { child, next, exited, stderr: () => stderr }
    })
    try {
      for (const c of children) expect(await c.next()).toBe('ready')
      const claimUntil = Date.now() + claimMs
      for (const c of children) c.child.stdin.write(`go ${claimUntil}\n`)
      const outputs = await Promise.all(children.map(async (c) => JSON.parse(await c.next()) as {
        claims: Record<string, [attempts: number, claimed: boolean]>
        fences: [token: string, accepted: boolean, highest: string][]
      }))
      for (const c of children) expect(await c.exited, c.stderr()).toBe(0)

      // claims: a key every worker tried is claimed by exactly one of them
      const keys = new Set(outputs.flatMap((o) => Object.keys(o.claims)))
      let contended = 0
      for (const k of keys) {
        const seen = outputs.map((o) => o.claims[k]).filter((e) => e !== undefined)
        if (seen.length === workers) contended++
        expect(seen.filter(([, claimed]) => claimed).length, `key ${k}`).toBeLessThanOrEqual(1)
      }
      const check = track(open(path))
      for (const k of keys) {
        // every key that was tried holds a record: someone claimed it
        expect((await check.claim({ route: 'POST /x', scope: 'a'.repeat(64), key: k }, req('probe', { fingerprint: 'fp' }), T0)).kind, `key ${k}`).toBe('in_flight')
      }
      // the run proves something only when the processes did meet on the same keys
      expect(contended).toBeGreaterThanOrEqual(3)

      // fences: what one process sees never goes down, and the mark ends at the max
      for (const { fences } of outputs) {
        let seen = 0n
        for (const [t, accepted, h] of fences) {
          const token = BigInt(t)
          const highest = BigInt(h)
          if (accepted) expect(highest).toBe(token)
          else expect(highest > token, `token ${token} rejected with highest ${highest}`).toBe(true)
          expect(highest >= seen, `mark went down from ${seen} to ${highest}`).toBe(true)
          seen = highest
        }
      }
      expect(await check.highest('res/xproc')).toBe(BigInt(workers * rounds))
    } finally {
      for (const c of children) if (c.child.exitCode === null) c.child.kill()
    }
  }, 60_000)
})
