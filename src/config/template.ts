/**
 * Templates for the fencing resource and the idempotency scope: literals and placeholders
 * `{param.X}` (a route path parameter), `{header.X}` (a request header, case-insensitive) and
 * `{query.X}` (a query parameter). `{{` and `}}` stand for literal braces.
 *
 * One input, one value: a template is only filled from values every server reads the same way.
 * A value the upstream could read otherwise than the gateway — given twice, or spelled so that
 * servers decode or split it differently — is `ambiguous`, and the request is refused: the
 * gateway would check one resource (or key owner) while the upstream applies the request to
 * another. The rules per source are in ../template-fill.ts.
 */
import { HOP_BY_HOP } from '../hop-by-hop.js'

/**
 * What a source answers for a value it cannot give unambiguously. `ambiguous` completes a
 * sentence about the value, e.g. "is given twice" after "query parameter account".
 */
export interface Ambiguous {
  readonly ambiguous: string
}

/**
 * Where a template reads from, per request. Each returns the value, undefined when absent, or
 * an `Ambiguous` when the request carries it in a form servers read differently.
 */
export interface TemplateSource {
  param(name: string): string | undefined | Ambiguous
  header(name: string): string | undefined | Ambiguous
  query(name: string): string | undefined | Ambiguous
}

/** Why a template could not be filled; `detail` is a sentence naming the value, for problem details. */
export interface Unfilled {
  readonly unfilled: 'missing' | 'ambiguous'
  readonly detail: string
}

/**
 * A compiled template: returns the filled string, or an `Unfilled` saying which value is
 * absent (or empty) or ambiguous. Never throws for any source that keeps to `TemplateSource`.
 */
export type Template = (src: TemplateSource) => string | Unfilled

type Part = string | { from: 'param' | 'header' | 'query'; name: string; label: string }

// RFC 9110 §5.1 field-name = token
const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/

/**
 * Compiles a template.
 * @param pathParams the parameters the route's path pattern declares
 * @throws Error with a message saying what is wrong (the caller adds the YAML path)
 */
export function compileTemplate(text: string, pathParams: readonly string[]): Template {
  const parts: Part[] = []
  let lit = ''
  for (let i = 0; i < text.length; i++) {
    const ch = text[i]
    if (ch === '{' && text[i + 1] === '{') { lit += '{'; i++; continue }
    if (ch === '}' && text[i + 1] === '}') { lit += '}'; i++; continue }
    if (ch === '}') throw new Error(`unmatched "}" at offset ${i} (write "}}" for a literal brace)`)
    if (ch !== '{') { lit += ch; continue }
    const end = text.indexOf('}', i)
    if (end < 0) throw new Error(`unclosed "{" at offset ${i}`)
    const inner = text.slice(i + 1, end)
    const dot = inner.indexOf('.')
    const from = inner.slice(0, dot)
    const name = inner.slice(dot + 1)
    if (dot < 0 || !name) throw new Error(`placeholder {${inner}} must be {param.NAME}, {header.NAME} or {query.NAME}`)
    if (from === 'param') {
      if (!pathParams.includes(name)) {
        throw new Error(`{param.${name}} names no parameter of the route's path (it has ${pathParams.length ? pathParams.map((p) => `:${p}`).join(', ') : 'none'})`)
      }
    } else if (from === 'header') {
      if (!TOKEN.test(name)) throw new Error(`{header.${name}} cannot exist: "${name}" is not a valid header field name (RFC 9110 §5.1)`)
      // never forwarded (../forward/headers.ts), so the upstream never reads it
      if (HOP_BY_HOP.has(name.toLowerCase())) throw new Error(`{header.${name}} names a hop-by-hop header, which is not part of the request's meaning`)
    } else if (from !== 'query') {
      throw new Error(`placeholder {${inner}}: unknown source "${from}" (use param, header or query)`)
    }
    if (lit) { parts.push(lit); lit = '' }
    const label = from === 'param' ? `path parameter :${name}` : from === 'header' ? `header ${name}` : `query parameter ${name}`
    parts.push({ from: from as 'param' | 'header' | 'query', name: from === 'header' ? name.toLowerCase() : name, label })
    i = end
  }
  if (lit) parts.push(lit)
  if (parts.length === 1 && typeof parts[0] === 'string') { const s = parts[0]; return () => s }
  return (src) => {
    let out = ''
    for (const p of parts) {
      if (typeof p === 'string') { out += p; continue }
      const v = src[p.from](p.name)
      if (typeof v === 'string' && v !== '') { out += v; continue }
      if (v === undefined || v === '') return { unfilled: 'missing', detail: `${p.label} is absent or empty` }
      return { unfilled: 'ambiguous', detail: `${p.label} ${v.ambiguous}` }
    }
    return out
  }
}

/** The parameter names of a Hono path pattern: `/accounts/:account/*` → ["account"]. */
export function pathParams(pattern: string): string[] {
  const out: string[] = []
  for (const m of pattern.matchAll(/:([A-Za-z0-9_]+)/g)) out.push(m[1])
  return out
}
