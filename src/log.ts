/**
 * One JSON object per line on stderr, with an ISO 8601 `time`. Never a raw idempotency key,
 * Authorization, cookie or body: callers pass routes, reasons and hashes only.
 */
export type Fields = Record<string, string | number | boolean | undefined>

/** `log.level`: lines below it are not written. The access log is not subject to it. */
export type LogLevel = 'debug' | 'info' | 'warn' | 'error'

export interface Logger {
  debug(msg: string, fields?: Fields): void
  info(msg: string, fields?: Fields): void
  warn(msg: string, fields?: Fields): void
  error(msg: string, fields?: Fields): void
  /** One access log line (`msg: "request"`), written whatever the level. */
  access(fields: Fields): void
  /** Changes the lowest level written (`log.level`, on start and on a config reload). */
  setLevel?(level: LogLevel): void
}

const RANK: Record<LogLevel, number> = { debug: 10, info: 20, warn: 30, error: 40 }

/**
 * @param out where lines go (default stderr)
 * @param level the lowest level written (default info)
 */
export function createLogger(out: NodeJS.WritableStream = process.stderr, level: LogLevel = 'info'): Logger {
  let min = RANK[level]
  // Access lines are gathered and written once per event-loop turn (or every 256 lines): stderr
  // on a file or pipe is written synchronously, one system call per write, and a busy gateway
  // makes a line per refused or replayed request. They are serialised at the flush, in one
  // loop (cheaper than one at a time between requests, see bench/NOTES.md), each
  // with the time it was made. Any other line first flushes them, so order is kept.
  let pending: Fields[] = []
  let times: number[] = []
  let scheduled = false
  const flush = () => {
    scheduled = false
    if (pending.length === 0) return
    const lines = pending
    const at = times
    pending = []
    times = []
    let chunk = ''
    for (let i = 0; i < lines.length; i++) chunk += accessLine(lines[i], at[i])
    out.write(chunk)
  }
  const line = (lvl: LogLevel, msg: string, fields?: Fields) => {
    if (RANK[lvl] < min) return
    if (pending.length > 0) flush()
    out.write(`${JSON.stringify({ time: new Date().toISOString(), level: lvl, msg, ...fields })}\n`)
  }
  unflushed.add(flush)
  return {
    debug: (m, f) => line('debug', m, f),
    info: (m, f) => line('info', m, f),
    warn: (m, f) => line('warn', m, f),
    error: (m, f) => line('error', m, f),
    access: (f) => {
      pending.push(f)
      times.push(Date.now())
      if (pending.length >= 256) flush()
      else if (!scheduled) { scheduled = true; setImmediate(flush) }
    },
    setLevel: (l) => { min = RANK[l] },
  }
}

// one ISO time string per millisecond: a busy gateway writes many access lines in the same one
let isoMs = 0
let iso = ''
const isoAt = (ms: number): string => {
  if (ms !== isoMs) { isoMs = ms; iso = new Date(ms).toISOString() }
  return iso
}

// printable ASCII without " and \: written as it is (JSON.stringify for anything else)
const PLAIN = /^[\x20\x21\x23-\x5b\x5d-\x7e]*$/

/**
 * An access line: the same JSON as `JSON.stringify({ time, level, msg, ...fields })`, written
 * field by field (no merged object per line). Field names are the gateway's own identifiers.
 * @param ms when the line was made, epoch ms
 */
function accessLine(f: Fields, ms: number): string {
  let s = `{"time":"${isoAt(ms)}","level":"info","msg":"request"`
  for (const k in f) {
    const v = f[k]
    if (v === undefined) continue
    s += typeof v === 'string'
      ? `,"${k}":${PLAIN.test(v) ? `"${v}"` : JSON.stringify(v)}`
      : `,"${k}":${typeof v === 'number' && !Number.isFinite(v) ? 'null' : String(v)}`
  }
  return `${s}}\n`
}

// what is still gathered when the process exits (process.exit after a stop) is written then
const unflushed = new Set<() => void>()
process.once('exit', () => { for (const f of unflushed) f() })
