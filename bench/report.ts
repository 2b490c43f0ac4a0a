/**
 * What a bench run writes and prints (re-exported by bench/lib.ts): the results file and its
 * header (date, revision, machine), and text tables.
 */
import { execFileSync } from 'node:child_process'
import { mkdirSync, writeFileSync, renameSync } from 'node:fs'
import os from 'node:os'
import { join } from 'node:path'
import { ROOT, RESULTS } from './basics.js'

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

/** What every results file starts with: when, which revision, on what machine. */
export const resultHeader = () => ({ date: new Date().toISOString(), revision: gitRevision(), machine: machine() })
