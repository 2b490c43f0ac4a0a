/**
 * The front door: everything refused before routing, in one place, each refusal a `Problem`
 * of the table (./problems.ts) written by its one serializer.
 *
 * On the listener, outside the request metrics and the attempt log (like the requests Node's
 * parser refuses), answered with a new request id and the connection closed after the answer:
 * - what Node's HTTP parser refuses (`onClientError`): smuggling attempts such as Content-Length
 *   with Transfer-Encoding, bad bytes, unknown methods, oversized heads, timeouts;
 * - what the upstream could read otherwise than the gateway (`screened`): an HTTP version other
 *   than 1.0 and 1.1, a "#fragment" in the request target;
 * - a request target or Host that makes no URL to route on (`routingUrl`): a target such as
 *   "*", a bad or missing Host header, a raw backslash in the path;
 * - an `Expect: 100-continue` upload larger than every route accepts (`hopelessUpload`).
 * Each is written by the one writer of refusals (./refuse.ts `refuse`, without facts). And the
 * request id a client may give (`saneRequestId`), used only when it is harmless.
 */
import type { IncomingMessage, ServerResponse } from 'node:http'
import type { Duplex } from 'node:stream'
import { Problem } from './problems.js'
import { BodyLimit } from './body.js'
import { refuse } from './refuse.js'

/**
 * A client's request id is used when it is 1–200 of `A-Z a-z 0-9 - _ . : / + =` (a UUID, a
 * ULID, a trace-like id); anything else is replaced, never echoed into logs or upstream.
 */
const REQUEST_ID = /^[A-Za-z0-9\-_.:/+=]{1,200}$/
export function saneRequestId(v: string | string[] | undefined): string | undefined {
  return typeof v === 'string' && REQUEST_ID.test(v) ? v : undefined
}

/**
 * Refuses what the upstream could read otherwise than the gateway, before routing:
 * - an HTTP version other than 1.0 and 1.1 (505, RFC 9110 §15.6.6): Node's parser passes
 *   "HTTP/2.0" and "HTTP/0.9" request lines (other versions it refuses, see onClientError);
 *   they are not HTTP/1.1 framing the gateway can vouch for;
 * - a "#fragment" in the request target (400 bad-path): no form of request-target has one
 *   (RFC 9112 §3.2); Hono routes and fences the path before the "#" while the target is
 *   forwarded whole, so the upstream could read another path. Envoy refuses it too (its default
 *   since 1.19.1; stripping is opt-in, keeping it deprecated as unsafe).
 * The body of a refused request is never read: the connection is closed after the answer.
 * @returns true when the request was answered
 */
export function screened(req: IncomingMessage, res: ServerResponse, idHeader: string): boolean {
  let p: Problem | undefined
  if (req.httpVersionMajor !== 1 || (req.httpVersionMinor !== 1 && req.httpVersionMinor !== 0)) {
    p = new Problem('http-version-not-supported', `This gateway speaks HTTP/1.1 and HTTP/1.0, not HTTP/${req.httpVersion}; nothing was forwarded.`)
  } else if (req.url !== undefined && req.url.includes('#')) {
    p = new Problem('bad-path', 'The request target carries a "#fragment", which no HTTP request target may hold (RFC 9112 §3.2); nothing was forwarded.')
  }
  if (!p) return false
  refuse({ outgoing: res }, p, { idHeader })
  return true
}

/**
 * `Expect: 100-continue` (RFC 9110 §10.1.1): a body larger than every route accepts is refused
 * with 413 before the client sends it (a body over a smaller route's limit is refused after
 * routing, once it is sent).
 * @param largest the largest body any route accepts
 * @returns true when the request was answered
 */
export function hopelessUpload(req: IncomingMessage, res: ServerResponse, largest: number, idHeader: string): boolean {
  const limit = new BodyLimit(largest)
  if (!limit.declaredOver(req.headers)) return false
  refuse({ outgoing: res }, limit.tooLarge(), { idHeader })
  return true
}

// What Node's parser refuses (clientError), as problems instead of Node's bare status lines.
const CLIENT_ERRORS: Record<string, () => Problem> = {
  HPE_HEADER_OVERFLOW: () => new Problem('request-headers-too-large', 'The request line and headers are larger than this gateway accepts.'),
  HPE_CHUNK_EXTENSIONS_OVERFLOW: () => new Problem('body-too-large', 'The chunk extensions of the request body are larger than this gateway accepts.'),
  ERR_HTTP_REQUEST_TIMEOUT: () => new Problem('request-timeout', 'The request did not arrive whole within the server\'s timeouts (server.headersTimeout, server.requestTimeout).'),
}

/**
 * Answers a request Node's HTTP parser refused with a problem and closes the connection.
 * Nothing of such a request reaches the app, hence nothing the upstream. As Node does: an
 * answer only when no response has begun on the connection.
 */
export function onClientError(idHeader: string) {
  return (err: Error & { code?: string; reason?: string }, socket: Duplex): void => {
    const current = (socket as Duplex & { _httpMessage?: ServerResponse | null })._httpMessage
    if (err.code === 'ECONNRESET' || !socket.writable || current?.headersSent) {
      socket.destroy()
      return
    }
    // llhttp's HPE_INVALID_VERSION also stands for a malformed request line ("Expected CRLF after version")
    const p = err.code === 'HPE_INVALID_VERSION' && err.reason === 'Invalid HTTP version'
      ? new Problem('http-version-not-supported', 'This gateway speaks HTTP/1.1 and HTTP/1.0 only; nothing was forwarded.')
      : CLIENT_ERRORS[err.code ?? '']?.() ?? new Problem('request-malformed', `The request is not well-formed HTTP/1.1 (${err.code ?? 'parse error'}${err.reason ? `: ${err.reason}` : ''}); nothing was forwarded.`)
    refuse({ outgoing: socket }, p, { idHeader })
  }
}

// The rules @hono/node-server applies when it makes a Request of Node's request (its url.ts):
// the gateway routes on the same URL it did when it ran on that adapter.
const PLAIN_TARGET = /^\/[!#$&-;=?-\[\]_a-z~]*$/
const DOT_SEGMENT_TARGET = /\/\.\.?(?:[/?#]|$)/
const PLAIN_HOST = /^[a-z0-9._-]+(?::(?:[1-5]\d{3,4}|[6-9]\d{3}))?$/

/** A raw backslash before the query: a URL parser would read it as "/", the upstream may not. */
const backslashInPath = (target: string): boolean => {
  const b = target.indexOf('\\')
  if (b < 0) return false
  const q = target.indexOf('?')
  return q < 0 || b < q
}

const unroutable = (why: string): Problem =>
  new Problem('request-malformed', `The request cannot be routed (${why}); nothing was forwarded.`)

/**
 * The absolute URL a request is routed on: its absolute-form target (RFC 9112 §3.2.2), or
 * `http://` + Host + its origin-form target, normalised by the WHATWG URL parser when it holds
 * anything but plain characters.
 * @returns the URL, or the 400 request-malformed to answer: "*" or another target that is no
 *   path, a missing or bad Host header (RFC 9112 §3.2), a raw backslash in the path
 */
export function routingUrl(req: IncomingMessage): string | Problem {
  const target = req.url ?? ''
  if (target[0] !== '/' && (target.startsWith('http://') || target.startsWith('https://'))) {
    if (backslashInPath(target)) return unroutable('Invalid absolute URL')
    try { return new URL(target).href } catch { return unroutable('Invalid absolute URL') }
  }
  const host = req.headers.host
  if (!host) return unroutable('Missing host header')
  const scheme = (req.socket as { encrypted?: boolean }).encrypted ? 'https' : 'http'
  const url = `${scheme}://${host}${target}`
  if (!PLAIN_HOST.test(host)) {
    if (backslashInPath(target)) return unroutable('Backslash in request path')
    let parsed: URL
    try { parsed = new URL(url) } catch { return unroutable('Invalid URL') }
    const bare = (host.includes(':') ? host.replace(/:\d+$/, '') : host).toLowerCase()
    if (parsed.hostname.length !== host.length && parsed.hostname !== bare) return unroutable('Invalid host header')
    return parsed.href
  }
  if (target.length === 0) return `${url}/`
  if (target.charCodeAt(0) !== 47) return unroutable('Invalid URL')
  if (PLAIN_TARGET.test(target) && !DOT_SEGMENT_TARGET.test(target)) return url
  if (backslashInPath(target)) return unroutable('Backslash in request path')
  try { return new URL(url).href } catch { return unroutable('Invalid URL') }
}
