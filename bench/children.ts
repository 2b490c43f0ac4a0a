/**
 * The bench's child processes (re-exported by bench/lib.ts): starting them so they die with the
 * harness, waiting for a line or an HTTP answer, stopping them, the temp folder, the cleanups
 * and runMain(), which always runs them; free ports.
 */
import { spawn, execFileSync, type ChildProcess } from 'node:child_process'
import { createInterface } from 'node:readline'
import { setTimeout as sleep } from 'node:timers/promises'
import { mkdtempSync, openSync, closeSync, readFileSync, rmSync } from 'node:fs'
import net from 'node:net'
import os from 'node:os'
import { join } from 'node:path'
import { BenchError, ROOT, KEEP } from './basics.js'

// ----------------------------------------------------------------------- child processes

export interface Child {
  name: string
  proc: ChildProcess
  log: string
  exited: Promise<void>
}

export const children: Child[] = []
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
