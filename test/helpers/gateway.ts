/**
 * Starts a real gateway in this process (real sockets, real store) from YAML config text, or as
 * a child process through the CLI (for restart, kill -9 and several-process tests).
 */
import { mkdtempSync, writeFileSync, rmSync, openSync, closeSync, readFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import net from 'node:net'
import { spawn, type ChildProcess } from 'node:child_process'
import { parseConfig } from '../../src/config/load.js'
import { startGateway, type Running } from '../../src/server.js'
import { createLogger } from '../../src/log.js'
import { request } from 'undici'

export const CLI = resolve(import.meta.dirname, '../../dist/src/cli.js')

export interface TestGateway extends Running {
  dir: string
  /** collected log lines */
  logs: string[]
}

export const tempDir = (prefix = 'fg-test-') => mkdtempSync(join(tmpdir(), prefix))

export const freePort = () => new Promise<number>((ok, fail) => {
  const s = net.createServer()
  s.on('error', fail)
  s.listen(0, '127.0.0.1', () => { const p = (s.address() as net.AddressInfo).port; s.close(() => ok(p)) })
})

/**
 * Starts a gateway in-process. In `yaml`, @DIR@ is replaced by a fresh temp folder; `listen`
 * and `admin.listen` default to free ports when the text does not set them.
 */
export async function startTestGateway(yaml: string): Promise<TestGateway> {
  const dir = tempDir()
  let text = yaml.replaceAll('@DIR@', dir)
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

/** A route block for YAML configs. */
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
export async function spawnGateway(configPath: string, port: number, adminPort: number, logPath: string, args: string[] = []): Promise<ChildGateway> {
  const fd = openSync(logPath, 'a')
  const child = spawn(process.execPath, [CLI, '--config', configPath, ...args], { stdio: ['ignore', fd, fd] })
  closeSync(fd)
  const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)))
  const adminUrl = `http://127.0.0.1:${adminPort}`
  const deadline = Date.now() + 15_000
  for (;;) {
    if (child.exitCode !== null) throw new Error(`gateway exited ${child.exitCode}: ${readFileSync(logPath, 'utf8')}`)
    try {
      const r = await request(`${adminUrl}/readyz`)
      await r.body.dump()
      if (r.statusCode === 200) break
    } catch { /* not up yet */ }
    if (Date.now() > deadline) { child.kill('SIGKILL'); throw new Error(`gateway not ready: ${readFileSync(logPath, 'utf8')}`) }
    await new Promise((r) => setTimeout(r, 50))
  }
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
 * The config the child-process tests share: one fenced, idempotent route `/ledger/:res/*` in
 * front of `upstream`. `store` is the indented body of the `store:` block; `top` adds
 * top-level keys (e.g. a `shutdown:` block).
 */
export function ledgerConfig(o: { port: number; admin: number; store: string; upstream: string; lease?: string; timeout?: string; top?: string }): string {
  return `listen: 127.0.0.1:${o.port}
admin:
  listen: 127.0.0.1:${o.admin}
store:
${o.store}
${o.top ?? ''}routes:
  - name: ledger
    match:
      path: /ledger/:res/*
    upstream:
      url: ${o.upstream}
      timeout: ${o.timeout ?? '5s'}
    fencing:
      resource: "{param.res}"
    idempotency:
      required: true
      lease: ${o.lease ?? '30s'}
`
}
