/**
 * An error that is an expected answer rather than a fault — a refusal to a client (a problem),
 * a store that is full or cannot answer — made without a stack trace: nothing reads one, and
 * capturing one (with its async frames) costs more than the rest of a refusal. An engine's own
 * error, passed as `cause`, keeps its stack.
 */
export class TracelessError extends Error {
  constructor(message: string, options?: ErrorOptions) {
    const limit = Error.stackTraceLimit
    Error.stackTraceLimit = 0
    super(message, options)
    Error.stackTraceLimit = limit
  }
}
