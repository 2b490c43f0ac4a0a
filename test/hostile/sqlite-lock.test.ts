// Issue "Promises that hold in the corners", item 3: another process holds SQLite's write lock
// (another gateway, `fencegate resolve`, an operator's `sqlite3` shell). better-sqlite3 is
// synchronous, so the gateway must not wait for that lock on its event loop: plain routes and
// probes answer at once, and a request that needs the store gets 503 store-unavailable at
// store.timeout, not later, and nothing of it is forwarded.
import { spawn } from 'node:child_process'
import { createInterface } from 'node:readline'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { afterEach, describe, expect, test } from 'vitest'
import { withGateway } from '../helpers/gateway.js'
import { expectProblem, post, send, type Reply } from '../helpers/http.js'
import { sleep } from '../helpers/wait.js'
import { SqliteStore, StoreError } from '../../src/store/index.js'

const ROOT = resolve(import.meta.dirname, '../..')

/** In another OS process: BEGIN IMMEDIATE on `path`, hold the write lock `ms` (blocked in Atomics.wait), COMMIT. */
const HOLDER = `
const Database = require('better-sqlite3')
const db = new Database(process.argv[1], { timeout: 5000 })
db.exec('BEGIN IMMEDIATE')
process.stdout.write('locked\\n')
Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, Number(process.argv[2]))
db.exec('COMMIT')
db.close()
process.stdout.write('released\\n')
`

interface Lock {
  /** resolves once the other process holds the write lock */
  locked: Promise<void>
  /** resolves once it committed and exited */
  released: Promise<void>
  isReleased(): boolean
}

const holders: ReturnType<typeof spawn>[] = []
function holdLock(path: string, ms: number): Lock {
  const child = spawn(process.execPath, ['-e', HOLDER, path, String(ms)], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] })
  holders.push(child)
  let stderr = ''
  child.stderr!.on('data', (d) => { stderr += d })
  let released = false
  const lines = createInterface({ input: child.stdout! })
  const locked = new Promise<void>((ok, fail) => {
    lines.on('line', (l) => { if (l === 'locked') ok() })
    child.once('exit', (code) => fail(new Error(`lock holder exited ${code} before locking: ${stderr}`)))
  })
  const done = new Promise<void>((ok, fail) => {
    child.once('exit', (code) => {
      released = true
      if (code === 0) ok()
      else fail(new Error(`lock holder exited ${code}: ${stderr}`))
    })
  })
  // a holder killed after a failed test rejects these unawaited: not an error of its own
  locked.catch(() => {})
  done.catch(() => {})
  return { locked, released: done, isReleased: () => released }
}
afterEach(() => { for (const c of holders.splice(0)) if (c.exitCode === null) c.kill('SIGKILL') })

const timed = async (p: Promise<Reply>): Promise<{ r: Reply; ms: number }> => {
  const t0 = performance.now()
  const r = await p
  return { r, ms: performance.now() - t0 }
}

describe('a gateway on a SQLite file another process has locked', () => {
  const { up, gw } = withGateway((up) => ({
    store: { kind: 'sqlite', path: '@DIR@/fg.db', timeout: '500ms' },
    routes: [
      { name: 'guarded', path: '/guarded/:res/*', upstream: up.url, fencing: { resource: '{param.res}' }, idempotency: { required: true } },
      { name: 'plain', path: '/plain/*', upstream: { url: up.url, timeout: '300ms' } },
    ],
  }))

  const write = (res: string, key: string, token = '5') =>
    post(`${gw.url}/guarded/${res}/charge`, { key }, { 'fencing-token': token, 'idempotency-key': key })

  test('plain routes and probes answer at once, guarded writes get 503 store-unavailable at store.timeout and reach nobody; afterwards writes go through and replay', async () => {
    // warm up both paths before the lock, so the timings below measure the lock and not a first call
    expect((await write('acct', 'warm', '1')).status).toBe(201)
    expect((await send(`${gw.url}/plain/warm`)).status).toBe(201)

    const lock = holdLock(join(gw.dir, 'fg.db'), 2000)
    await lock.locked
    const forwarded = up.count('/guarded')

    // three guarded writes and a readiness probe wait on the store together...
    const guarded = [1, 2, 3].map((i) => timed(write('acct', `locked-${i}`)))
    const ready = timed(send(`${gw.adminUrl}/readyz`))
    // ...while plain requests and the liveness probe come and go, one after another (from 20 ms
    // on: the gateway has taken the guarded ones in by then, they are waiting on the store)
    await sleep(20)
    const quick: { what: string; status: number; ms: number }[] = []
    const phaseEnd = performance.now() + 430
    while (performance.now() < phaseEnd) {
      for (const [what, url] of [['plain', `${gw.url}/plain/x`], ['healthz', `${gw.adminUrl}/healthz`], ['plain, 100 ms upstream', `${gw.url}/plain/slow?ms=100`]]) {
        const { r, ms } = await timed(send(url))
        quick.push({ what, status: r.status, ms: Math.round(ms) })
      }
    }
    const refused = await Promise.all(guarded)
    const readiness = await ready

    for (const q of quick) {
      if (q.what === 'plain, 100 ms upstream') {
        // the upstream answers in 100 ms: a stalled event loop turns this into a late 504 (300 ms)
        expect(q, JSON.stringify(q)).toMatchObject({ status: 200 })
        expect(q.ms, JSON.stringify(q)).toBeLessThan(250)
      } else {
        expect(q.status, JSON.stringify(q)).toBe(q.what === 'plain' ? 201 : 200)
        expect(q.ms, JSON.stringify(q)).toBeLessThan(100)
      }
    }
    for (const { r, ms } of refused) {
      expectProblem(r, { status: 503, type: 'store-unavailable' })
      expect(ms).toBeGreaterThanOrEqual(495)
      expect(ms).toBeLessThanOrEqual(600)
    }
    expect(up.count('/guarded')).toBe(forwarded)
    expect(readiness.r.status).toBe(503)
    expect(readiness.ms).toBeLessThanOrEqual(600)
    // the whole phase ran under the other process's lock, or it proves nothing
    expect(lock.isReleased(), 'the lock holder let go before the checks ended').toBe(false)

    await lock.released
    // nothing of the refused writes was kept: the same key goes through now
    const again = await write('acct', 'locked-1')
    expect(again.status).toBe(201)
    expect(again.headers['idempotent-replayed']).toBeUndefined()
    const fresh = await write('acct', 'after')
    expect(fresh.status).toBe(201)
    const retry = await write('acct', 'after')
    expect(retry.status).toBe(201)
    expect(retry.headers['idempotent-replayed']).toBe('true')
    expect(retry.text).toBe(fresh.text)
    expect(up.count('/guarded')).toBe(forwarded + 2)
    expect((await send(`${gw.adminUrl}/readyz`)).status).toBe(200)
  })

  test('a lock shorter than store.timeout only delays a guarded write: it is forwarded once the lock goes, and plain routes never wait', async () => {
    const lock = holdLock(join(gw.dir, 'fg.db'), 250)
    await lock.locked
    const forwarded = up.count('/guarded')
    const pending = timed(write('acct', 'short-lock'))
    const plain = await timed(send(`${gw.url}/plain/y`))
    expect(plain.r.status).toBe(201)
    expect(plain.ms).toBeLessThan(100)
    const { r, ms } = await pending
    expect(r.status, r.text).toBe(201)
    // it waited for the lock (held 250 ms from just before the write), not for store.timeout
    expect(ms).toBeGreaterThanOrEqual(150)
    expect(ms).toBeLessThan(500)
    expect(up.count('/guarded')).toBe(forwarded + 1)
    await lock.released
  })
})

describe('SqliteStore under another process\'s write lock', () => {
  const dirs: string[] = []
  const stores: SqliteStore[] = []
  const open = (path: string, busyTimeoutMs: number) => {
    const s = new SqliteStore({ path, busyTimeoutMs, reapIntervalMs: 0 })
    stores.push(s)
    return s
  }
  const freshPath = () => {
    const dir = mkdtempSync(join(tmpdir(), 'fg-sqlite-lock-'))
    dirs.push(dir)
    return join(dir, 'store.db')
  }
  afterEach(async () => {
    for (const s of stores.splice(0)) await s.close().catch(() => {})
    for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true })
  })
  const outcome = <T>(p: Promise<T>) => p.then((v) => ({ ok: true as const, v, at: performance.now() }), (e: unknown) => ({ ok: false as const, e, at: performance.now() }))

  test('each call fails with StoreError once its own busyTimeoutMs has passed, while timers keep running', async () => {
    const path = freshPath()
    const store = open(path, 300)
    await store.fence('res/a', 1n)
    const lock = holdLock(path, 1500)
    await lock.locked
    const t0 = performance.now()
    const first = outcome(store.fence('res/a', 2n))
    // a call made 100 ms later has its own deadline, 100 ms later too
    await sleep(100)
    const t1 = performance.now()
    const second = outcome(store.resolve({ route: 'r', scope: 's', key: 'k' }, 'failed', 1000, Date.now()))
    const third = outcome(store.ping())
    // calling the store does not wait for the lock: only the promise does
    expect(performance.now() - t1, 'resolve() and ping() returned at once').toBeLessThan(20)
    // the event loop is free meanwhile: a 10 ms timer is never held up by the 300 ms wait
    const ticks: number[] = []
    for (let i = 0; i < 20; i++) {
      const s = performance.now()
      await sleep(10)
      ticks.push(performance.now() - s)
    }
    const [a, b, c] = await Promise.all([first, second, third])
    expect(lock.isReleased()).toBe(false)
    expect(Math.max(...ticks)).toBeLessThan(100)
    for (const [o, op, since] of [[a, 'fence', t0], [b, 'resolve', t1], [c, 'ping', t1]] as const) {
      expect(o.ok, op).toBe(false)
      if (o.ok) continue
      expect(o.e).toBeInstanceOf(StoreError)
      expect((o.e as StoreError).op).toBe(op)
      expect((o.e as Error).message).toMatch(/locked by another process/)
      expect(o.at - since, op).toBeGreaterThanOrEqual(295)
      expect(o.at - since, op).toBeLessThanOrEqual(350)
    }
    await lock.released
    expect(await store.highest('res/a')).toBe(1n)
  })

  test('writes queued behind the lock commit after it in the order they were made; a store opened like the CLI waits and works', async () => {
    const path = freshPath()
    const gateway = open(path, 2000)
    await gateway.fence('res/o', 1n)
    // an attempt whose holder crashed: its 1 ms lease is long over when the operator resolves it
    const crashed = { route: 'r', scope: 's', key: 'crashed' }
    expect((await gateway.claim(crashed, { fingerprint: 'f', claimId: 'c0', leaseMs: 1, ttlMs: 60_000, retryUnknown: false }, 1000)).kind).toBe('claimed')
    const cli = open(path, 2000)
    const lock = holdLock(path, 300)
    await lock.locked
    // 5 is asked first, 4 in a later turn of the event loop (a later batch): 4 must not overtake
    const high = gateway.fence('res/o', 5n)
    await sleep(30)
    const low = gateway.fence('res/o', 4n)
    const claimed = gateway.claim({ route: 'r', scope: 's', key: 'k' }, { fingerprint: 'f', claimId: 'c1', leaseMs: 1, ttlMs: 60_000, retryUnknown: false }, 1000)
    const t0 = performance.now()
    const resolved = outcome(cli.resolve(crashed, 'failed', 60_000, 5000))
    expect(await high).toMatchObject({ accepted: true, highest: 5n })
    expect(await low).toMatchObject({ accepted: false, highest: 5n })
    expect((await claimed).kind).toBe('claimed')
    // the CLI's resolve waited for the lock (300 ms, about 260 of them left at t0), then went through
    const r = await resolved
    expect(r).toMatchObject({ ok: true, v: { kind: 'resolved', reason: 'crash' } })
    expect(r.at - t0).toBeGreaterThanOrEqual(150)
    expect(await cli.acceptLoss()).toBe(gateway.epoch)
    await lock.released
  })
})
