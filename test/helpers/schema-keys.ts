/**
 * The key paths a zod schema accepts (`store.url`, `routes[].match.path`), walked through its
 * wrappers (optional, default, prefault, pipe): for the tests that hold a file to the schema.
 */
import type { z } from 'zod'

interface Def { type: string; shape?: Record<string, z.ZodType>; innerType?: z.ZodType; in?: z.ZodType; out?: z.ZodType; element?: z.ZodType }
const def = (s: z.ZodType): Def => (s as unknown as { _zod: { def: Def } })._zod.def

/** The schema under its wrappers: an object or array where there is one, else the leaf. */
function unwrap(s: z.ZodType): z.ZodType {
  const d = def(s)
  if (d.innerType) return unwrap(d.innerType)
  if (d.type === 'pipe') {
    const inner = unwrap(d.in!)
    return def(inner).type === 'object' || def(inner).type === 'array' ? inner : unwrap(d.out!)
  }
  return s
}

/** Every key path of `schema`, parents before their children; an array of objects adds `[]`. */
export function schemaKeys(schema: z.ZodType, prefix = ''): string[] {
  const s = unwrap(schema)
  const d = def(s)
  if (d.type === 'object') {
    return Object.entries(d.shape!).flatMap(([k, v]) => { const p = prefix ? `${prefix}.${k}` : k; return [p, ...schemaKeys(v, p)] })
  }
  if (d.type === 'array' && def(unwrap(d.element!)).type === 'object') return schemaKeys(d.element!, `${prefix}[]`)
  return []
}
