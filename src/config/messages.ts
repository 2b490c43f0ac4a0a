/**
 * The validator's findings in the config's own terms: "must be true or false, not "yes""
 * instead of "Invalid input: expected boolean, received string", "unknown key (did you mean
 * "store"?)" instead of "Unrecognized key".
 */
import type { z } from 'zod'
import { configSchema } from './schema.js'
import { didYouMean } from '../suggest.js'

type Issue = z.core.$ZodIssue & { input?: unknown }

/** A value as a message shows it: `"yes"`, `5`, `true`, `a list`, `a mapping`, `nothing`. */
export function show(v: unknown): string {
  if (v === undefined || v === null) return 'nothing'
  if (typeof v === 'string') return JSON.stringify(v)
  if (Array.isArray(v)) return 'a list'
  if (typeof v === 'object') return 'a mapping'
  return String(v)
}

interface Def { type: string; innerType?: Schema; in?: Schema; shape?: Record<string, Schema>; element?: Schema; options?: Schema[] }
interface Schema { _zod: { def: Def } }

/** The schema under wrappers (default, optional, pipe…): an object, array or leaf. */
function unwrap(s: Schema): Schema {
  for (let i = 0; i < 20; i++) {
    const d = s._zod.def
    if (d.innerType) s = d.innerType
    else if (d.type === 'pipe' && d.in) s = d.in
    else break
  }
  return s
}

/** The schema at a YAML path, or undefined when the path leaves the schema. */
function schemaAt(path: readonly PropertyKey[]): Schema | undefined {
  let s: Schema | undefined = unwrap(configSchema as unknown as Schema)
  for (const k of path) {
    if (!s) return undefined
    const d: Def = s._zod.def
    if (typeof k === 'number' && d.element) s = unwrap(d.element)
    else if (typeof k === 'string' && d.shape?.[k]) s = unwrap(d.shape[k])
    else return undefined
  }
  return s
}

/** The keys the schema knows at a YAML path (an object's keys), for "did you mean". */
export function keysAt(path: readonly PropertyKey[]): string[] {
  return Object.keys(schemaAt(path)?._zod.def.shape ?? {})
}

/** Whether a message is the validator's own wording rather than one written for this config. */
const generic = (m: string) => /^(Invalid|Too (small|big)|Unrecognized|Expected)/.test(m)

const DURATION_HINT = 'a duration with its unit, e.g. 500ms, 10s, 5m, 24h, 7d'
const SIZE_HINT = 'a size, e.g. 65536, 64KiB, 1MiB'

/** What kind of value a string-or-number key takes, by its name. */
function unionHint(path: readonly PropertyKey[]): string {
  const key = String(path[path.length - 1] ?? '')
  if (/Bytes$/.test(key)) return SIZE_HINT
  if (key === 'listen') return 'HOST:PORT, e.g. 127.0.0.1:8080'
  return DURATION_HINT
}

/**
 * One validator issue as messages for the config's author, each with its YAML path (an
 * unrecognized_keys issue gives one per key).
 * @param data the parsed YAML, to show the value that was given
 */
export function describeIssue(issue: Issue, data: unknown): { path: PropertyKey[]; message: string }[] {
  const path = issue.path as PropertyKey[]
  let input = issue.input
  if (input === undefined && path.length) {
    input = path.reduce<unknown>((v, k) => (v && typeof v === 'object' ? (v as Record<PropertyKey, unknown>)[k] : undefined), data)
  }
  const last = String(path[path.length - 1] ?? '')
  switch (issue.code) {
    case 'unrecognized_keys':
      return issue.keys.map((k) => ({ path: [...path, k], message: `unknown key${didYouMean(k, keysAt(path))}` }))
    case 'invalid_type': {
      if (input === undefined) return [{ path, message: 'is required' }]
      const e = issue.expected as string
      const m =
        e === 'boolean' ? `must be true or false, not ${show(input)}${typeof input === 'string' && /^(yes|no|on|off|y|n)$/i.test(input) ? ' (YAML 1.2 reads it as text)' : ''}`
        : e === 'number' ? `must be a number, not ${show(input)}`
        : e === 'int' ? `must be a whole number, not ${show(input)}`
        : e === 'string' ? `must be text, not ${show(input)}`
        : e === 'array' ? `must be a list (e.g. [${last === 'methods' && typeof input === 'string' ? input : 'a, b'}], or one "- item" line each), not ${show(input)}`
        : e === 'object' ? `must be a mapping (indented "key: value" lines), not ${show(input)}`
        : `must be ${e}, not ${show(input)}`
      return [{ path, message: m }]
    }
    case 'invalid_value': {
      const values = issue.values.map(String)
      return [{ path, message: `must be one of ${values.join(', ')}, not ${show(input)}${typeof input === 'string' ? didYouMean(input, values) : ''}` }]
    }
    case 'invalid_union':
      return [{ path, message: `must be ${unionHint(path)}, not ${show(input)}` }]
    case 'too_small':
    case 'too_big': {
      if (!generic(issue.message)) return [{ path, message: issue.message }]
      const bound = issue.code === 'too_small' ? issue.minimum : issue.maximum
      const least = issue.code === 'too_small'
      if (issue.origin === 'array') return [{ path, message: least ? `needs at least ${bound} item${Number(bound) === 1 ? '' : 's'}` : `takes at most ${bound} items` }]
      if (issue.origin === 'string') return [{ path, message: least ? (Number(bound) <= 1 ? 'must not be empty' : `must be at least ${bound} characters`) : `must be at most ${bound} characters` }]
      return [{ path, message: `must be ${least ? 'at least' : 'at most'} ${bound}, not ${show(input)}` }]
    }
    default:
      return [{ path, message: generic(issue.message) ? `is not valid here (${show(input)})` : issue.message }]
  }
}
