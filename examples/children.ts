/**
 * The child processes of an example run (examples/jetstream, examples/rabbitmq): each one's
 * stdout lines, parsed when they are JSON events, its stderr and its exit; waiting for an event;
 * freezing with SIGSTOP; stopping everything on the way out. Also where the compiled scripts are
 * (dist/, whether the run itself is compiled or loaded from source) and the fencegate CLI.
 */
import { spawn, execFile, type ChildProcess } from 'node:child_process'
import { createInterface } from 'node:readline'
import { dirname, join, resolve, sep } from 'node:path'
import { fileURLToPath } from 'node:url'

/** One JSON line a child printed. */
export interface ChildEvent { event: string; [k: string]: any }

const here = dirname(fileURLToPath(import.meta.url))
/** dist/ whether this runs compiled (dist/examples) or from source (examples, under vitest) */
export const DIST = here.endsWith(`${sep}dist${sep}examples`) ? resolve(here, '..') : resolve(here, '../dist')
export const distPath = (path: string) => join(DIST, path)

export class Child {
  lines: string[] = []
  events: ChildEvent[] = []
  stderr = ''
  exitCode: number | null | undefined = undefined
  /** frozen with SIGSTOP */
  frozen = false
  readonly exited: Promise<number | null>
  private waiters: (() => void)[] = []

  constructor(readonly name: string, readonly proc: ChildProcess) {
    createInterface({ input: proc.stdout! }).on('line', (line) => {
      this.lines.push(line)
      try { const e = JSON.parse(line); if (e && typeof e === 'object' && typeof e.event === 'string') this.events.push(e) } catch { /* plain text */ }
      this.wake()
    })
    proc.stderr!.on('data', (c: Buffer) => { this.stderr += c.toString('utf8') })
    // 'close', not 'exit': every stdout line has been read by then
    this.exited = new Promise((r) => proc.once('close', (code) => { this.exitCode = code; this.wake(); r(code) }))
    proc.once('error', (e) => { this.stderr += `spawn error: ${e.message}\n`; this.exitCode = null; this.wake() })
  }

  private wake() { for (const w of this.waiters.splice(0)) w() }

  get alive() { return this.exitCode === undefined }

  /**
   * The first stdout line `match` accepts (from the start of the output).
   * @throws Error when the process exits first or after `timeoutMs`, with the end of its stderr
   */
  async waitFor<T>(what: string, match: (line: string, event: ChildEvent | undefined) => T | undefined, timeoutMs = 10_000): Promise<T> {
    const deadline = Date.now() + timeoutMs
    let seen = 0
    for (;;) {
      for (; seen < this.lines.length; seen++) {
        let ev: ChildEvent | undefined
        try { ev = JSON.parse(this.lines[seen]) } catch { ev = undefined }
        const hit = match(this.lines[seen], ev)
        if (hit !== undefined) return hit
      }
      const tail = this.stderr ? `: ${this.stderr.trim().slice(-800)}` : ''
      if (!this.alive) throw new Error(`${this.name} exited (${this.exitCode}) before ${what}${tail}`)
      const left = deadline - Date.now()
      if (left <= 0) throw new Error(`${this.name}: no ${what} within ${timeoutMs} ms${tail}`)
      await new Promise<void>((r) => { const t = setTimeout(r, left); this.waiters.push(() => { clearTimeout(t); r() }) })
    }
  }

  /** The first event named `name` that `pred` accepts. */
  event(name: string, pred: (e: ChildEvent) => boolean = () => true, timeoutMs?: number): Promise<ChildEvent> {
    return this.waitFor(`a "${name}" event`, (_l, e) => (e?.event === name && pred(e) ? e : undefined), timeoutMs)
  }

  freeze() { this.proc.kill('SIGSTOP'); this.frozen = true }
  thaw() { this.proc.kill('SIGCONT'); this.frozen = false }

  /** SIGCONT if frozen, SIGTERM, then SIGKILL after `graceMs`. */
  async stop(graceMs = 3000): Promise<void> {
    if (!this.alive) return
    if (this.frozen) this.thaw()
    this.proc.kill('SIGTERM')
    const t = setTimeout(() => { if (this.alive) this.proc.kill('SIGKILL') }, graceMs)
    await this.exited
    clearTimeout(t)
  }
}

const children = new Set<Child>()

/** Starts `node <script> ...args` (OpenTelemetry off) and keeps it for stopChildren. */
export function startChild(name: string, script: string, args: string[], env: Record<string, string> = {}): Child {
  const proc = spawn(process.execPath, [script, ...args], { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, OTEL_SDK_DISABLED: 'true', ...env } })
  const c = new Child(name, proc)
  children.add(c)
  void c.exited.then(() => children.delete(c))
  return c
}

/** Stops every child started here (frozen ones included), newest first. */
export async function stopChildren(): Promise<void> {
  const all = [...children].reverse()
  children.clear()
  await Promise.all(all.map((c) => c.stop().catch(() => {})))
}

/** Last resort for a script: no child outlives the process, also on Ctrl-C. */
export function killChildrenOnExit(cleanup: () => Promise<unknown> = async () => {}): void {
  process.on('exit', () => { for (const c of children) if (c.alive) { try { c.proc.kill('SIGKILL') } catch { /* gone */ } } })
  for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
    process.once(sig, () => { void stopChildren().then(cleanup).finally(() => process.exit(130)) })
  }
}

/** `node dist/src/cli.js ...args`: exit code, stdout, stderr (never rejects). */
export const fencegateCli = (args: string[]) => new Promise<{ code: number; stdout: string; stderr: string }>((ok) => {
  execFile(process.execPath, [distPath('src/cli.js'), ...args], { timeout: 15_000, env: { ...process.env, OTEL_SDK_DISABLED: 'true' } }, (err, stdout, stderr) => {
    ok({ code: err ? (typeof (err as { code?: unknown }).code === 'number' ? (err as { code: number }).code : 1) : 0, stdout, stderr })
  })
})
