/**
 * Running a program from a test without blocking the test worker. `spawnSync` would hold the
 * worker's event loop for the whole run; vitest's worker answers its runner over an RPC channel
 * whose calls time out after 60 s, so a file of back-to-back synchronous runs (config.test.ts:
 * 58 CLI runs, ~65 s under CI load) fails the run with "Timeout calling onTaskUpdate" even
 * though every test passed. `run` gives the event loop back while the child runs.
 */
import { spawn } from 'node:child_process'
import { CLI } from './gateway.js'

/** What a finished program left: the fields of `spawnSync`'s result that tests read. */
export interface RunResult {
  /** exit code, or null when a signal ended it (a timeout: SIGTERM) */
  status: number | null
  signal: NodeJS.Signals | null
  stdout: string
  stderr: string
  /** set when the program could not be started (ENOENT) */
  error?: Error
}

export interface RunOptions {
  /** written to the program's stdin, which is then closed */
  input?: string
  /** the whole environment of the program (default: this process's) */
  env?: NodeJS.ProcessEnv
  /** SIGTERM after this many ms; default none */
  timeout?: number
  cwd?: string
}

/** Runs `cmd args` to its end; never rejects (a start failure is `error`). */
export function run(cmd: string, args: string[], opts: RunOptions = {}): Promise<RunResult> {
  return new Promise((resolve) => {
    const child = spawn(cmd, args, { env: opts.env ?? process.env, cwd: opts.cwd, stdio: ['pipe', 'pipe', 'pipe'] })
    let stdout = ''
    let stderr = ''
    let error: Error | undefined
    child.stdout.setEncoding('utf8').on('data', (s: string) => { stdout += s })
    child.stderr.setEncoding('utf8').on('data', (s: string) => { stderr += s })
    child.on('error', (e) => {
      error = e
      // not started (ENOENT, EACCES): 'close' may never come
      if (child.pid === undefined) resolve({ status: null, signal: null, stdout, stderr, error })
    })
    // a program that exits without reading its stdin closes the pipe under us
    child.stdin.on('error', () => {})
    child.stdin.end(opts.input ?? '')
    const timer = opts.timeout === undefined ? undefined : setTimeout(() => child.kill('SIGTERM'), opts.timeout)
    child.on('close', (status, signal) => {
      clearTimeout(timer)
      resolve({ status, signal, stdout, stderr, error })
    })
  })
}

/**
 * Runs `cmd args` and resolves with its stdout.
 * @throws Error naming the command, its exit code or signal and its stderr, when it did not exit 0
 */
export async function output(cmd: string, args: string[], opts: RunOptions = {}): Promise<string> {
  const r = await run(cmd, args, opts)
  if (r.error) throw r.error
  if (r.status !== 0) throw new Error(`${cmd} ${args.join(' ')} ended with ${r.status ?? r.signal}: ${r.stderr}`)
  return r.stdout
}

/** Runs the built CLI (`dist/src/cli.js`) with `args`. */
export const runCli = (args: string[], opts: RunOptions = {}): Promise<RunResult> => run(process.execPath, [CLI, ...args], opts)
