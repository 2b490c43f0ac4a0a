/**
 * `idempotency.settle` (contract §4a), part of the config schema (./schema.ts).
 */
import { z } from 'zod'
import { duration, headerName, HOUR, optionalDuration } from './fields.js'

const status = z.number().int().min(100, 'must be an HTTP status, 100 to 599').max(599, 'must be an HTTP status, 100 to 599')
const PROBE_METHODS = ['GET', 'HEAD', 'OPTIONS'] as const

/**
 * `idempotency.settle` (contract §4a): the lookup that asks the resource whether an attempt whose
 * outcome is unknown took effect; `after`, `every` and `for` in ms (`for` undefined: the record's ttl).
 */
export const settleSchema = z.strictObject({
  probe: z.strictObject({
    // RFC 9110 §9.2.1 safe methods only
    method: z.string().default('GET').transform((s, ctx) => {
      if ((PROBE_METHODS as readonly string[]).includes(s.toUpperCase())) return s.toUpperCase() as typeof PROBE_METHODS[number]
      ctx.addIssue({ code: 'custom', message: `must be GET, HEAD or OPTIONS, not ${JSON.stringify(s)}: a probe only asks, never a method that changes state (it could apply the very effect it looks for)` })
      return z.NEVER
    }),
    path: z.string().startsWith('/', 'must start with "/" (the probe goes to the route\'s upstream origin)'),
    headers: z.record(headerName, z.string()).optional(),
    applied: z.array(status).min(1, 'must list at least one status: the answer that says the first attempt took effect'),
    notApplied: z.array(status).default([]),
  }),
  after: duration('2s', HOUR),
  every: duration('30s', HOUR),
  for: optionalDuration(),
}).superRefine((s, ctx) => {
  if (s.after < 1000) ctx.addIssue({ code: 'custom', path: ['after'], message: `must be at least 1s (${s.after} ms given): it is the stated assumption that the resource applies nothing of an abandoned attempt later than this after the gateway gave up, and a shorter one would settle a write still on its way` })
  if (s.every < s.after) ctx.addIssue({ code: 'custom', path: ['every'], message: `must be at least after (${s.after} ms): later probes back off from after up to every` })
  const applied = new Set(s.probe.applied)
  s.probe.notApplied.forEach((st, i) => {
    if (applied.has(st)) ctx.addIssue({ code: 'custom', path: ['probe', 'notApplied', i], message: `${st} is in probe.applied too: one answer cannot say both that the attempt took effect and that it did not` })
  })
})

