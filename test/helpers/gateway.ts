/**
 * A real gateway for tests: in this process (real sockets, real store), or as a child process
 * through the CLI (for restart, kill -9 and several-process tests).
 *
 * Configs are built from objects shaped like the config file (contract §2, src/config/schema.ts):
 *
 * ```ts
 * // an upstream and a gateway for the file's tests, both stopped after them
 * const { up, gw } = withGateway((up) => ({
 *   routes: [{ name: 'pay', path: '/accounts/:account/*', upstream: up.url,
 *     fencing: { resource: 'account:{param.account}' }, idempotency: { required: true } }],
 * }))
 * // or by hand: YAML text for a file, or a gateway started from the object
 * writeFileSync(file, gatewayConfig({ listen: `127.0.0.1:${port}`, store: { kind: 'sqlite', path: './fg.db' }, routes }))
 * const other = await startTestGateway({ store: { kind: 'sqlite', path: '@DIR@/fg.db' }, routes })
 * ```
 */
import { mkdtempSync, writeFileSync, rmSync, openSync, closeSync, readFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import net from 'node:net'
import { spawn, type ChildProcess } from 'node:child_process'
import { afterAll, beforeAll } from 'vitest'
import { Document, isScalar, visit } from 'yaml'
import type { z } from 'zod'
import { request } from 'undici'
import { parseConfig } from '../../src/config/load.js'
import type { configSchema } from '../../src/config/schema.js'
import { startGateway, type Running } from '../../src/server.js'
import { createLogger } from '../../src/log.js'
import { startUpstream, type Upstream } from './upstream.js'
import { until } from './wait.js'

export const CLI = resolve(import.meta.dirname, '../../dist/src/cli.js')

export interface TestGateway extends Running {
  dir: string
  /** collected log lines */
  logs: string[]
}

export const tempDir = (prefix = 'fg-test-') => mkdtempSync(join(tmpdir(), prefix))

const listenable = (port: number) => new Promise<boolean>((ok) => {
  const s = net.createServer()
  s.on('error', () => ok(false))
  s.listen(port, '127.0.0.1', () => s.close(() => ok(true)))
})

// Ports for listeners a test names in a config before it starts them. Taken below the kernel's
// ephemeral range (32768–60999 here), in a slice of their own per vitest worker: a port the kernel
// hands out for listen(0) or an outgoing connection, or one another test file found free a moment
// ago, is never one of these, so a gateway started later on its port cannot find it taken.
const SLICE = 1500
const pool = Number(process.env.VITEST_POOL_ID ?? process.pid) % 8
let next = 20_000 + pool * SLICE
const end = next + SLICE

/** A port nothing listens on now, from this worker's own slice; never one this test file was given before. */
export async function freePort(): Promise<number> {
  while (next < end) {
    const p = next++
    if (await listenable(p)) return p
  }
  throw new Error(`no free port left in ${end - SLICE}-${end - 1}`)
}

/**
 * An http URL where nothing listens: connecting is refused. On 127.0.0.3, not 127.0.0.1: a port
 * found free on 127.0.0.1 can be taken a moment later by another test file's listener (they run
 * in parallel), which would then answer instead of refusing. Nothing here binds 127.0.0.3.
 */
export const refusedUrl = async (): Promise<string> => `http://127.0.0.3:${await freePort()}`

// ------------------------------------------------------------------------------ configs

/** The config file as YAML holds it (zod's input side of src/config/schema.ts): durations as text ('2s'), sizes as text or bytes. */
export type ConfigInput = z.input<typeof configSchema>
export type RouteInput = ConfigInput['routes'][number]
export type StoreInput = NonNullable<ConfigInput['store']>

/**
 * A route of a test config: the file's keys (`name`, `fencing`, `idempotency`,
 * `maxRequestBytes`), with `match` and `upstream` shortened — `path` and `methods` are
 * `match`'s, and `upstream` is a URL (timeout 2s) or the whole block (timeout 2s unless set).
 */
export interface RouteSpec extends Omit<RouteInput, 'match' | 'upstream'> {
  /** match.path, a Hono pattern: "/accounts/:account/*" */
  path: string
  /** match.methods; default: every method */
  methods?: string[]
  /** the upstream's URL, or the upstream block ({ url, timeout, connectTimeout, connections }) */
  upstream: string | RouteInput['upstream']
}

/** A test config: the file's top-level keys, `routes` as RouteSpecs. `store` defaults to memory. */
export interface GatewaySpec extends Omit<ConfigInput, 'routes'> {
  routes: RouteSpec[]
}

/** The tests' upstream timeout, unless a route sets its own. */
const TEST_UPSTREAM_TIMEOUT = '2s'

/** A RouteSpec as the config file writes it. */
export function routeInput({ path, methods, upstream, ...rest }: RouteSpec): RouteInput {
  const { name, ...more } = rest
  return {
    name,
    match: { path, ...(methods ? { methods } : {}) },
    upstream: typeof upstream === 'string' ? { url: upstream, timeout: TEST_UPSTREAM_TIMEOUT } : { ...upstream, timeout: upstream.timeout ?? TEST_UPSTREAM_TIMEOUT },
    ...more,
  }
}

/**
 * The YAML text of a config (contract §2). `listen` and `admin.listen` default to 127.0.0.1:0
 * (a free port each), `store` to the memory store. A value holding @DIR@ (a store path) gets the
 * gateway's temp folder from startTestGateway; a file for the CLI names real paths instead.
 */
export function gatewayConfig(spec: GatewaySpec): string {
  const { listen = '127.0.0.1:0', admin = {}, store = { kind: 'memory' }, routes, ...rest } = spec
  const doc = new Document({ listen, admin: { listen: '127.0.0.1:0', ...admin }, store, ...rest, routes: routes.map(routeInput) }, { aliasDuplicateObjects: false })
  // lists of plain values on one line, as people write them: methods: [POST, PUT]
  visit(doc, { Seq: (_, seq) => { seq.flow = seq.items.every(isScalar) } })
  return doc.toString({ lineWidth: 0, flowCollectionPadding: false })
}

// ------------------------------------------------------------------------ in-process

/**
 * Starts a gateway in-process from a config object (see gatewayConfig) or YAML text. @DIR@ in
 * the config is replaced by a fresh temp folder (removed by `close()`); in text, `listen` and
 * `admin.listen` default to free ports when it does not set them.
 */
export async function startTestGateway(spec: string | GatewaySpec): Promise<TestGateway> {
  const dir = tempDir()
  let text = (typeof spec === 'string' ? spec : gatewayConfig(spec)).replaceAll('@DIR@', dir)
  if (!/^listen:/m.test(text)) text = `listen: 127.0.0.1:0\n${text}`
  if (!/^admin:/m.test(text)) text = `admin:\n  listen: 127.0.0.1:0\n${text}`
  const config = parseConfig(text, join(dir, 'fencegate.yaml'))
  const logs: string[] = []
  // one entry per line: the access log writes the lines of one event-loop turn together
  const log = createLogger({ write: (s: string) => { for (const l of s.split('\n')) if (l) logs.push(`${l}\n`); return true } } as unknown as NodeJS.WritableStream)
  const running = await startGateway(config, log)
  return {
    ...running,
    dir,
    logs,
    close: async () => { await running.close(); rmSync(dir, { recursive: true, force: true }) },
  }
}

/**
 * The handles withGateway gives: usable inside tests and hooks that run after its beforeAll
 * (using them earlier throws, saying so).
 */
export interface GatewayHandles {
  /** the recording upstream (./upstream.ts) the routes point at */
  up: Upstream
  gw: TestGateway
}

/**
 * For the tests of the enclosing file or describe block: a recording upstream and an in-process
 * gateway, started in a beforeAll and closed in an afterAll. `spec` gets the upstream, to point
 * routes at `up.url` (it may be async, e.g. to take a free port for an upstream that is down).
 *
 * ```ts
 * const { up, gw } = withGateway((up) => ({ routes: [{ name: 'plain', path: '/plain/*', upstream: up.url }] }))
 * test('...', async () => { await send(`${gw.url}/plain/x`); expect(up.count('/plain/')).toBe(1) })
 * ```
 */
export function withGateway(spec: (up: Upstream) => GatewaySpec | string | Promise<GatewaySpec | string>): GatewayHandles {
  let up: Upstream | undefined
  let gw: TestGateway | undefined
  beforeAll(async () => {
    up = await startUpstream()
    gw = await startTestGateway(await spec(up))
  })
  afterAll(async () => {
    await gw?.close()
    await up?.close()
  })
  return { up: late('withGateway\'s upstream', () => up), gw: late('withGateway\'s gateway', () => gw) }
}

/** A stand-in for an object made later (in a beforeAll): reads go to the object once it exists. */
function late<T extends object>(what: string, get: () => T | undefined): T {
  const target = (): T => {
    const t = get()
    if (!t) throw new Error(`${what} is not started: use it in a test or a hook that runs after withGateway's beforeAll`)
    return t
  }
  return new Proxy({} as T, {
    get: (_, prop) => {
      const t = target()
      const v = Reflect.get(t, prop, t) as unknown
      return typeof v === 'function' ? v.bind(t) : v
    },
    has: (_, prop) => Reflect.has(target(), prop),
    ownKeys: () => Reflect.ownKeys(target()),
    getOwnPropertyDescriptor: (_, prop) => {
      const d = Reflect.getOwnPropertyDescriptor(target(), prop)
      return d && { ...d, configurable: true }
    },
  })
}

/** @deprecated A route block as YAML text: write the route as an object (RouteSpec) for gatewayConfig instead. */
export function route(name: string, path: string, upstream: string, extra = ''): string {
  return `  - name: ${name}
    match:
      path: "${path}"
    upstream:
      url: ${upstream}
      timeout: 2s
${extra}`
}

export interface ChildGateway {
  url: string
  adminUrl: string
  child: ChildProcess
  log: () => string
  stop(signal?: NodeJS.Signals): Promise<number | null>
}

/** Starts the CLI as a child process with the config file given; resolves once /readyz is 200. */
export async function spawnGateway(configPath: string, port: number, adminPort: number, logPath: string, args: string[] = [], launch: { prefix?: string[]; env?: NodeJS.ProcessEnv; nodeArgs?: string[] } = {}): Promise<ChildGateway> {
  const fd = openSync(logPath, 'a')
  // `launch.prefix`: a command the gateway runs under; `stop` signals that command, so it must exec
  // the gateway rather than fork it (the `faketime` command forks: use ./faketime.ts instead)
  const [command, ...before] = [...(launch.prefix ?? []), process.execPath]
  // `launch.nodeArgs`: node's own options (V8 flags), given before the script as the image does
  const child = spawn(command, [...before, ...(launch.nodeArgs ?? []), CLI, '--config', configPath, ...args], { stdio: ['ignore', fd, fd], env: launch.env ? { ...process.env, ...launch.env } : undefined })
  closeSync(fd)
  const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)))
  const adminUrl = `http://127.0.0.1:${adminPort}`
  const state = await until(async () => {
    if (child.exitCode !== null) return 'exited'
    const r = await request(`${adminUrl}/readyz`)
    await r.body.dump()
    return r.statusCode === 200 && 'ready'
  }, { timeoutMs: 15_000, intervalMs: 50, message: () => `the gateway's /readyz to answer 200; its log: ${readFileSync(logPath, 'utf8')}` })
    .catch((e: unknown) => { child.kill('SIGKILL'); throw e })
  if (state === 'exited') throw new Error(`gateway exited ${child.exitCode}: ${readFileSync(logPath, 'utf8')}`)
  return {
    url: `http://127.0.0.1:${port}`,
    adminUrl,
    child,
    log: () => readFileSync(logPath, 'utf8'),
    stop: async (signal = 'SIGTERM') => { child.kill(signal); return exited },
  }
}

export { writeFileSync }

/**
 * The config the child-process tests share: listening on `port` and `admin`, one fenced,
 * idempotent route `ledger` on `/ledger/:res/*` in front of `upstream` (upstream timeout
 * `timeout`, default 5s; idempotency lease `lease`, default 30s). `more` adds top-level keys
 * (e.g. `shutdown`).
 */
export function ledgerConfig(o: { port: number; admin: number; store: StoreInput; upstream: string; lease?: string; timeout?: string; more?: Omit<Partial<GatewaySpec>, 'routes'> }): string {
  return gatewayConfig({
    listen: `127.0.0.1:${o.port}`,
    admin: { listen: `127.0.0.1:${o.admin}` },
    store: o.store,
    ...o.more,
    routes: [{
      name: 'ledger',
      path: '/ledger/:res/*',
      upstream: { url: o.upstream, timeout: o.timeout ?? '5s' },
      fencing: { resource: '{param.res}' },
      idempotency: { required: true, lease: o.lease ?? '30s' },
    }],
  })
}
