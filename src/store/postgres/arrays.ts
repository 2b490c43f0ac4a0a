/**
 * A batch's columns as PostgreSQL array literals (text input of `text[]`, `bigint[]`,
 * `boolean[]`, `bytea[]`; PostgreSQL docs §8.15.6), built in one pass here instead of by pg's
 * generic array conversion, which runs two regular-expression replaces per element.
 */

// an element needs its quotes and backslashes escaped only when it holds one (rare: keys, ids)
const SPECIAL = /["\\]/
const escape = (s: string): string => (SPECIAL.test(s) ? s.replace(/["\\]/g, '\\$&') : s)

/**
 * One column as an array literal: `null`/`undefined` → NULL, a Buffer (any byte view) → a
 * bytea in hex, a boolean → true/false, anything else by `String()` in double quotes.
 * @example arrayLiteral(['a"b', null, 7]) // '{"a\\"b",NULL,"7"}'
 */
export function arrayLiteral(values: readonly unknown[]): string {
  let s = '{'
  for (let i = 0; i < values.length; i++) {
    if (i > 0) s += ','
    const v = values[i]
    if (v === null || v === undefined) s += 'NULL'
    else if (ArrayBuffer.isView(v)) s += `"\\\\x${Buffer.from(v.buffer, v.byteOffset, v.byteLength).toString('hex')}"`
    else s += `"${escape(String(v))}"`
  }
  return `${s}}`
}
