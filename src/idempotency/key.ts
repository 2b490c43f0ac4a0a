/**
 * Idempotency-Key values (draft-ietf-httpapi-idempotency-key-header §2.1): an RFC 9651
 * sf-string (`"abc"`), or the same characters bare (`abc`); both name the same key.
 * 1–255 visible ASCII characters, quotes not counted.
 */
const VISIBLE = /^[\x21-\x7e]{1,255}$/

/**
 * @returns the key without quotes or escapes, or undefined when malformed. A header sent twice
 * arrives joined with ", ", which contains a space and is therefore malformed.
 */
export function parseIdempotencyKey(value: string): string | undefined {
  if (value.startsWith('"')) {
    // RFC 9651 §3.3.3: DQUOTE *( unescaped / "\" ( DQUOTE / "\" ) ) DQUOTE
    if (value.length < 2 || !value.endsWith('"')) return undefined
    let key = ''
    for (let i = 1; i < value.length - 1; i++) {
      let ch = value[i]
      if (ch === '\\') {
        ch = value[++i]
        if (ch !== '"' && ch !== '\\') return undefined
      } else if (ch === '"') return undefined
      key += ch
    }
    return VISIBLE.test(key) ? key : undefined
  }
  return VISIBLE.test(value) ? value : undefined
}
