/**
 * The requests a bench sends (re-exported by bench/lib.ts): the run's tag, keys and tokens, the
 * `unique` request stream, the shared autocannon options, and what went wrong with a run's requests.
 */
import autocannon from 'autocannon'
import { randomBytes } from 'node:crypto'
import { BODY, BASE_HEADERS } from './basics.js'

// ------------------------------------------------------------------------------- requests

/** Tags the keys and accounts of this process's requests, so they never meet another run's. */
export const runTag = randomBytes(3).toString('hex')
let tokenSeq = 0 // one counter for the whole process, so no resource ever sees a token go back
let keySeq = 0
let connSeq = 0
/** A new idempotency key, never used by this run or another (`<prefix>-<runTag>-<n>`). */
export const nextKey = (prefix = 'k') => `${prefix}-${runTag}-${++keySeq}`
/** The next fencing token: higher than every one sent before in this process. */
export const nextToken = () => String(++tokenSeq)

/**
 * bench/run.ts's `unique` stream: each connection (autocannon client) writes its own account
 * under `/<prefix>/`, or the next of `paths` in turn when given; each request gets the next token
 * and a new key (either left out with `key: false` / `token: false`, for routes with one check).
 * A connection has one request in flight, so its tokens arrive in order.
 */
export function uniqueRequests(options: { prefix?: string; key?: boolean; token?: boolean; paths?: readonly string[] } = {}): Pick<autocannon.Options, 'setupClient'> {
  const { prefix = 'accounts', key = true, token = true, paths } = options
  let n = 0
  return {
    setupClient(client) {
      const path = paths ? paths[n++ % paths.length] : `/${prefix}/acct-${runTag}-${++connSeq}/transfers`
      client.setRequests([{
        method: 'POST',
        path,
        body: BODY,
        setupRequest: (req) => ({
          ...req,
          headers: { ...BASE_HEADERS, ...(key ? { 'idempotency-key': nextKey() } : {}), ...(token ? { 'fencing-token': nextToken() } : {}) },
        }),
      }])
    },
  }
}

/** The autocannon options every bench load shares: `POST` of BODY with BASE_HEADERS, no pipelining. */
export const postLoad = (url: string, connections: number) =>
  ({ url, connections, pipelining: 1, method: 'POST', body: BODY, headers: BASE_HEADERS }) satisfies autocannon.Options

/** What a run's request-level checks found wrong: non-2xx answers, connection errors, timeouts. */
export function requestProblems(result: autocannon.Result): string[] {
  const problems: string[] = []
  if (result.non2xx) {
    const codes: Record<string, number> = {}
    for (const [code, s] of Object.entries(result.statusCodeStats)) codes[code] = s.count
    problems.push(`${result.non2xx} answers other than 2xx: ${JSON.stringify(codes)}`)
  }
  if (result.errors) problems.push(`${result.errors} connection errors`)
  if (result.timeouts) problems.push(`${result.timeouts} timeouts`)
  return problems
}
