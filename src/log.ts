/**
 * One JSON object per line on stderr. Never a raw idempotency key, Authorization, cookie or
 * body: callers pass routes, reasons and hashes only.
 */
export type Fields = Record<string, string | number | boolean | undefined>

export interface Logger {
  info(msg: string, fields?: Fields): void
  warn(msg: string, fields?: Fields): void
  error(msg: string, fields?: Fields): void
}

export function createLogger(out: NodeJS.WritableStream = process.stderr): Logger {
  const line = (level: string, msg: string, fields?: Fields) => {
    out.write(`${JSON.stringify({ time: new Date().toISOString(), level, msg, ...fields })}\n`)
  }
  return {
    info: (m, f) => line('info', m, f),
    warn: (m, f) => line('warn', m, f),
    error: (m, f) => line('error', m, f),
  }
}
