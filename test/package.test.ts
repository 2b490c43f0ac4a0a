// Issue 15 §6: a clean package. `npm pack` ships the gateway (dist/src, the sample service for
// --with-sample), config, dashboards, docs, README and LICENSE, and nothing else (no bench, no
// other examples, no source maps of sources it does not ship); installed from the tarball in an
// empty folder, `npx fencegate --config PATH` starts and proxies.
//
// The install takes the registry's packages from npm's cache when it has them (--prefer-offline)
// and skips install scripts: better-sqlite3's would compile its addon from source (no prebuilt
// binary is reachable from here), a minute of C++; the addon this checkout built, for the same
// version and Node, is copied in instead.
import { spawn } from 'node:child_process'
import { copyFileSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { join, resolve } from 'node:path'
import { afterAll, expect, test } from 'vitest'
import { freePort, tempDir } from './helpers/gateway.js'
import { post, send } from './helpers/http.js'
import { until } from './helpers/wait.js'
import { output } from './helpers/run.js'

const ROOT = resolve(import.meta.dirname, '..')
const dir = tempDir('fg-pack-')
afterAll(() => rmSync(dir, { recursive: true, force: true }))

const run = (cmd: string, args: string[], cwd: string) => output(cmd, args, { cwd, timeout: 45_000 })
const npm = (args: string[], cwd: string) => run('npm', args, cwd)

test('npm pack ships what the gateway runs; installed in an empty folder, npx fencegate --config starts and proxies', async () => {
  const root = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8'))
  expect(root.license).toBe('Apache-2.0')
  expect(readFileSync(join(ROOT, 'LICENSE'), 'utf8')).toContain('Apache License\n                           Version 2.0, January 2004')
  expect(root.dependencies.bullmq).toBeUndefined() // an example's dependency, not the gateway's
  for (const k of ['repository', 'homepage', 'bugs']) expect(root[k], k).toBeDefined()
  expect(root.scripts.prepack).toBeDefined()

  // dist/ is built by `npm test`'s pretest: pack it as it is
  const [packed] = JSON.parse(await npm(['pack', '--ignore-scripts', '--json', '--pack-destination', dir], ROOT))
  const files: string[] = packed.files.map((f: { path: string }) => f.path)
  for (const f of ['dist/src/cli.js', 'dist/src/server.js', 'dist/examples/payments/server.js', 'LICENSE', 'README.md', 'docs/CONTRACT.md', 'config/example.yaml']) expect(files, f).toContain(f)
  expect(files.filter((f) => f.endsWith('.map') || f.startsWith('bench/') || f.startsWith('dist/bench/') || f.startsWith('dist/scripts/') || f.startsWith('src/') || f.startsWith('test/') || f.includes('tsbuildinfo'))).toEqual([])
  expect(files.filter((f) => f.startsWith('dist/examples/') && !f.startsWith('dist/examples/payments/') && f !== 'dist/examples/is-main.js')).toEqual([])

  const app = join(dir, 'app')
  mkdirSync(app)
  writeFileSync(join(app, 'package.json'), '{ "name": "fg-pack-test", "private": true }\n')
  await npm(['install', '--prefer-offline', '--no-audit', '--no-fund', '--ignore-scripts', join(dir, packed.filename)], app)
  const installed = JSON.parse(readFileSync(join(app, 'node_modules/better-sqlite3/package.json'), 'utf8')).version
  expect(installed).toBe(JSON.parse(readFileSync(join(ROOT, 'node_modules/better-sqlite3/package.json'), 'utf8')).version)
  mkdirSync(join(app, 'node_modules/better-sqlite3/build/Release'), { recursive: true })
  copyFileSync(join(ROOT, 'node_modules/better-sqlite3/build/Release/better_sqlite3.node'), join(app, 'node_modules/better-sqlite3/build/Release/better_sqlite3.node'))
  // no runtime dependency is missing: only what the package declares is installed
  expect(await run('npx', ['--no-install', 'fencegate', '-v'], app)).toBe(`fencegate ${root.version}\n`)

  const [port, admin, sample] = [await freePort(), await freePort(), await freePort()]
  writeFileSync(join(app, 'fencegate.yaml'), `listen: 127.0.0.1:${port}
admin:
  listen: 127.0.0.1:${admin}
store:
  kind: sqlite
  path: ./data/fencegate.db
routes:
  - name: payments
    match:
      path: /accounts/:account/*
    upstream:
      url: http://127.0.0.1:${sample}
    fencing:
      resource: "account:{param.account}"
    idempotency:
      required: true
`)
  expect(await run('npx', ['--no-install', 'fencegate', 'check-config', '--config', 'fencegate.yaml'], app)).toContain('ok (1 route)')
  // its own process group: npx does not pass SIGTERM on to the gateway it starts, the group does
  const gw = spawn('npx', ['--no-install', 'fencegate', '--config', 'fencegate.yaml', '--with-sample', 'node_modules/fencegate/dist/examples/payments/server.js'], { cwd: app, stdio: ['ignore', 'pipe', 'pipe'], detached: true })
  let out = ''
  gw.stdout.on('data', (d) => { out += d })
  gw.stderr.on('data', (d) => { out += d })
  try {
    const state = await until(async () => {
      if (gw.exitCode !== null) return 'exited'
      return (await send(`http://127.0.0.1:${admin}/readyz`)).status === 200 && 'ready'
    }, { timeoutMs: 15_000, intervalMs: 100, message: () => `the installed gateway's /readyz to answer 200; its output: ${out}` })
    if (state === 'exited') throw new Error(`the installed gateway did not start: ${out}`)
    const charge = await post(`http://127.0.0.1:${port}/accounts/acct-1/charges`, { amount: 5, currency: 'eur' }, { 'fencing-token': '1', 'idempotency-key': 'k-1' })
    expect(charge.status).toBe(201)
    expect(charge.json()).toMatchObject({ account: 'acct-1', amount: 5, fencingToken: '1' })
    const stale = await post(`http://127.0.0.1:${port}/accounts/acct-1/charges`, { amount: 5, currency: 'eur' }, { 'fencing-token': '0', 'idempotency-key': 'k-2' })
    expect(stale.status).toBe(412)
  } finally {
    const exited = new Promise((r) => gw.once('exit', r))
    try { process.kill(-gw.pid!, 'SIGTERM') } catch { /* the group is gone already */ }
    await exited
    // the gateway itself (npx's child) is gone too, not left running on the machine
    await until(() => { try { process.kill(-gw.pid!, 0); return false } catch { return true } }, { timeoutMs: 10_000, intervalMs: 100, message: 'the installed gateway to stop on SIGTERM' })
  }
}, 60_000)
