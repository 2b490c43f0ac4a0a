/**
 * Header rules for a forwarding proxy (RFC 9110 §7.6): hop-by-hop fields and those named in
 * `Connection` are removed in both directions; the gateway adds `Via` and the X-Forwarded-*
 * fields after that removal, so a client cannot make it drop them.
 */
import type { IncomingMessage } from 'node:http'
import { HOP_BY_HOP } from '../hop-by-hop.js'

// Set by the gateway itself, never copied from the client.
const REPLACED_ON_REQUEST = new Set(['host', 'x-forwarded-for', 'x-forwarded-host', 'x-forwarded-proto', 'via', 'expect'])

export const VIA = '1.1 fencegate'

/** The field names listed in Connection header values, lower-cased. */
export function connectionNamed(values: string | string[] | undefined): Set<string> | undefined {
  if (values === undefined) return undefined
  // the usual values name only fields that are removed anyway
  if (values === 'keep-alive' || values === 'close') return undefined
  const out = new Set<string>()
  for (const v of Array.isArray(values) ? values : [values]) {
    for (const part of v.split(',')) {
      const name = part.trim().toLowerCase()
      if (name) out.add(name)
    }
  }
  return out
}

const peerAddress = (incoming: IncomingMessage): string => {
  const a = incoming.socket.remoteAddress ?? ''
  return a.startsWith('::ffff:') ? a.slice(7) : a
}

/**
 * The header lines to send upstream, as a flat [name, value, name, value, ...] list.
 * @param upstreamHost the Host of the upstream (`host[:port]`)
 * @param keep lower-case names never removed as Connection-named (the route's token and key headers)
 * @param requestId the request id header (lower-case name) and value: the client's lines of it are
 *   replaced by this one (the same value when the client's was sane)
 * @param traceFields lower-case fields the gateway's trace propagator writes: with tracing on, the
 *   client's `traceparent` (tracestate, baggage) is replaced, never appended to
 */
export function requestHeaders(incoming: IncomingMessage, upstreamHost: string, keep?: ReadonlySet<string>, requestId?: readonly [string, string], traceFields: readonly string[] = []): string[] {
  const raw = incoming.rawHeaders
  const named = connectionNamed(incoming.headers.connection)
  // the fencing token and idempotency key are forwarded so the upstream can check them too: a
  // client naming them in Connection must not switch that check off
  if (named && keep) for (const k of keep) named.delete(k)
  const out: string[] = []
  let xff: string | undefined
  let via: string | undefined
  const trace = traceFields.length > 0 ? traceFields : undefined
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i]
    const lower = name.toLowerCase()
    if (lower === 'x-forwarded-for') { xff = xff === undefined ? raw[i + 1] : `${xff}, ${raw[i + 1]}`; continue }
    if (lower === 'via') { via = via === undefined ? raw[i + 1] : `${via}, ${raw[i + 1]}`; continue }
    if (HOP_BY_HOP.has(lower) || REPLACED_ON_REQUEST.has(lower) || named?.has(lower) || trace?.includes(lower) || lower === requestId?.[0]) continue
    out.push(name, raw[i + 1])
  }
  if (requestId) out.push(requestId[0], requestId[1])
  // X-Forwarded-For named in Connection is dropped as hop-by-hop, and the peer then starts it anew
  if (named?.has('x-forwarded-for')) xff = undefined
  const peer = peerAddress(incoming)
  out.push('host', upstreamHost)
  out.push('x-forwarded-for', xff ? `${xff}, ${peer}` : peer)
  if (incoming.headers.host) out.push('x-forwarded-host', incoming.headers.host)
  out.push('x-forwarded-proto', (incoming.socket as { encrypted?: boolean }).encrypted ? 'https' : 'http')
  out.push('via', via ? `${via}, ${VIA}` : VIA)
  return out
}

/**
 * The upstream's end-to-end response header lines, as [name, value] pairs in the order they
 * came; several lines of one field (Set-Cookie) stay several.
 * @param lines [name, value, ...] with lower-case names (./upstream-call.ts `lines`)
 */
export function responseHeaders(lines: readonly string[]): [string, string][] {
  let named: Set<string> | undefined
  for (let i = 0; i < lines.length; i += 2) {
    if (lines[i] !== 'connection') continue
    const one = connectionNamed(lines[i + 1])
    if (one) for (const n of one) (named ??= new Set()).add(n)
  }
  const out: [string, string][] = []
  for (let i = 0; i < lines.length; i += 2) {
    const name = lines[i]
    if (HOP_BY_HOP.has(name) || named?.has(name)) continue
    out.push([name, lines[i + 1]])
  }
  return out
}

/**
 * Flattens [name, value] pairs for `ServerResponse.writeHead`, then `extra`.
 * @param skip a lower-case name left out of `pairs` (one that `extra` sets instead)
 */
export function flat(pairs: readonly [string, string][], extra: string[] = [], skip?: string): string[] {
  const out: string[] = []
  for (const [k, v] of pairs) if (k !== skip) out.push(k, v)
  out.push(...extra)
  return out
}
