// The node flags a gateway is started with (docs/deploy.md#node-runtime): the image, `npm start`
// and the systemd unit in the docs give the same ones, and node accepts them — a misspelt V8
// flag makes node exit before the gateway starts ("bad option"). What the flags do to the heap
// is measured in docs/performance.md, not here.
import { readFileSync, rmSync } from 'node:fs'
import { join, resolve } from 'node:path'
import { afterAll, beforeAll, expect, test } from 'vitest'
import { startUpstream, type Upstream } from './helpers/upstream.js'
import { freePort, ledgerConfig, spawnGateway, tempDir, writeFileSync } from './helpers/gateway.js'
import { post } from './helpers/http.js'

const ROOT = resolve(import.meta.dirname, '..')
const read = (file: string) => readFileSync(join(ROOT, file), 'utf8')
/** The options node gets before the gateway's script in one command line, split on spaces. */
const nodeFlags = (line: string) => {
  const words = line.trim().split(/\s+/)
  const node = words.findIndex((w) => /(^|\/)node$/.test(w))
  const script = words.findIndex((w) => w.endsWith('dist/src/cli.js'))
  expect(node, `node in: ${line}`).not.toBe(-1)
  expect(script, `the gateway's script after node in: ${line}`).toBeGreaterThan(node)
  return words.slice(node + 1, script)
}

const imageFlags = () => {
  const entry = /^ENTRYPOINT (\[.*\])$/m.exec(read('Dockerfile'))
  expect(entry, 'the Dockerfile has an exec-form ENTRYPOINT').not.toBeNull()
  return nodeFlags((JSON.parse(entry![1]) as string[]).join(' '))
}

let up: Upstream
const dir = tempDir('fg-node-runtime-')
beforeAll(async () => { up = await startUpstream() })
afterAll(async () => { await up?.close(); rmSync(dir, { recursive: true, force: true }) })

test('the image, npm start and the documented systemd unit start node with the same flags', () => {
  const image = imageFlags()
  expect(image).toEqual(['--max-semi-space-size=64', '--no-memory-reducer'])
  expect(nodeFlags(JSON.parse(read('package.json')).scripts.start)).toEqual(image)
  const units = [...read('docs/deploy.md').matchAll(/^ExecStart=(.*)$/gm)]
  expect(units, 'docs/deploy.md shows one systemd unit').toHaveLength(1)
  expect(nodeFlags(units[0][1])).toEqual(image)
})

test('a gateway started with the image\'s node flags serves: a write is forwarded, its retry replayed', async () => {
  const port = await freePort(), admin = await freePort()
  const file = join(dir, 'fencegate.yaml')
  writeFileSync(file, ledgerConfig({ port, admin, upstream: up.url, store: { kind: 'memory' } }))
  const g = await spawnGateway(file, port, admin, join(dir, 'gateway.log'), [], { nodeArgs: imageFlags() })
  let stopped = false
  try {
    const headers = { 'fencing-token': '3', 'idempotency-key': 'k-runtime' }
    const first = await post(`${g.url}/ledger/acct/charge`, { amount: 1 }, headers)
    expect(first.status).toBe(201)
    const again = await post(`${g.url}/ledger/acct/charge`, { amount: 1 }, headers)
    expect(again.headers['idempotent-replayed']).toBe('true')
    expect(again.body.equals(first.body)).toBe(true)
    stopped = true
    expect(await g.stop(), 'a graceful stop exits 0').toBe(0)
  } finally {
    if (!stopped) await g.stop('SIGKILL')
  }
})
