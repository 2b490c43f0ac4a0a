// config/example.yaml says it holds every config key with its default: held to the schema
// (src/config/schema.ts), walked key by key. And the warnings of check-config and doctor
// (src/config/warnings.ts): a valid config that does not do what its reader expects.
import { spawn } from 'node:child_process'
import { readFileSync, rmSync, writeFileSync } from 'node:fs'
import { join, resolve } from 'node:path'
import { afterAll, describe, expect, test } from 'vitest'
import { isMap, isScalar, isSeq, LineCounter, parseDocument, type Node } from 'yaml'
import { Redis } from 'ioredis'
import { configSchema } from '../src/config/schema.js'
import { parseConfig } from '../src/config/load.js'
import { schemaKeys } from './helpers/schema-keys.js'
import { freePort, gatewayConfig, tempDir, type GatewaySpec } from './helpers/gateway.js'
import { runCli } from './helpers/run.js'
import { until } from './helpers/wait.js'

const EXAMPLE = resolve(import.meta.dirname, '../config/example.yaml')
const shipped = readFileSync(EXAMPLE, 'utf8')
/** The example with its "#: " keys (off unless set) switched on. */
const everything = shipped.replace(/^#: /gm, '')

/** Every key path in a YAML text with the line it is on: `routes[].fencing.resource` → line. */
function yamlKeys(text: string): Map<string, string> {
  const lines = new LineCounter()
  const doc = parseDocument(text, { lineCounter: lines })
  const source = text.split('\n')
  const out = new Map<string, string>()
  const walk = (node: Node | null | undefined, prefix: string) => {
    if (isSeq(node)) for (const item of node.items) walk(item as Node, `${prefix}[]`)
    if (!isMap(node)) return
    for (const pair of node.items) {
      const key = isScalar(pair.key) ? String(pair.key.value) : ''
      const path = prefix ? `${prefix}.${key}` : key
      const at = (pair.key as Node).range?.[0] ?? 0
      out.set(path, source[lines.linePos(at).line - 1])
      walk(pair.value as Node, path)
    }
  }
  walk(doc.contents as Node, '')
  return out
}

describe('config/example.yaml', () => {
  const keys = yamlKeys(everything)
  const accepted = schemaKeys(configSchema)

  test('holds every key the schema accepts, and no other', () => {
    expect(accepted.filter((k) => !keys.has(k))).toEqual([])
    // settle.probe.headers is a map of header names: its entries are not keys of the schema
    expect([...keys.keys()].filter((k) => !accepted.includes(k) && !k.startsWith('routes[].idempotency.settle.probe.headers.'))).toEqual([])
  })

  test('each key that takes a value has a comment on its line', () => {
    const parents = new Set(accepted.map((k) => k.replace(/(\[\])?\.[^.]+$/, '')))
    const leaves = accepted.filter((k) => !parents.has(k))
    expect(leaves.filter((k) => !/\s#\s/.test(keys.get(k) ?? ''))).toEqual([])
  })

  test('as shipped it is a valid config whose values are the defaults, where there is one', async () => {
    const r = await runCli(['check-config', '--config', EXAMPLE], { env: { ...process.env, FENCEGATE_ADMIN_TOKEN: '', FENCEGATE_ADMIN_WRITE_TOKEN: '' } })
    expect(r.stderr).toBe('')
    expect(r.status).toBe(0)
    const example = parseConfig(shipped, EXAMPLE, {})
    // the same route with only its required keys: what the schema fills in
    const bare = parseConfig(gatewayConfig({ routes: [{ name: 'payments', path: '/accounts/:account/*', upstream: { url: 'http://127.0.0.1:9090' }, fencing: { resource: 'account:{param.account}' }, idempotency: {} }] }), EXAMPLE, {})
    bare.routes[0].upstream.timeout = 10_000 // the test helper's 2s, not the schema's
    const at = (o: unknown, path: string) => path.replace('[]', '.0').split('.').reduce<unknown>((v, k) => (v as Record<string, unknown> | undefined)?.[k], o)
    const differ = accepted.filter((k) => {
      const want = at(bare, k)
      // no default (or a block): the example shows a value of its own
      if (want === undefined || (typeof want === 'object' && !Array.isArray(want)) || (Array.isArray(want) && want.some((x) => typeof x === 'object'))) return false
      return JSON.stringify(at(example, k)) !== JSON.stringify(want)
    })
    // the bare config's own listeners, store and route are the test's choice, not defaults
    expect(differ.filter((k) => !['listen', 'admin.listen', 'store.kind', 'store.path'].includes(k))).toEqual([])
  })
})

describe('warnings: exit 0, one line naming the YAML path', () => {
  const dir = tempDir('fg-warn-')
  afterAll(() => rmSync(dir, { recursive: true, force: true }))
  const file = (name: string, spec: GatewaySpec) => { const f = join(dir, `${name}.yaml`); writeFileSync(f, gatewayConfig(spec)); return f }

  test('idempotency.required on a route matching writes its idempotency.methods leave out', async () => {
    const f = file('methods', { routes: [{ name: 'pay', path: '/pay/*', methods: ['POST', 'PUT', 'PATCH', 'DELETE'], upstream: 'http://127.0.0.1:9', idempotency: { required: true } }] })
    const r = await runCli(['check-config', '--config', f])
    expect(r.status).toBe(0)
    expect(r.stdout).toContain('ok (1 route)')
    const lines = r.stderr.trim().split('\n')
    expect(lines).toHaveLength(1)
    expect(lines[0]).toMatch(/^\S+methods\.yaml: routes\[0\]\.idempotency\.methods: warning: .*PUT, DELETE.*pass without a key/)
    const json = await runCli(['check-config', '--config', f, '--json'])
    expect(JSON.parse(json.stdout).warnings).toEqual([expect.objectContaining({ path: 'routes[0].idempotency.methods' })])
  })

  test('no warning when the methods are said, or when the route does not require a key', async () => {
    const said = file('said', { routes: [{ name: 'pay', path: '/pay/*', methods: ['POST', 'PUT', 'DELETE'], upstream: 'http://127.0.0.1:9', idempotency: { required: true, methods: ['POST', 'PUT', 'DELETE'] } }] })
    const optional = file('optional', { routes: [{ name: 'pay', path: '/pay/*', upstream: 'http://127.0.0.1:9', idempotency: {} }] })
    for (const f of [said, optional]) {
      const r = await runCli(['check-config', '--config', f])
      expect(r.stderr).toBe('')
      expect(r.status).toBe(0)
    }
  })

  test('the shipped configs say which methods they mean: no warning', async () => {
    for (const name of ['fencegate.yaml', 'docker.yaml']) {
      const r = await runCli(['check-config', '--config', resolve(import.meta.dirname, '../config', name)])
      expect(r.stderr, name).toBe('')
      expect(r.status, name).toBe(0)
    }
  })

  test('store.sentinels with store.replicas: 0, in check-config and in doctor against a real Sentinel', async () => {
    const [primary, sentinel] = [await freePort(), await freePort()]
    const children = [spawn('redis-server', ['--port', String(primary), '--bind', '127.0.0.1', '--save', '', '--dir', dir], { stdio: 'ignore' })]
    try {
      writeFileSync(join(dir, 'sentinel.conf'), [`port ${sentinel}`, 'bind 127.0.0.1', `dir ${dir}`, `sentinel monitor fgw 127.0.0.1 ${primary} 1`, ''].join('\n'))
      children.push(spawn('redis-server', [join(dir, 'sentinel.conf'), '--sentinel'], { stdio: 'ignore' }))
      await until(async () => {
        const r = new Redis({ port: sentinel, lazyConnect: true, retryStrategy: () => null, maxRetriesPerRequest: 0 })
        r.on('error', () => {})
        try { await r.connect(); return Array.isArray(await r.call('SENTINEL', 'GET-MASTER-ADDR-BY-NAME', 'fgw')) } catch { return false } finally { r.disconnect() }
      }, { timeoutMs: 10_000, intervalMs: 100, message: 'the Sentinel to name the primary' })
      const store = { kind: 'redis' as const, sentinels: [`127.0.0.1:${sentinel}`], sentinelName: 'fgw', keyPrefix: `fgwarn-${process.pid}` }
      const f = file('sentinel', { store, routes: [{ name: 'pay', path: '/pay/*', upstream: 'http://127.0.0.1:9', fencing: { resource: 'r' } }] })
      const want = /sentinel\.yaml: store\.replicas: warning: .*every failover will be treated as state loss: set store\.replicas: 1 with a replica that acknowledges/
      const check = await runCli(['check-config', '--config', f])
      expect(check.status).toBe(0)
      expect(check.stderr).toMatch(want)
      const doctor = await runCli(['doctor', '--config', f])
      expect(doctor.stderr).toMatch(want)
      expect(doctor.stdout).toContain('fencegate doctor: redis store')
      expect(doctor.status).toBe(0)
      // with replicas: 1 the warning is gone
      const fixed = file('sentinel-replicas', { store: { ...store, replicas: 1 }, routes: [{ name: 'pay', path: '/pay/*', upstream: 'http://127.0.0.1:9', fencing: { resource: 'r' } }] })
      expect((await runCli(['check-config', '--config', fixed])).stderr).toBe('')
    } finally {
      for (const c of children) c.kill('SIGKILL')
    }
  })
})
