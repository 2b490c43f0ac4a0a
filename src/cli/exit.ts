/**
 * How a command ends when it does not succeed: an exit code (1 runtime, 2 usage or config) and
 * the lines that say why, on stderr, or as one JSON object on stdout with --json.
 */
import type { ConfigProblem } from '../config/load.js'
import type { CommandResult } from '../audit/cli.js'

/** An error the command ends with: its exit code and lines, printed as JSON with --json. */
export class Exit extends Error {
  constructor(readonly code: number, readonly type: 'usage' | 'config' | 'runtime', readonly lines: string[], readonly problems?: ConfigProblem[], readonly file?: string) {
    super(lines[0] ?? '')
  }
}

/** A usage mistake (exit 2): what is wrong, then a hint at the right usage. */
export const usageError = (message: string, hint: string) => new Exit(2, 'usage', [`fencegate: ${message}`, hint])

/**
 * Prints why the command ended and exits with its code.
 * @param json --json was given: {"error": {"type", "message", "problems"?}, "exitCode"} on stdout
 */
export function finish(e: Exit, json: boolean): never {
  if (json) {
    const error: Record<string, unknown> = { type: e.type, message: e.lines.filter(Boolean).join('\n').replace(/^fencegate: /, '') }
    if (e.problems) error.problems = e.problems.map((p) => ({ file: e.file, line: p.line, column: p.column, path: p.path, message: p.message }))
    process.stdout.write(`${JSON.stringify({ error, exitCode: e.code })}\n`)
  } else {
    for (const l of e.lines) if (l) process.stderr.write(`${l}\n`)
  }
  process.exit(e.code)
}

/** Prints a command's result, or ends with its exit code. */
export function done(r: CommandResult): void {
  if (r.code !== 0) throw new Exit(r.code, r.code === 2 ? 'usage' : 'runtime', r.stderr ?? [])
  if (r.stdout) process.stdout.write(r.stdout)
}
