/**
 * Sends one probe (contract §4a) to the route's upstream: the route's own pool and
 * `upstream.timeout`, the request id of the attempt it settles, the answer's body read up to
 * `idempotency.maxResponseBytes` (the settled record keeps it). What came back is sorted by the
 * route's `probe.applied` / `probe.notApplied` lists.
 */
import type { Dispatcher, Pool } from 'undici'
import type { SettleConfig } from '../../config/schema.js'
import type { StoredResponse } from '../../store/index.js'
import { UpstreamCall } from '../../forward/upstream-call.js'
import { responseHeaders, VIA } from '../../forward/headers.js'
import type { ProbeRequest } from './request.js'

import type { PROBE_ANSWER_LABELS } from '../../telemetry/route-series.js'

/** The `answer` label of `fencegate_settle_probes_total`. */
export type ProbeAnswer = typeof PROBE_ANSWER_LABELS[number]

/**
 * What a probe found: `applied` with the response to store (status, end-to-end headers plus
 * `fencegate-settled: probe`, body), `not_applied`, `undecided` (another status), or `error` (no
 * answer: timeout, refused, reset; or one larger than `maxResponseBytes`: `tooLarge`).
 */
export type ProbeOutcome =
  | { answer: 'applied'; status: number; response: StoredResponse; ms: number }
  | { answer: 'not_applied' | 'undecided'; status: number; ms: number }
  | { answer: 'error'; error: string; status?: number; tooLarge?: true; ms: number }

const NOT_SENT_YET = { markSent() {} }

export interface ProbeTarget {
  pool: Pool
  /** the upstream's Host (`host[:port]`) */
  host: string
  /** lower-case request id header name */
  requestIdHeader: string
  timeoutMs: number
  maxResponseBytes: number
  settle: SettleConfig
}

/** Sends `p` and sorts the answer; never throws. */
export async function sendProbe(t: ProbeTarget, p: ProbeRequest): Promise<ProbeOutcome> {
  const headers: string[] = []
  for (const [n, v] of p.headers) headers.push(n, v)
  headers.push(t.requestIdHeader, p.requestId, 'host', t.host, 'via', VIA)
  // at least one byte captured, so that an empty answer is read whole too
  const call = new UpstreamCall(Math.max(1, t.maxResponseBytes), t.timeoutMs, NOT_SENT_YET)
  const started = performance.now()
  const ms = () => Math.round(performance.now() - started)
  try {
    await call.start(t.pool, { path: p.path, method: p.method as Dispatcher.HttpMethod, headers })
    const overflow = await call.body()
    if (overflow) {
      call.abort()
      return { answer: 'error', status: call.status, tooLarge: true, ms: ms(), error: `the answer (status ${call.status}) is larger than idempotency.maxResponseBytes (${t.maxResponseBytes} bytes)` }
    }
  } catch (e) {
    const err = e as Error & { code?: string; cause?: { code?: string } }
    return { answer: 'error', ms: ms(), error: call.timedOut ? `no answer within ${t.timeoutMs} ms (upstream.timeout)` : err.code ?? err.cause?.code ?? err.message }
  }
  const status = call.status
  const { applied, notApplied } = t.settle.probe
  if (applied.includes(status)) {
    const body = call.chunks.length === 1 ? call.chunks[0] : Buffer.concat(call.chunks, call.size)
    const headerPairs = responseHeaders(call.lines).filter(([n]) => n !== 'fencegate-settled')
    headerPairs.push(['fencegate-settled', 'probe'])
    return { answer: 'applied', status, response: { status, headers: headerPairs, body }, ms: ms() }
  }
  return { answer: notApplied.includes(status) ? 'not_applied' : 'undecided', status, ms: ms() }
}
