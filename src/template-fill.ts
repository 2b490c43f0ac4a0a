/**
 * Reads template placeholders (./config/template.ts) from a request: path parameters, headers,
 * query parameters — one value per input, or `Ambiguous` when the upstream could read the input
 * otherwise than the gateway does. The gateway forwards the request target and the header lines
 * unchanged, so whatever another server may make of them is what the fencing resource and the
 * idempotency scope must not depend on:
 *
 * - path parameter (decoded as Hono decodes it; the raw target where that loses information):
 *   a ";" (raw or %3B: Tomcat, Jetty and Spring strip what follows as matrix parameters, some
 *   after decoding), an encoded slash %2F (a server that decodes it reads other segments), a
 *   backslash %5C (IIS and others read it as "/"; a raw one is refused by @hono/node-server),
 *   a NUL %00, or a percent-escape left after decoding (double-encoded %252F, which a server
 *   that decodes twice reads as "/", or bytes that are not UTF-8, which lenient servers turn
 *   into the same U+FFFD).
 * - header: given on more than one line (servers take the first, the last or the comma-joined
 *   list), or as a variant with "_" for "-" (`X_Account` for `X-Account`: CGI-style servers —
 *   PHP, Rack, WSGI — read both as HTTP_X_ACCOUNT). One line holding a comma list is one value.
 * - query parameter (read from the raw target, split on "&"): given twice (Rails and PHP read
 *   the last, Express an array, Hono the first), also given in a spelling other servers read as
 *   the same name (`account[]`, `account[x]`: PHP, Rails, qs; PHP reads " " and "." as "_"),
 *   next to a ";" (some servers — Rack, Python before 3.9.2 — split on it as on "&"), NUL %00,
 *   not UTF-8, or a percent-escape left after decoding. An encoded slash or backslash in a
 *   query value is kept: every query decoder reads `a%2Fb` as `a/b` (and URLSearchParams
 *   encodes "/" that way), so it cannot name another resource there.
 */
import type { Exchange } from './exchange.js'
import type { Ambiguous, TemplateSource } from './config/template.js'

// Constant answers: the refusal path allocates nothing either.
const TWICE: Ambiguous = { ambiguous: 'is given twice, and servers differ on which one they read' }
const HEADER_TWICE: Ambiguous = { ambiguous: 'is given on more than one line, and servers differ on which one they read' }
const HEADER_VARIANT: Ambiguous = { ambiguous: 'is (also) given with "_" for "-", which CGI-style servers (PHP, Rack, WSGI) read as the same header' }
const SEMICOLON: Ambiguous = { ambiguous: 'carries ";", after which servers such as Tomcat strip the rest as matrix parameters' }
const QUERY_VARIANT: Ambiguous = { ambiguous: 'is (also) given in another spelling — with brackets (name[]) or with " " or "." for "_" — that PHP, Rails or Express (qs) read as the same parameter' }
const QUERY_SEMICOLON: Ambiguous = { ambiguous: 'is next to ";", which some servers split query parameters on' }
const ENCODED_SLASH: Ambiguous = { ambiguous: 'carries an encoded slash (%2F), which a server that decodes it reads as another path' }
const BACKSLASH: Ambiguous = { ambiguous: 'carries a backslash (%5C), which some servers read as "/"' }
const NUL: Ambiguous = { ambiguous: 'carries a NUL character (%00)' }
const ESCAPE_LEFT: Ambiguous = { ambiguous: 'holds a percent-escape after decoding (double-encoded, or bytes that are not UTF-8), which servers decode differently' }

// One test for the common case: a parameter value with none of these is taken as it is.
const PARAM_SUSPECT = /[;/\\\0%]/
const ESCAPE = /%[0-9A-Fa-f]{2}/
const ENCODED_SLASH_RAW = /%2f/i
const PLUS = /\+/g
const ESCAPES = /(?:%[0-9A-Fa-f]{2})+/g
const decodeRun = (run: string): string => { try { return decodeURIComponent(run) } catch { return run } }

/** The request's target up to its query (or fragment). */
const pathOf = (url: string): string => {
  const q = url.indexOf('?')
  const h = url.indexOf('#')
  const end = q < 0 ? h : h < 0 ? q : Math.min(q, h)
  return end < 0 ? url : url.slice(0, end)
}

/** A path parameter as Hono decoded it, or why it is ambiguous. */
export function paramValue(decoded: string | undefined, rawTarget: string): string | undefined | Ambiguous {
  if (decoded === undefined || !PARAM_SUSPECT.test(decoded)) return decoded
  if (decoded.includes(';')) return SEMICOLON
  if (decoded.includes('\\')) return BACKSLASH
  if (decoded.includes('\0')) return NUL
  if (decoded.includes('%') && ESCAPE.test(decoded)) return ESCAPE_LEFT
  // a "/" in a value comes from %2F, or from a raw "/" of a parameter spanning segments
  // (`:path{.+}`): decoding loses which, so any %2F in the path counts
  if (decoded.includes('/') && ENCODED_SLASH_RAW.test(pathOf(rawTarget))) return ENCODED_SLASH
  return decoded
}

const lower = (ch: number): number => (ch >= 65 && ch <= 90 ? ch + 32 : ch)

/**
 * How raw header name `raw` relates to lower-case `name`: 2 the same field, 1 the same once
 * "_" and "-" are taken as one (a CGI-style server's reading), 0 another field.
 */
function sameField(raw: string, name: string): 0 | 1 | 2 {
  if (raw.length !== name.length) return 0
  let exact: 0 | 1 | 2 = 2
  for (let i = 0; i < name.length; i++) {
    const a = lower(raw.charCodeAt(i))
    const b = name.charCodeAt(i)
    if (a === b) continue
    if ((a === 45 || a === 95) && (b === 45 || b === 95)) { exact = 1; continue }
    return 0
  }
  return exact
}

/** A header's one value, from the raw header lines, or why it is ambiguous. */
export function headerValue(rawHeaders: readonly string[], name: string): string | undefined | Ambiguous {
  let found = -1
  for (let i = 0; i < rawHeaders.length; i += 2) {
    const same = sameField(rawHeaders[i], name)
    if (same === 0) continue
    if (found >= 0) return HEADER_TWICE
    if (same === 1) return HEADER_VARIANT
    found = i
  }
  return found < 0 ? undefined : rawHeaders[found + 1]
}

/**
 * Decodes a query component as form decoding does ("+" is a space); escapes that are not UTF-8,
 * and a "%" that starts no escape, are left as they are (as Hono does).
 */
function formDecode(raw: string): string {
  const s = raw.includes('+') ? raw.replace(PLUS, ' ') : raw
  if (!s.includes('%')) return s
  try {
    return decodeURIComponent(s)
  } catch {
    return s.replace(ESCAPES, decodeRun)
  }
}

// PHP reads " " and "." in a parameter name as "_"
const PHP_MANGLED = /[ .]/g
const mangle = (s: string): string => (s.includes(' ') || s.includes('.') ? s.replace(PHP_MANGLED, '_') : s)

/**
 * How decoded query key `k` relates to `name`: 2 it is `name`; 1 a server reads it as `name`
 * too — `name[]`, `name[x]` (PHP, Rails, qs in Express) or `name` with " " or "." for "_"
 * (PHP) — 0 another key.
 */
function sameKey(k: string, name: string): 0 | 1 | 2 {
  if (k === name) return 2
  const b = k.indexOf('[')
  const base = b > 0 ? k.slice(0, b) : k
  return base === name || mangle(base) === mangle(name) ? 1 : 0
}

const MANGLEABLE = /[ ._]/

/**
 * `sameKey` for the raw key `target[from, to)`, without slicing the keys that cannot match.
 * @param mangleable whether `name` holds " ", "." or "_"
 */
function keyMatch(target: string, from: number, to: number, name: string, mangleable: boolean): 0 | 1 | 2 {
  for (let i = from; i < to; i++) {
    const ch = target.charCodeAt(i)
    if (ch === 37 || ch === 43) return sameKey(formDecode(target.slice(from, to)), name) // % or +
  }
  const len = to - from
  if (len === name.length) return target.startsWith(name, from) ? 2 : mangleable ? sameKey(target.slice(from, to), name) : 0
  if (len < name.length || target.charCodeAt(from + name.length) !== 91) return 0 // "["
  return sameKey(target.slice(from, to), name)
}

/**
 * A query parameter's one value, read from the raw request target, or why it is ambiguous.
 * Parameters are split on "&" and on ";" alike, so a key hidden behind a ";" is counted too.
 */
export function queryValue(target: string, name: string): string | undefined | Ambiguous {
  const q = target.indexOf('?')
  if (q < 0) return undefined
  let end = target.indexOf('#', q)
  if (end < 0) end = target.length
  let raw: string | undefined
  let before = 38 // "&"
  const mangleable = MANGLEABLE.test(name)
  for (let i = q + 1; i <= end;) {
    let j = i
    let eq = -1
    while (j < end) {
      const ch = target.charCodeAt(j)
      if (ch === 38 || ch === 59) break
      if (ch === 61 && eq < 0) eq = j
      j++
    }
    const after = j < end ? target.charCodeAt(j) : 38
    if (eq < 0) eq = j
    if (j > i) {
      const same = keyMatch(target, i, eq, name, mangleable)
      if (same === 1) return QUERY_VARIANT
      if (same === 2) {
        if (raw !== undefined) return TWICE
        if (before === 59 || after === 59) return QUERY_SEMICOLON
        raw = eq < j ? target.slice(eq + 1, j) : ''
      }
    }
    before = after
    i = j + 1
  }
  if (raw === undefined || raw === '') return raw
  const value = formDecode(raw)
  if (raw.includes('%')) {
    if (value.includes('\0')) return NUL
    if (value.includes('%') && ESCAPE.test(value)) return ESCAPE_LEFT
  }
  return value
}

/** Reads template placeholders from a request: path parameters, headers, query parameters. */
export function requestTemplateSource(x: Exchange): TemplateSource {
  const incoming = x.incoming
  return {
    param: (name) => paramValue(x.param(name), incoming.url ?? '/'),
    header: (name) => headerValue(incoming.rawHeaders, name),
    query: (name) => queryValue(incoming.url ?? '/', name),
  }
}
