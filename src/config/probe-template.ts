/**
 * The probe templates of `idempotency.settle` (contract §4a): `probe.path` and `probe.headers`
 * take the placeholders of ./template.ts and `{key}`, the idempotency key of the request that
 * became unknown. In the path every filled value is percent-encoded (RFC 3986 §2.1, as
 * encodeURIComponent writes it), so a key or a parameter holding "/", "?", "&" or "#" stays one
 * path segment or one query value; in a header it goes as it is (a key is visible ASCII).
 */
import { compileTemplate, type Template, type TemplateSource, type Unfilled } from './template.js'

/** A compiled probe template: the filled text for a request and its key, or why it cannot be filled. */
export type ProbeTemplate = (src: TemplateSource, key: string) => string | Unfilled

// `{key}`, but not the literal `{{key}}`
const KEY = /(?<!\{)\{key\}/

const encodedSource = (src: TemplateSource): TemplateSource => {
  const enc = <T>(v: T): T => (typeof v === 'string' ? encodeURIComponent(v) as T : v)
  return { param: (n) => enc(src.param(n)), header: (n) => enc(src.header(n)), query: (n) => enc(src.query(n)) }
}

/**
 * Compiles a probe template.
 * @param inPath true for `probe.path`: every filled value is percent-encoded
 * @throws Error with a message saying what is wrong (the caller adds the YAML path)
 */
export function compileProbeTemplate(text: string, pathParams: readonly string[], inPath: boolean): ProbeTemplate {
  const pieces: Template[] = text.split(KEY).map((piece) => compileTemplate(piece, pathParams))
  return (src, key) => {
    const from = inPath ? encodedSource(src) : src
    const k = inPath ? encodeURIComponent(key) : key
    let out = ''
    for (let i = 0; i < pieces.length; i++) {
      if (i > 0) out += k
      const filled = pieces[i](from)
      if (typeof filled !== 'string') return filled
      out += filled
    }
    return out
  }
}
