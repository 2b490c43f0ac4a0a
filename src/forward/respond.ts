/**
 * The respond step: an answer written to the client — stored (a replay), captured whole, or
 * streamed as it comes from the upstream's live exchange (`Answer.call`, ./upstream-call.ts)
 * (RFC 9110 §7.6: end-to-end headers, the gateway's Via and request id). One writer for replays
 * and forwarded answers alike; a replay's outcome is noted here.
 */
import type { ServerResponse } from 'node:http'
import type { Exchange } from '../exchange.js'
import type { UnknownReason } from '../outcomes.js'
import type { StoredResponse } from '../store/index.js'
import { flat, VIA } from './headers.js'
import type { Answer } from './send.js'

/**
 * The header lines the gateway adds to an answer: Via, the request id, and for a replay
 * `Idempotent-Replayed: true`.
 */
export function addedHeaders(idHeader: string, requestId: string, replayed: boolean): string[] {
  return replayed ? ['via', VIA, 'idempotent-replayed', 'true', idHeader, requestId] : ['via', VIA, idHeader, requestId]
}

/**
 * Writes a whole answer byte for byte: a stored one, or one captured whole.
 * @param added ./respond.ts `addedHeaders`; the answer's own lines of the request id header are left out
 */
export function respondWhole(outgoing: ServerResponse, status: number, headers: readonly [string, string][], body: Buffer, added: string[], idHeader: string): void {
  outgoing.writeHead(status, flat(headers, added, idHeader))
  outgoing.end(body)
}

/** Writes a stored response as the answer to `x`, byte for byte; the request id is this request's, not the first one's. */
export function respondReplay(x: Exchange, r: StoredResponse): void {
  const idHeader = x.route!.requestIdHeader
  x.facts.outcome = 'replayed'
  respondWhole(x.outgoing, r.status, r.headers, r.body, addedHeaders(idHeader, x.facts.requestId, true), idHeader)
}

/**
 * Writes an upstream answer to `x`: whole when it was captured whole, else its headers, what was
 * captured, and the rest as it comes (pausing the upstream while the client is slow).
 * @param brokenOff notes an answer that broke off mid-body (the upstream reset or went silent,
 *   or the client left) for `reason` and returns it; the exchange is then aborted, and the
 *   client's connection must be destroyed (never end a truncated body cleanly) once the outcome
 *   is recorded
 * @returns undefined when the answer was written whole; else why it broke off
 */
export async function respondAnswer(x: Exchange, a: Answer, brokenOff: (reason: UnknownReason) => UnknownReason): Promise<UnknownReason | undefined> {
  const { outgoing, facts: f } = x
  const idHeader = x.route!.requestIdHeader
  const added = addedHeaders(idHeader, f.requestId, false)
  const call = a.call
  try {
    if (a.body !== undefined) {
      respondWhole(outgoing, a.status, a.headers, a.body, added, idHeader)
      return undefined
    }
    outgoing.writeHead(a.status, flat(a.headers, added, idHeader))
    // captured past its limit (the record keeps only the status), or streamed from the first chunk
    if (call.overflow || await call.body()) {
      for (const ch of call.chunks) outgoing.write(ch)
      await call.streamRest(outgoing)
    } else {
      outgoing.end(call.chunks.length === 1 ? call.chunks[0] : Buffer.concat(call.chunks, call.size))
    }
    return undefined
  } catch {
    const reason = outgoing.writableFinished ? undefined : brokenOff(call.unknownReason)
    call.abort()
    if (reason === undefined) outgoing.destroy()
    return reason
  } finally {
    outgoing.off('close', a.onClose)
    a.span?.end(a.status)
  }
}
