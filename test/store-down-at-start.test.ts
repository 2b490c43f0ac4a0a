// Issue 15 §3, contract §2: a store that is unreachable at start-up is not a config mistake.
// The gateway listens; /readyz answers 503; routes with fencing or idempotency answer 503
// store-unavailable and forward nothing; plain routes serve; once the store answers (here: a
// redis-server started on the configured port afterwards) it connects by itself, logged.
import { spawn, type ChildProcess } from 'node:child_process'
import { openSync, closeSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { afterAll, expect, test } from 'vitest'
import { CLI, freePort, gatewayConfig, tempDir } from './helpers/gateway.js'
import { startUpstream, type Upstream } from './helpers/upstream.js'
import { expectProblem, post, send } from './helpers/http.js'
import { until } from './helpers/wait.js'

const dir = tempDir('fg-storedown-')
const procs: ChildProcess[] = []
let up: Upstream | undefined
afterAll(async () => {
  for (const p of procs) if (p.exitCode === null) p.kill('SIGKILL')
  await up?.close()
  rmSync(dir, { recursive: true, force: true })
})

test('redis down at start-up: the gateway serves plain routes, fails closed on guarded ones, and connects once redis is up', async () => {
  up = await startUpstream()
  const [port, admin, redisPort] = [await freePort(), await freePort(), await freePort()]
  const file = join(dir, 'fencegate.yaml')
  writeFileSync(file, gatewayConfig({
    listen: `127.0.0.1:${port}`,
    admin: { listen: `127.0.0.1:${admin}` },
    // nothing listens on redisPort yet
    store: { kind: 'redis', url: `redis://127.0.0.1:${redisPort}`, keyPrefix: 'fg-storedown', timeout: '300ms' },
    routes: [
      { name: 'ledger', path: '/ledger/:res/*', upstream: up.url, fencing: { resource: '{param.res}' }, idempotency: { required: true } },
      { name: 'plain', path: '/plain/*', upstream: up.url },
    ],
  }))
  const logPath = join(dir, 'gateway.log')
  const fd = openSync(logPath, 'a')
  const gw = spawn(process.execPath, [CLI, '--config', file], { stdio: ['ignore', fd, fd] })
  closeSync(fd)
  procs.push(gw)
  const base = `http://127.0.0.1:${port}`
  const adminUrl = `http://127.0.0.1:${admin}`
  const log = () => readFileSync(logPath, 'utf8')

  // it starts and listens, though the store does not answer
  await until(async () => (await send(`${adminUrl}/healthz`)).status === 200, { timeoutMs: 10_000, intervalMs: 50, message: () => `/healthz to answer 200; the gateway's log: ${log()}` })
  expect(gw.exitCode).toBe(null)
  const ready = await send(`${adminUrl}/readyz`)
  expect(ready.status).toBe(503)
  expect(ready.json()).toMatchObject({ status: 'store unavailable', store: 'redis' })
  const guarded = await post(`${base}/ledger/a/charge`, { amount: 1 }, { 'fencing-token': '1', 'idempotency-key': 'k1' })
  expectProblem(guarded, { status: 503, type: 'store-unavailable', members: { error: { type: 'api_error' } } })
  expect(up.count('/ledger/')).toBe(0)
  const plain = await post(`${base}/plain/ping`, {})
  expect(plain.status).toBe(201)
  expect(log()).toContain('store unreachable; the gateway serves without it')

  // the store comes up: the gateway connects by itself (backoff of at most 5 s)
  const redis = spawn('redis-server', ['--port', String(redisPort), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], { stdio: 'ignore' })
  procs.push(redis)
  await until(async () => (await send(`${adminUrl}/readyz`)).status === 200, { timeoutMs: 15_000, intervalMs: 50, message: () => `/readyz to answer 200 once redis is up; the gateway's log: ${log()}` })
  expect(log()).toContain('"msg":"store connected"')
  const after = await post(`${base}/ledger/a/charge`, { amount: 1 }, { 'fencing-token': '1', 'idempotency-key': 'k1' })
  expect(after.status).toBe(201)
  expect(up.count('/ledger/')).toBe(1)
  // the store's epoch was read on first contact: no state loss reported
  expect(log()).not.toContain('store lost its state')

  gw.kill('SIGTERM')
  expect(await new Promise((r) => gw.once('exit', r))).toBe(0)
  redis.kill('SIGTERM')
}, 40_000)
