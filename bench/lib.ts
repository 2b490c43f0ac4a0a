/**
 * Helpers shared by bench/run.ts, bench/scale.ts and bench/soak.ts:
 * child processes that die with the harness, the node upstream, a fencegate gateway from a temp
 * YAML config, the `unique` request stream, /metrics parsing, CPU and memory readings from /proc.
 */
import autocannon from 'autocannon'
import { spawn, execFileSync, type ChildProcess } from 'node:child_process'
import { createInterface } from 'node:readline'
import { mkdtempSync, mkdirSync, openSync, closeSync, readFileSync, writeFileSync, renameSync, rmSync } from 'node:fs'
import { setTimeout as sleep } from 'node:timers/promises'
import net from 'node:net'
import os from 'node:os'
import { join, resolve } from 'node:path'
import { pathToFileURL } from 'node:url'
import { randomBytes } from 'node:crypto'

/** A mistake in the settings or the environment: reported by its message, without a stack. */
export class BenchError extends Error {}

export const HERE = import.meta.dirname // dist/bench
export const ROOT = resolve(HERE, '../..')
export const CLI = resolve(ROOT, 'dist/src/cli.js')
export const RESULTS = resolve(ROOT, 'bench/results')
const EXIT_WITH_PARENT = pathToFileURL(join(HERE, 'exit-with-parent.js')).href

export const REDIS_URL = process.env.BENCH_REDIS_URL ?? 'redis://127.0.0.1:6379'
export const POSTGRES_URL = process.env.BENCH_POSTGRES_URL ?? 'postgres://postgres@127.0.0.1:5432/test'
export const KEEP = process.env.BENCH_KEEP === '1'

export const BODY = '{"amount":1250,"currency":"EUR","to":"acct-target","memo":"bench"}'
export const BASE_HEADERS = { 'content-type': 'application/json' }

// ---------------------------------------------------------------------------------- settings

/** bad settings, reported by the script's main() (module-level code must not throw) */
export const settingErrors: string[] = []

export function envNumber(name: string, fallback: number, min: number): number {
  const raw = process.env[name]
  if (raw === undefined || raw === '') return fallback
  const n = Number(raw)
  if (!Number.isFinite(n) || n < min) {
    settingErrors.push(`${name} must be a number ≥ ${min}, got "${raw}"`)
    return fallback
  }
  return n
}

export type StoreKind = 'memory' | 'sqlite' | 'redis' | 'postgres'
export const STORE_KINDS: StoreKind[] = ['memory', 'sqlite', 'redis', 'postgres']
export const isStoreKind = (s: string): s is StoreKind => (STORE_KINDS as string[]).includes(s)

// ----------------------------------------------------------------------- child processes

export interface Child {
  name: string
  proc: ChildProcess
  log: string
  exited: Promise<void>
}

const children: Child[] = []
const cleanups: (() => Promise<void>)[] = []
let tmpDir: string | undefined

/** The run's temp folder (configs, logs, sqlite files), created on first use. */
export function tmp(prefix = 'fencegate-bench-'): string {
  tmpDir ??= mkdtempSync(join(os.tmpdir(), prefix))
  return tmpDir
}

export const running = (c: Child) => c.proc.exitCode === null && c.proc.signalCode === null

/** The children started and not yet stopped by `stopChild`. */
export const liveChildren = (): readonly Child[] => children

export function tail(file: string, lines = 20): string {
  try {
    return readFileSync(file, 'utf8').trimEnd().split('\n').slice(-lines).join('\n')
  } catch {
    return '(no log)'
  }
}

/**
 * Starts a child with stdin piped (node children exit when it closes, so they die with the
 * harness even on kill -9), stdout piped (to read its ready line) and stderr to a log file.
 */
export function start(name: string, cmd: string, args: string[], opts: { env?: Record<string, string> } = {}): Child {
  const log = join(tmp(), `${name}.log`)
  const fd = openSync(log, 'a')
  const proc = spawn(cmd, args, { cwd: ROOT, stdio: ['pipe', 'pipe', fd], env: { ...process.env, ...opts.env } })
  closeSync(fd)
  proc.stdin!.on('error', () => {}) // EPIPE once it exited
  const exited = new Promise<void>((r) => proc.once('exit', () => r()))
  proc.once('error', () => {}) // reported through waitLine / exitCode
  const child = { name, proc, log, exited }
  children.push(child)
  return child
}

/** Resolves with the first capture of `re` in the child's stdout; rejects when it exits first. */
export function waitLine(child: Child, re: RegExp, timeoutMs = 30_000): Promise<string> {
  return new Promise((ok, fail) => {
    const rl = createInterface({ input: child.proc.stdout! })
    const done = (err?: Error, value?: string) => {
      clearTimeout(timer)
      rl.off('line', onLine)
      child.proc.off('exit', onExit)
      child.proc.off('error', onError)
      child.proc.stdout!.resume() // keep draining whatever else it prints
      if (err) fail(err)
      else ok(value!)
    }
    const onLine = (line: string) => {
      const m = re.exec(line)
      if (m) done(undefined, m[1])
    }
    const onExit = () => done(new Error(`${child.name} exited (${child.proc.exitCode ?? child.proc.signalCode}) before it was ready:\n${tail(child.log)}`))
    const onError = (e: Error) => done(new Error(`${child.name} could not start: ${e.message}`))
    const timer = setTimeout(() => done(new Error(`${child.name} not ready after ${timeoutMs} ms:\n${tail(child.log)}`)), timeoutMs)
    rl.on('line', onLine)
    child.proc.once('exit', onExit)
    child.proc.once('error', onError)
  })
}

export async function stopChild(c: Child, graceMs = 10_000): Promise<void> {
  const i = children.indexOf(c)
  if (running(c)) {
    c.proc.kill('SIGTERM')
    const late = await Promise.race([c.exited.then(() => false), sleep(graceMs).then(() => true)])
    if (late && running(c)) {
      c.proc.kill('SIGKILL')
      await c.exited
    }
  }
  if (i >= 0) children.splice(i, 1)
}

/** Runs a command to completion (a node script: `fencegate migrate`); throws with its output when it fails. */
export function runToEnd(cmd: string, args: string[]): string {
  try {
    return execFileSync(cmd, args, { cwd: ROOT, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] })
  } catch (e) {
    const err = e as { stdout?: string; stderr?: string; message: string }
    throw new Error(`${[cmd, ...args].join(' ')} failed: ${(err.stderr || err.stdout || err.message).trim()}`)
  }
}

/** Adds work for cleanup() (drop a schema, delete keys); returns a function that runs it now, once. */
export function onCleanup(fn: () => Promise<void>): () => Promise<void> {
  let done = false
  const once = async () => {
    if (done) return
    done = true
    const i = cleanups.indexOf(once)
    if (i >= 0) cleanups.splice(i, 1)
    await fn()
  }
  cleanups.push(once)
  return once
}

let cleaned: Promise<void> | undefined
/** Stops every child, runs the cleanups (newest first), removes the temp folder (unless BENCH_KEEP=1). */
export function cleanup(): Promise<void> {
  cleaned ??= (async () => {
    await Promise.all(children.slice().reverse().map((c) => stopChild(c).catch(() => {})))
    for (const fn of cleanups.slice().reverse()) {
      try { await fn() } catch (e) { process.stderr.write(`cleanup: ${(e as Error).message}\n`) }
    }
    if (tmpDir && !KEEP) rmSync(tmpDir, { recursive: true, force: true })
    else if (tmpDir) process.stderr.write(`kept ${tmpDir}\n`)
  })()
  return cleaned
}

/**
 * Stops the children and cleans up on Ctrl-C, SIGTERM, SIGHUP and uncaught errors; kills what
 * still runs on process.exit.
 */
export function installExitHandlers(name: string): void {
  process.on('exit', () => {
    for (const c of children) if (running(c)) c.proc.kill('SIGKILL')
  })
  for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
    process.once(sig, () => {
      process.stderr.write(`\n${sig}: stopping the children and cleaning up\n`)
      cleanup().finally(() => process.exit(130))
    })
  }
  process.on('uncaughtException', (e) => {
    process.stderr.write(`${name}: ${e.stack ?? e.message}\n`)
    cleanup().finally(() => process.exit(1))
  })
}

/** Runs `main`, reports a failure (BenchError by its message), always cleans up. */
export async function runMain(name: string, main: () => Promise<void>): Promise<void> {
  installExitHandlers(name)
  try {
    await main()
  } catch (e) {
    process.stderr.write(`${name}: ${e instanceof BenchError ? e.message : (e as Error).stack ?? String(e)}\n`)
    process.exitCode = 1
  } finally {
    await cleanup()
  }
}

// ------------------------------------------------------------------------------- helpers

export const freePort = () => new Promise<number>((ok, fail) => {
  const s = net.createServer()
  s.on('error', fail)
  s.listen(0, '127.0.0.1', () => {
    const { port } = s.address() as net.AddressInfo
    s.close(() => ok(port))
  })
})

/** Polls `url` until it answers `status`. */
export async function waitHttp(url: string, child: Child, status?: number, timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    if (!running(child)) throw new Error(`${child.name} exited before it was ready:\n${tail(child.log)}`)
    try {
      const r = await fetch(url, { method: 'GET' })
      await r.arrayBuffer()
      if (status === undefined || r.status === status) return
    } catch { /* not up yet */ }
    if (Date.now() > deadline) throw new Error(`${child.name} not ready at ${url} after ${timeoutMs} ms:\n${tail(child.log)}`)
    await sleep(50)
  }
}

export const today = (now = new Date()) =>
  `${now.getFullYear()}-${String(now.getMonth() + 1).padStart(2, '0')}-${String(now.getDate()).padStart(2, '0')}`

/** Writes `report` to bench/results/<name>.json (through a temp file); returns the path. */
export function writeResult(name: string, report: unknown): string {
  mkdirSync(RESULTS, { recursive: true })
  const file = join(RESULTS, `${name}.json`)
  writeFileSync(`${file}.tmp`, `${JSON.stringify(report, null, 2)}\n`)
  renameSync(`${file}.tmp`, file)
  return file
}

export function gitRevision(): string | undefined {
  try {
    const rev = execFileSync('git', ['rev-parse', '--short', 'HEAD'], { cwd: ROOT, encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim()
    const dirty = execFileSync('git', ['status', '--porcelain', '--', 'src'], { cwd: ROOT, encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim()
    return dirty ? `${rev}+dirty-src` : rev
  } catch {
    return undefined
  }
}

export function machine() {
  const cpus = os.cpus()
  return {
    cpuModel: cpus[0]?.model,
    cpus: cpus.length,
    node: process.version,
    platform: `${os.platform()} ${os.release()} ${os.arch()}`,
    memoryGiB: Math.round((os.totalmem() / 2 ** 30) * 10) / 10,
  }
}

export function pad(cells: string[], widths: number[], right: boolean[]): string {
  return cells.map((c, i) => (right[i] ? c.padStart(widths[i]) : c.padEnd(widths[i]))).join('  ').trimEnd()
}

/** Prints a table with right-aligned columns where `right` says so. */
export function table(head: string[], rows: string[][], right: boolean[]): string {
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i].length)))
  return [pad(head, widths, right), widths.map((w) => '-'.repeat(w)).join('  '), ...rows.map((r) => pad(r, widths, right))].join('\n')
}

// ---------------------------------------------------------------------------------- /proc

/** Resident set size of a process, bytes (Linux /proc/<pid>/status VmRSS; undefined elsewhere). */
export function rssBytes(pid: number | undefined): number | undefined {
  if (pid === undefined) return undefined
  try {
    const m = /^VmRSS:\s+(\d+)\s+kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))
    return m ? Number(m[1]) * 1024 : undefined
  } catch {
    return undefined
  }
}

/**
 * user+system CPU seconds of a process and its descendants (a gateway's `--workers`), from
 * Linux /proc; undefined elsewhere.
 */
export function cpuSeconds(pid: number | undefined): number | undefined {
  if (pid === undefined) return undefined
  const one = (p: number): number => {
    const stat = readFileSync(`/proc/${p}/stat`, 'utf8')
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
    return (Number(f[11]) + Number(f[12])) / 100 // utime, stime in USER_HZ (100 on mainstream Linux)
  }
  const kids = (p: number): number[] => {
    try {
      return readFileSync(`/proc/${p}/task/${p}/children`, 'utf8').trim().split(/\s+/).filter(Boolean).map(Number)
    } catch {
      return []
    }
  }
  try {
    let total = 0
    const todo = [pid]
    while (todo.length) {
      const p = todo.pop()!
      total += one(p)
      todo.push(...kids(p))
    }
    return total
  } catch {
    return undefined
  }
}

/** Busy CPU seconds of the whole machine, all cores (Linux /proc/stat; undefined elsewhere). */
export function machineBusySeconds(): number | undefined {
  try {
    const f = readFileSync('/proc/stat', 'utf8').split('\n')[0].trim().split(/\s+/).slice(1).map(Number)
    const [user, nice, system, , , irq, softirq, steal] = f
    return (user + nice + system + irq + softirq + (steal ?? 0)) / 100
  } catch {
    return undefined
  }
}

/** CPU seconds used by this process and its running children. */
export function benchSeconds(): number | undefined {
  const u = process.cpuUsage()
  let total = (u.user + u.system) / 1e6
  for (const c of children) {
    if (!running(c)) continue
    const s = cpuSeconds(c.proc.pid)
    if (s === undefined) return undefined
    total += s
  }
  return total
}

/**
 * Measures CPU use between `begin()` and the returned function's call: % of one core used by
 * the machine outside this harness and its children (a neighbour's load skews every figure;
 * a redis or postgres server counts as outside).
 */
export function foreignMeter(): () => number | undefined {
  const m0 = machineBusySeconds(), b0 = benchSeconds(), t0 = performance.now()
  return () => {
    const m1 = machineBusySeconds(), b1 = benchSeconds(), wall = (performance.now() - t0) / 1000
    if (m0 === undefined || m1 === undefined || b0 === undefined || b1 === undefined || wall <= 0) return undefined
    return Math.max(0, Math.round((((m1 - m0) - (b1 - b0)) / wall) * 100))
  }
}

// ------------------------------------------------------------------------------- /metrics

/**
 * Sums the samples of a Prometheus (or OpenMetrics) text exposition whose name and labels
 * match: 0 when the family has no such sample yet, undefined when the exposition has no such
 * family at all (a renamed metric).
 */
export function metricSum(text: string, name: string, labels: Record<string, string> = {}): number | undefined {
  const family = name.replace(/_(count|sum|bucket)$/, '')
  if (!text.includes(`# TYPE ${family} `) && !text.includes(`# TYPE ${family.replace(/_total$/, '')} `)) return undefined
  let sum = 0
  for (const line of text.split('\n')) {
    if (!line.startsWith(`${name}{`) && !line.startsWith(`${name} `)) continue
    if (!Object.entries(labels).every(([k, v]) => line.includes(`${k}="${v}"`))) continue
    const rest = line.slice(line.startsWith(`${name}{`) ? line.indexOf('}', name.length) + 1 : name.length)
    const value = Number(rest.split(' # ')[0].trim().split(/\s+/)[0])
    if (!Number.isFinite(value)) return undefined
    sum += value
  }
  return sum
}

export async function scrape(adminUrl: string): Promise<string> {
  const r = await fetch(`${adminUrl}/metrics`)
  return r.text()
}

// ------------------------------------------------------------------------------ processes

/** The node upstream (bench/upstream.ts): 201 with a small JSON body. */
export async function startUpstream(): Promise<{ url: string; child: Child }> {
  const child = start('upstream-node', process.execPath, [join(HERE, 'upstream.js'), '0'])
  return { url: await waitLine(child, /^listening (\S+)/), child }
}

export interface Gateway { url: string; adminUrl: string; child: Child; config: string }

/**
 * One route of a bench gateway's config: `POST /<prefix>/:account/*` to `upstream`, fenced on
 * `account:{param.account}` and/or with idempotency required (both by default).
 */
export function benchRoute(name: string, prefix: string, upstream: string, checks: { fencing?: boolean; idempotency?: boolean } = { fencing: true, idempotency: true }): string {
  return `  - name: ${name}
    match:
      path: /${prefix}/:account/*
      methods: [POST]
    upstream:
      url: ${upstream}
${checks.fencing ? '    fencing:\n      resource: "account:{param.account}"\n' : ''}${checks.idempotency ? '    idempotency:\n      required: true\n' : ''}`
}

/**
 * Writes a gateway config to the temp folder; returns its path. `store` is the YAML block under
 * `store:`, indented by two spaces; `routes` are `benchRoute()`s, by default the one `bench`
 * route (POST /accounts/:account/*, fencing and idempotency).
 */
export function writeGatewayConfig(name: string, store: string, upstream: string, ports: { port: number; adminPort: number }, routes = benchRoute('bench', 'accounts', upstream)): string {
  const config = join(tmp(), `${name}.yaml`)
  writeFileSync(config, `# written by bench/lib.ts
listen: 127.0.0.1:${ports.port}
admin:
  listen: 127.0.0.1:${ports.adminPort}
store:
${store}
routes:
${routes}`)
  return config
}

/** `fencegate migrate --config …`: creates the postgres schema; for the other stores it opens (and so lays out) the store. */
export function migrate(config: string): string {
  return runToEnd(process.execPath, [CLI, 'migrate', '--config', config]).trim()
}

/** Starts `fencegate --config …` (exits with the harness: exit-with-parent.ts) and waits for /readyz. */
export async function startGateway(name: string, config: string, adminPort: number): Promise<Gateway> {
  const child = start(name, process.execPath, ['--import', EXIT_WITH_PARENT, CLI, '--config', config])
  const url = await waitLine(child, / on (http:\/\/\S+) \(admin/)
  const adminUrl = `http://127.0.0.1:${adminPort}`
  await waitHttp(`${adminUrl}/readyz`, child, 200)
  return { url, adminUrl, child, config }
}

// ---------------------------------------------------------------------------- the stores

/** Drops a postgres schema (CASCADE). */
export async function dropSchema(schema: string): Promise<void> {
  const { default: pg } = await import('pg')
  const client = new pg.Client({ connectionString: POSTGRES_URL })
  client.on('error', () => {})
  await client.connect()
  try {
    await client.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`)
  } finally {
    await client.end().catch(() => {})
  }
}

/** Deletes every redis key of the fencegate key prefix `prefix` ({fg:<prefix>:…}); returns how many. */
export async function deleteRedisPrefix(prefix: string): Promise<number> {
  const { Redis } = await import('ioredis')
  const redis = new Redis(REDIS_URL, { lazyConnect: true, maxRetriesPerRequest: 1 })
  redis.on('error', () => {})
  await redis.connect()
  let n = 0
  try {
    let cursor = '0'
    do {
      const [next, keys] = await redis.scan(cursor, 'MATCH', `{fg:${prefix}:*`, 'COUNT', 10_000)
      if (keys.length) n += await redis.unlink(...keys)
      cursor = next
    } while (cursor !== '0')
  } finally {
    redis.disconnect()
  }
  return n
}

/** Deletes every key of the fencegate key prefix `prefix` from every master of the Redis Cluster whose seed nodes `url` lists. */
export async function deleteRedisClusterPrefix(url: string, prefix: string): Promise<number> {
  const { Cluster } = await import('ioredis')
  const cluster = new Cluster(url.split(',').map((u) => { const x = new URL(u.trim()); return { host: x.hostname, port: Number(x.port || 6379) } }), { lazyConnect: true })
  cluster.on('error', () => {})
  await cluster.connect()
  let n = 0
  try {
    for (const node of cluster.nodes('master')) {
      let cursor = '0'
      do {
        const [next, keys] = await node.scan(cursor, 'MATCH', `{fg:${prefix}:*`, 'COUNT', 10_000)
        // every key is its own slot: one UNLINK each, pipelined by the cluster client
        n += (await Promise.all(keys.map((k) => cluster.unlink(k)))).reduce((a, b) => a + b, 0)
        cursor = next
      } while (cursor !== '0')
    }
  } finally {
    cluster.disconnect()
  }
  return n
}

// ------------------------------------------------------------------------------- requests

/** Tags the keys and accounts of this process's requests, so they never meet another run's. */
export const runTag = randomBytes(3).toString('hex')
let tokenSeq = 0 // one counter for the whole process, so no resource ever sees a token go back
let keySeq = 0
let connSeq = 0
/** A new idempotency key, never used by this run or another (`<prefix>-<runTag>-<n>`). */
export const nextKey = (prefix = 'k') => `${prefix}-${runTag}-${++keySeq}`
/** The next fencing token: higher than every one sent before in this process. */
export const nextToken = () => String(++tokenSeq)

/**
 * bench/run.ts's `unique` stream: each connection (autocannon client) writes its own account
 * under `/<prefix>/`, or the next of `paths` in turn when given; each request gets the next token
 * and a new key (either left out with `key: false` / `token: false`, for routes with one check).
 * A connection has one request in flight, so its tokens arrive in order.
 */
export function uniqueRequests(options: { prefix?: string; key?: boolean; token?: boolean; paths?: readonly string[] } = {}): Pick<autocannon.Options, 'setupClient'> {
  const { prefix = 'accounts', key = true, token = true, paths } = options
  let n = 0
  return {
    setupClient(client) {
      const path = paths ? paths[n++ % paths.length] : `/${prefix}/acct-${runTag}-${++connSeq}/transfers`
      client.setRequests([{
        method: 'POST',
        path,
        body: BODY,
        setupRequest: (req) => ({
          ...req,
          headers: { ...BASE_HEADERS, ...(key ? { 'idempotency-key': nextKey() } : {}), ...(token ? { 'fencing-token': nextToken() } : {}) },
        }),
      }])
    },
  }
}

/** The autocannon options every bench load shares: `POST` of BODY with BASE_HEADERS, no pipelining. */
export const postLoad = (url: string, connections: number) =>
  ({ url, connections, pipelining: 1, method: 'POST', body: BODY, headers: BASE_HEADERS }) satisfies autocannon.Options

/** What every results file starts with: when, which revision, on what machine. */
export const resultHeader = () => ({ date: new Date().toISOString(), revision: gitRevision(), machine: machine() })

/** What a run's request-level checks found wrong: non-2xx answers, connection errors, timeouts. */
export function requestProblems(result: autocannon.Result): string[] {
  const problems: string[] = []
  if (result.non2xx) {
    const codes: Record<string, number> = {}
    for (const [code, s] of Object.entries(result.statusCodeStats)) codes[code] = s.count
    problems.push(`${result.non2xx} answers other than 2xx: ${JSON.stringify(codes)}`)
  }
  if (result.errors) problems.push(`${result.errors} connection errors`)
  if (result.timeouts) problems.push(`${result.timeouts} timeouts`)
  return problems
}

export const MiB = (bytes: number | undefined) => (bytes === undefined ? undefined : Math.round((bytes / 2 ** 20) * 10) / 10)
