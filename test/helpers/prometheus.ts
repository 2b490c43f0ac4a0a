/**
 * A real Prometheus server for tests (the Debian package `prometheus`): temp dir, loopback,
 * 1 s scrape and evaluation interval, exemplar storage on. Tests that need it fail, loudly and
 * with the reason, when the binaries are missing.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process'
import { mkdtempSync, rmSync, writeFileSync, openSync, closeSync, readFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { request } from 'undici'
import { freePort } from './gateway.js'
import { until } from './wait.js'
import { run } from './run.js'

/** Throws, naming the fix, when `bin` (promtool, prometheus) cannot be run. */
export function requireBinary(bin: 'promtool' | 'prometheus'): void {
  const r = spawnSync(bin, ['--version'], { encoding: 'utf8' })
  if (r.error || r.status !== 0) {
    throw new Error(`${bin} is not installed (${r.error?.message ?? r.stderr}): install the Debian package "prometheus" (apt-get install -y prometheus), as .ci/run does; these tests check the dashboards and alert rules against it and cannot pass without it`)
  }
}

/** Runs promtool; resolves with its exit code and output (stdout, then stderr). */
export async function promtool(args: string[], stdin?: string): Promise<{ status: number | null; output: string }> {
  const r = await run('promtool', args, { input: stdin })
  if (r.error) throw r.error
  return { status: r.status, output: `${r.stdout}${r.stderr}` }
}

export interface PromResult { status: string; error?: string; errorType?: string; data: any }

export interface Prometheus {
  url: string
  /** GET an HTTP API path (e.g. /api/v1/query?query=...) and return its JSON, errors included */
  api(path: string, params?: Record<string, string>): Promise<PromResult>
  log(): string
  close(): Promise<void>
}

/**
 * Scrapes `targets` (host:port) as job "fencegate". `labels` adds target labels by target, as
 * Kubernetes service discovery attaches `namespace` and `pod`.
 */
export async function startPrometheus(opts: { targets: string[]; labels?: Record<string, Record<string, string>>; ruleFiles?: string[] }): Promise<Prometheus> {
  requireBinary('prometheus')
  const dir = mkdtempSync(join(tmpdir(), 'fg-prom-'))
  const port = await freePort()
  writeFileSync(join(dir, 'prometheus.yml'), `global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files:
${(opts.ruleFiles ?? []).map((f) => `  - ${JSON.stringify(f)}`).join('\n') || '  []'}
scrape_configs:
  - job_name: fencegate
    static_configs:
${opts.targets.map((t) => `      - targets: ${JSON.stringify([t])}\n        labels: ${JSON.stringify(opts.labels?.[t] ?? {})}`).join('\n')}
`)
  const logPath = join(dir, 'prometheus.log')
  const fd = openSync(logPath, 'a')
  const child: ChildProcess = spawn('prometheus', [
    `--config.file=${join(dir, 'prometheus.yml')}`,
    `--storage.tsdb.path=${join(dir, 'data')}`,
    '--storage.tsdb.retention.time=1h',
    `--web.listen-address=127.0.0.1:${port}`,
    // no console templates, no lifecycle or admin APIs: just the query API
    `--web.console.templates=${join(dir, 'consoles')}`,
    `--web.console.libraries=${join(dir, 'console_libraries')}`,
    '--enable-feature=exemplar-storage',
    '--log.level=warn',
  ], { stdio: ['ignore', fd, fd] })
  closeSync(fd)
  const exited = new Promise<void>((r) => child.once('exit', () => r()))
  const url = `http://127.0.0.1:${port}`
  const log = () => readFileSync(logPath, 'utf8')
  const api = async (path: string, params?: Record<string, string>): Promise<PromResult> => {
    const qs = params ? `?${new URLSearchParams(params)}` : ''
    const r = await request(`${url}${path}${qs}`)
    return await r.body.json() as PromResult
  }
  const state = await until(async () => {
    if (child.exitCode !== null) return 'exited'
    const r = await request(`${url}/-/ready`)
    await r.body.dump()
    return r.statusCode === 200 && 'ready'
  }, { timeoutMs: 20_000, intervalMs: 100, message: () => `prometheus's /-/ready to answer 200; its log: ${log()}` })
    .catch((e: unknown) => { child.kill('SIGKILL'); throw e })
  if (state === 'exited') throw new Error(`prometheus exited ${child.exitCode}: ${log()}`)
  return {
    url,
    api,
    log,
    close: async () => {
      child.kill('SIGTERM')
      await exited
      rmSync(dir, { recursive: true, force: true })
    },
  }
}
