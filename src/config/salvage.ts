/**
 * What of a config part validated, field by field, so that the checks across fields
 * (./checks.ts) run on everything that is known and one mistake does not hide another: a
 * repeated route name is still reported when that route's timeout is also wrong.
 */
import type { z } from 'zod'

/**
 * A config part as far as it validated: each field parsed on its own with its own schema
 * (defaults applied); `null` where the field was given but did not validate, `undefined` where it
 * was left out and has no default.
 */
export type Parts<T> = T extends readonly unknown[] ? T : T extends object ? { [K in keyof T]?: Parts<T[K]> | null } : T

interface Def { type: string; innerType?: Schema; in?: Schema; shape?: Record<string, Schema> }
interface Schema { _zod: { def: Def } }

/** The object schema under wrappers (optional, default, prefault, pipe), if there is one. */
function objectUnder(s: Schema): Record<string, Schema> | undefined {
  for (let i = 0; i < 20; i++) {
    const d = s._zod.def
    if (d.type === 'object') return d.shape
    if (d.innerType) s = d.innerType
    else if (d.type === 'pipe' && d.in) s = d.in
    else return undefined
  }
  return undefined
}

/**
 * Parses `raw` with `schema`; when that fails and the schema is a mapping, parses each of its
 * fields on its own, recursively. Strictness and checks over the whole mapping are left to the
 * full parse, which reports them.
 * @returns the parsed value, a mapping of what validated (see `Parts`), or null
 */
export function salvage(schema: z.ZodType, raw: unknown): unknown {
  const whole = schema.safeParse(raw)
  if (whole.success) return whole.data
  const shape = objectUnder(schema as unknown as Schema)
  if (!shape || raw === null || typeof raw !== 'object' || Array.isArray(raw)) return null
  const out: Record<string, unknown> = {}
  for (const [key, field] of Object.entries(shape)) out[key] = salvage(field as unknown as z.ZodType, (raw as Record<string, unknown>)[key])
  return out
}
