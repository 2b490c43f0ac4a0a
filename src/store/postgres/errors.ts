/**
 * What a failed statement says about the database: answered with an error (and rolled the
 * statement back), or could not be reached or run at all. Read from the SQLSTATE of the error
 * (https://www.postgresql.org/docs/current/errcodes-appendix.html).
 */
import pg from 'pg'

/**
 * Whether PostgreSQL answered a batch with an error, so its one statement rolled back and each
 * call may be made again alone: a SQLSTATE outside class 08 (connection exception) and 57P
 * (shutdown, crash). A connection lost without an answer may have committed the batch.
 */
export function refusedAndRolledBack(e: unknown): boolean {
  // a DatabaseError only: Node's own codes (EPIPE, ECONNRESET) are five letters too, and a
  // socket that broke after the statement was sent may have committed it
  return e instanceof pg.DatabaseError && typeof e.code === 'string' && !e.code.startsWith('08') && !e.code.startsWith('57P')
}

/**
 * Whether the server ran the statement and raised `e` itself while it still answers (a check, a
 * trigger, a RAISE, a deadlock: the statement rolled back). Not when it could not be reached or
 * could not run it: no SQLSTATE (a socket error, pg's query timeout), class 08 (connection), 28
 * and 3D (refused at connect), 53 (out of connections, memory or disk) and 57 (statement timeout,
 * cancel, shutdown) — a second statement then would only wait or fail the same way.
 */
export function raisedByServer(e: unknown): boolean {
  return e instanceof pg.DatabaseError && typeof e.code === 'string' && !/^(08|28|3D|53|57)/.test(e.code)
}

/** A schema made before the registrations: a message that says what to do. */
export const registrationsMissing = (e: unknown): unknown => {
  const code = (e as { code?: string } | undefined)?.code
  return code === '42P01' || code === '42883'
    ? new Error('the schema has no fg_registrations_v1 (fencing.serialize: store): it was made by an older fencegate; run `fencegate migrate --config PATH` (or set store.migrate: true)', { cause: e })
    : e
}
