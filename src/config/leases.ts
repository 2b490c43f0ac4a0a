/**
 * `leases` (contract §3a), part of the config schema (./schema.ts): the lease service on the
 * proxy listener. Durations in ms; `defaultTtl` 'advice' or ms.
 */
import { z } from 'zod'
import { LEASES_PATH } from '../client/lease-api.js'
import { duration, HOUR } from './fields.js'
import { formatDuration } from './units.js'

/** The shortest lease the service grants, ms (contract §3a: a ttl below 1 s is a 400). */
export const MIN_TTL_MS = 1000

/** A duration in ms, as every duration of the config is read. */
const ttl = duration('30s')

export const leasesSchema = z.strictObject({
  /** the prefix on the proxy listener; a lease call is `{path}/{resource}` */
  path: z.string().default(LEASES_PATH).superRefine((p, ctx) => {
    if (!/^\/[A-Za-z0-9\-._~!$&'()*+,;=:@/%]*[^/]$/.test(p) || p.includes('//')) ctx.addIssue({ code: 'custom', message: `must be a path such as ${LEASES_PATH}: starting with "/", not ending with one, without a query, "#" or "//" (${JSON.stringify(p)})` })
  }),
  /** when set, lease calls need `Authorization: Bearer <token>`; empty (`${ENV:-}`): none */
  token: z.string().optional().transform((t) => (t ? t : undefined)),
  /** the resources a lease may be taken on: exact names, or a prefix ending in `*` */
  resources: z.array(z.string().min(1, 'must not be empty').refine((r) => !r.slice(0, -1).includes('*'), { message: 'may hold one *, at the end only (a prefix pattern such as account:*)' })).min(1, 'must list at least one resource pattern, e.g. ["account:*"]: the service grants leases only on these'),
  /** a duration, or `advice`: sized from the observed effect durations of the routes fencing the resource */
  defaultTtl: z.union([z.string(), z.number()]).default('advice').transform((v, ctx): number | 'advice' => {
    if (v === 'advice') return v
    const ms = ttl.safeParse(v)
    if (ms.success) return ms.data
    ctx.addIssue({ code: 'custom', message: `${JSON.stringify(v)} is neither a duration (e.g. 30s, 2m) nor advice` })
    return z.NEVER
  }),
  maxTtl: duration('5m', 24 * HOUR),
}).superRefine((l, ctx) => {
  if (l.maxTtl < MIN_TTL_MS) ctx.addIssue({ code: 'custom', path: ['maxTtl'], message: `must be at least ${formatDuration(MIN_TTL_MS)} (${l.maxTtl} ms given): no lease is shorter` })
  if (typeof l.defaultTtl === 'number' && (l.defaultTtl < MIN_TTL_MS || l.defaultTtl > l.maxTtl)) {
    ctx.addIssue({ code: 'custom', path: ['defaultTtl'], message: `must be between ${formatDuration(MIN_TTL_MS)} and maxTtl (${l.maxTtl} ms), not ${l.defaultTtl} ms` })
  }
})
