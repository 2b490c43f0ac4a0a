// The gateway as separate processes through the CLI: restart, kill -9, a crash mid-request,
// SIGTERM draining, and two processes sharing one SQLite file.
import { afterAll, afterEach, beforeAll, describe, expect, test } from 'vitest'
import { join } from 'node:path'
import { writeFileSync, rmSync, existsSync } from 'node:fs'
import { startUpstream, type Upstream } from './helpers/upstream.js'
import { tempDir, freePort, spawnGateway, ledgerConfig, type ChildGateway } from './helpers/gateway.js'
import { expectProblem, post, send, metrics, metric } from './helpers/http.js'
import { sleep } from './helpers/wait.js'

let up: Upstream
const started: ChildGateway[] = []
const dirs: string[] = []
beforeAll(async () => { up = await startUpstream() })
afterEach(async () => { for (const g of started.splice(0)) if (g.child.exitCode === null) await g.stop('SIGKILL') })
afterAll(async () => { await up?.close(); for (const d of dirs) rmSync(d, { recursive: true, force: true }) })

/** A config file on a shared SQLite file in `dir`; returns its path and ports. */
async function configIn(dir: string, name: string, lease = '1s') {
  const port = await freePort(), admin = await freePort()
  const file = join(dir, `${name}.yaml`)
  writeFileSync(file, ledgerConfig({ port, admin, upstream: up.url, lease, timeout: lease, store: { kind: 'sqlite', path: './shared.db' }, more: { shutdown: { grace: '5s' } } }))
  return { file, port, admin, log: join(dir, `${name}.log`) }
}

async function gateway(dir: string, name: string, lease?: string) {
  const c = await configIn(dir, name, lease)
  const start = async () => { const g = await spawnGateway(c.file, c.port, c.admin, c.log); started.push(g); return g }
  return { ...c, start }
}

const write = (g: ChildGateway, res: string, token: string, key: string, path = 'charge') =>
  post(`${g.url}/ledger/${res}/${path}`, { res }, { 'fencing-token': token, 'idempotency-key': key })

describe('durability with the sqlite store', () => {
  test('a high-water mark and a completed record survive a graceful restart', async () => {
    const dir = tempDir(); dirs.push(dir)
    const gw = await gateway(dir, 'a')
    let g = await gw.start()
    const first = await write(g, 'r', '5', 'k1')
    expect(first.status).toBe(201)
    // store.path ./shared.db is relative to the config file's folder, not to the working directory
    expect(existsSync(join(dir, 'shared.db'))).toBe(true)
    expect(existsSync(join(process.cwd(), 'shared.db'))).toBe(false)
    expect(await g.stop()).toBe(0)
    g = await gw.start()
    expectProblem(await write(g, 'r', '4', 'k2'), { status: 412, type: 'stale-fencing-token' })
    const replay = await write(g, 'r', '5', 'k1')
    expect(replay.headers['idempotent-replayed']).toBe('true')
    expect(replay.body.equals(first.body)).toBe(true)
  })

  test('they survive kill -9 right after the 201', async () => {
    const dir = tempDir(); dirs.push(dir)
    const gw = await gateway(dir, 'a')
    let g = await gw.start()
    const first = await write(g, 'r', '9', 'k1')
    expect(first.status).toBe(201)
    await g.stop('SIGKILL')
    g = await gw.start()
    expectProblem(await write(g, 'r', '8', 'k2'), { status: 412, type: 'stale-fencing-token', members: { highestToken: '9' } })
    expect((await write(g, 'r', '9', 'k1')).body.equals(first.body)).toBe(true)
  })

  test('a gateway killed mid-request leaves an in-flight record: 409 in flight during its lease, then outcome unknown (crash)', async () => {
    const dir = tempDir(); dirs.push(dir)
    // a lease long enough that the restart surely happens within it, even on a loaded machine
    const gw = await gateway(dir, 'a', '4s')
    let g = await gw.start()
    const hung = write(g, 'r', '1', 'crash-key', 'apply-then-hang').catch(() => 'gone')
    await sleep(200)
    const claimedAt = Date.now() - 200
    const effects = up.count('/ledger/r/apply-then-hang')
    expect(effects).toBe(1)
    await g.stop('SIGKILL')
    expect(await hung).toBe('gone')
    g = await gw.start()
    const during = await write(g, 'r', '1', 'crash-key', 'apply-then-hang')
    expect(Date.now() - claimedAt).toBeLessThan(4000)
    expectProblem(during, { status: 409, type: 'request-in-flight' })
    await sleep(Math.max(0, claimedAt + 4100 - Date.now())) // the lease ends
    const after = await write(g, 'r', '1', 'crash-key', 'apply-then-hang')
    expectProblem(after, { status: 409, type: 'outcome-unknown', members: { reason: 'crash' } })
    expect(up.count('/ledger/r/apply-then-hang')).toBe(effects)
    expect(metric(await metrics(g.adminUrl), 'fencegate_unknown_outcomes_total', { route: 'ledger', reason: 'crash' })).toBe(1)
  })

  test('SIGTERM lets a request in flight finish, refuses new connections, and exits 0', async () => {
    const dir = tempDir(); dirs.push(dir)
    const gw = await gateway(dir, 'a')
    const g = await gw.start()
    const slow = write(g, 'r', '1', 'slow-key', 'slow?ms=600')
    await sleep(150)
    const exit = g.stop('SIGTERM')
    await sleep(100)
    await expect(send(`${g.url}/ledger/r/x`)).rejects.toThrow()
    expect((await slow).status).toBe(200)
    expect(await exit).toBe(0)
  })
})

describe('two gateway processes sharing one SQLite file', () => {
  let a: ChildGateway, b: ChildGateway
  beforeAll(async () => {
    const dir = tempDir(); dirs.push(dir)
    a = await (await gateway(dir, 'a')).start()
    b = await (await gateway(dir, 'b')).start()
    started.length = 0 // these two live for the whole describe
  })
  afterAll(async () => { await a?.stop(); await b?.stop() })

  test('a stale token sent to B after a newer one passed A is rejected', async () => {
    expect((await write(a, 'shared', '6', 'ka')).status).toBe(201)
    expectProblem(await write(b, 'shared', '5', 'kb'), { status: 412, type: 'stale-fencing-token', members: { highestToken: '6' } })
  })

  test('a key completed on A replays on B', async () => {
    const first = await write(a, 'shared2', '1', 'k-ab')
    const again = await write(b, 'shared2', '1', 'k-ab')
    expect(again.headers['idempotent-replayed']).toBe('true')
    expect(again.body.equals(first.body)).toBe(true)
  })

  test('50 concurrent same-key requests split across both reach the upstream once', async () => {
    const before = up.count('/ledger/race/charge')
    const replies = await Promise.all(Array.from({ length: 50 }, (_, i) => write(i % 2 ? a : b, 'race', '1', 'one-key')))
    expect(up.count('/ledger/race/charge')).toBe(before + 1)
    expect(replies.filter((r) => r.status === 201 && !r.headers['idempotent-replayed'])).toHaveLength(1)
  })

  test('50 concurrent shuffled tokens split across both: the mark ends at the maximum', async () => {
    const tokens = Array.from({ length: 50 }, (_, i) => i + 1).sort(() => Math.random() - 0.5)
    const replies = await Promise.all(tokens.map((t, i) => write(i % 2 ? a : b, 'race2', String(t), `t${t}`).then((r) => ({ t, r }))))
    for (const { t, r } of replies) {
      if (r.status === 412) expect(Number(r.json().highestToken)).toBeGreaterThan(t)
      else expect(r.status).toBe(201)
    }
    expect((await write(b, 'race2', '49', 'after')).json().highestToken).toBe('50')
  })
})
