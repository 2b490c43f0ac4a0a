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
  const line = (lvl: LogLevel, msg: string, fields?: Fields) => {
    if (RANK[lvl] < min) return
    out.write(`${JSON.stringify({ time: new Date().toISOString(), level: lvl, msg, ...fields })}\n`)
  }
  return {
    debug: (m, f) => line('debug', m, f),
    info: (m, f) => line('info', m, f),
    warn: (m, f) => line('warn', m, f),
    error: (m, f) => line('error', m, f),
    access: (f) => out.write(`${JSON.stringify({ time: new Date().toISOString(), level: 'info', msg: 'request', ...f })}\n`),
    setLevel: (l) => { min = RANK[l] },
  }
}
