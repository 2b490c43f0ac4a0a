/**
 * Field types the config schema (./schema.ts) and its parts (./settle.ts) share: durations in ms
 * (written with their unit), header field names.
 */
import { z } from 'zod'
import { parseDuration } from './units.js'

// Timers in Node hold at most 2^31−1 ms; a wait longer than an hour is a mistake anyway.
export const HOUR = 3_600_000

/** A duration in ms, at least 1 ms and at most `max` ms. */
export const duration = (fallback: string, max = Number.MAX_SAFE_INTEGER) =>
  z.union([z.string(), z.number()]).default(fallback).transform((s, ctx) => {
    const ms = typeof s === 'string' ? parseDuration(s) : undefined
    if (ms === undefined) {
      ctx.addIssue({ code: 'custom', message: `${JSON.stringify(s)} is not a duration (write it with its unit, e.g. 500ms, 10s, 5m, 24h, 7d)` })
      return z.NEVER
    }
    if (ms < 1 || ms > max) {
      ctx.addIssue({ code: 'custom', message: max === Number.MAX_SAFE_INTEGER ? `${s} is out of range (at least 1ms)` : `${s} is out of range (1ms to ${max / HOUR >= 1 ? `${max / HOUR}h` : `${max}ms`})` })
      return z.NEVER
    }
    return ms
  })

/** A duration in ms, or undefined when the key is absent (the code picks the default). */
export const optionalDuration = (max?: number) => {
  const d = duration('1ms', max)
  return z.union([z.string(), z.number()]).optional().transform((s, ctx) => {
    if (s === undefined) return undefined
    const r = d.safeParse(s)
    if (r.success) return r.data
    for (const issue of r.error.issues) ctx.addIssue({ code: 'custom', message: issue.message })
    return z.NEVER
  })
}


export const headerName = z.string().regex(/^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/, 'must be a valid header field name (RFC 9110 §5.1)')
