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
  // Access lines are gathered and written once per event-loop turn (or every 16 KiB): stderr on a
  // file or pipe is written synchronously, one system call per write, and a busy gateway makes a
  // line per refused or replayed request. Any other line first flushes them, so order is kept.
  let pending = ''
  let scheduled = false
  const flush = () => {
    scheduled = false
    if (!pending) return
    const chunk = pending
    pending = ''
    out.write(chunk)
  }
  const line = (lvl: LogLevel, msg: string, fields?: Fields) => {
    if (RANK[lvl] < min) return
    if (pending) flush()
    out.write(`${JSON.stringify({ time: new Date().toISOString(), level: lvl, msg, ...fields })}\n`)
  }
  unflushed.add(flush)
  return {
    debug: (m, f) => line('debug', m, f),
    info: (m, f) => line('info', m, f),
    warn: (m, f) => line('warn', m, f),
    error: (m, f) => line('error', m, f),
    access: (f) => {
      pending += accessLine(f)
      if (pending.length >= 16_384) flush()
      else if (!scheduled) { scheduled = true; setImmediate(flush) }
    },
    setLevel: (l) => { min = RANK[l] },
  }
}

// one ISO time string per millisecond: a busy gateway writes many access lines in the same one
let isoMs = 0
let iso = ''
const isoNow = (): string => {
  const ms = Date.now()
  if (ms !== isoMs) { isoMs = ms; iso = new Date(ms).toISOString() }
  return iso
}

/**
 * An access line: the same JSON as `JSON.stringify({ time, level, msg, ...fields })`, written
 * field by field (no merged object per line). Field names are the gateway's own identifiers.
 */
function accessLine(f: Fields): string {
  let s = `{"time":"${isoNow()}","level":"info","msg":"request"`
  for (const k in f) {
    const v = f[k]
    if (v !== undefined) s += `,"${k}":${typeof v === 'string' ? JSON.stringify(v) : typeof v === 'number' && !Number.isFinite(v) ? 'null' : String(v)}`
  }
  return `${s}}\n`
}

// what is still gathered when the process exits (process.exit after a stop) is written then
const unflushed = new Set<() => void>()
process.once('exit', () => { for (const f of unflushed) f() })
