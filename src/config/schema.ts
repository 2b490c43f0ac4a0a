/**
 * The config schema (contract §2), validated with zod. Durations and sizes are turned into ms
 * and bytes here, so the rest of the code never parses text. Unknown keys are errors.
 */
import { z } from 'zod'
import { parseDuration, parseSize } from './units.js'

const duration = (fallback: string) =>
  z.string().default(fallback).transform((s, ctx) => {
    const ms = parseDuration(s)
    if (ms === undefined) {
      ctx.addIssue({ code: 'custom', message: `"${s}" is not a duration (write e.g. 500ms, 10s, 5m, 24h, 7d)` })
      return z.NEVER
    }
    return ms
  })

const size = (fallback: string) =>
  z.union([z.string(), z.number()]).default(fallback).transform((s, ctx) => {
    const n = parseSize(s)
    if (n === undefined) {
      ctx.addIssue({ code: 'custom', message: `"${s}" is not a size (write e.g. 65536, 64KiB, 1MiB)` })
      return z.NEVER
    }
    return n
  })

const listen = (fallback: string) =>
  z.union([z.string(), z.number()]).default(fallback).refine((s) => typeof s === 'string' && /^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9.-]+):\d{1,5}$/.test(s) && Number(s.slice(s.lastIndexOf(':') + 1)) <= 65535, {
    message: 'must be HOST:PORT, e.g. 127.0.0.1:8080',
  }).transform(String)

const METHODS = ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS'] as const
const method = z.string().transform((s) => s.toUpperCase()).pipe(z.enum(METHODS, { message: `must be one of ${METHODS.join(', ')}` }))
const headerName = z.string().regex(/^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/, 'must be a valid header field name (RFC 9110 §5.1)')

const fencing = z.strictObject({
  resource: z.string().min(1, 'must not be empty'),
  tokenHeader: headerName.default('Fencing-Token'),
  required: z.boolean().default(true),
})

const idempotency = z.strictObject({
  keyHeader: headerName.default('Idempotency-Key'),
  required: z.boolean().default(false),
  methods: z.array(method).min(1).default(['POST', 'PATCH']),
  scope: z.string().default(''),
  ttl: duration('24h'),
  lease: duration('30s'),
  inFlight: z.enum(['reject', 'wait']).default('reject'),
  unknownOutcome: z.enum(['reject', 'retry']).default('reject'),
  maxResponseBytes: size('1MiB'),
})

const route = z.strictObject({
  name: z.string().regex(/^[a-z0-9_-]+$/, 'must match [a-z0-9_-]+ (it is a metric label)'),
  match: z.strictObject({
    path: z.string().startsWith('/', 'must start with "/"'),
    methods: z.array(method).min(1).optional(),
  }),
  upstream: z.strictObject({
    url: z.url({ protocol: /^https?$/, message: 'must be an http:// or https:// URL' }),
    timeout: duration('10s'),
    connectTimeout: duration('5s'),
    connections: z.number().int().min(1).max(4096).default(128),
  }),
  /** a request body larger than this is answered 413 before anything is forwarded */
  maxRequestBytes: size('10MiB'),
  fencing: fencing.optional(),
  idempotency: idempotency.optional(),
})

export const configSchema = z.strictObject({
  listen: listen('127.0.0.1:8080'),
  admin: z.strictObject({
    listen: listen('127.0.0.1:9464'),
    token: z.string().optional().transform((t) => (t ? t : undefined)),
  }).prefault({}),
  store: z.strictObject({
    kind: z.enum(['memory', 'sqlite', 'redis', 'postgres']).default('sqlite'),
    path: z.string().default('./data/fencegate.db'),
    url: z.string().optional(),
    timeout: duration('1s'),
    onStateLoss: z.enum(['fail-closed', 'accept']).default('fail-closed'),
    synchronous: z.enum(['normal', 'full']).default('normal'),
    maxResources: z.number().int().min(1).default(1_000_000),
    maxRecords: z.number().int().min(1).default(100_000),
    /** redis: namespace of every key, so deployments (or test runs) can share one Redis */
    keyPrefix: z.string().regex(/^[A-Za-z0-9_.-]{1,64}$/, 'must be 1-64 of A-Z a-z 0-9 _ . -').default('fencegate'),
    /** postgres: the schema holding fencegate's tables */
    schema: z.string().regex(/^[a-z_][a-z0-9_]{0,62}$/, 'must be a lower-case SQL identifier ([a-z_][a-z0-9_]*, at most 63 characters)').default('public'),
    /** postgres: create or update the schema at start-up (else run `fencegate migrate`) */
    migrate: z.boolean().default(true),
    /** postgres: most connections per gateway process */
    pool: z.number().int().min(1).max(1000).default(10),
    /** postgres: the server cancels a statement running longer than this */
    statementTimeout: duration('5s'),
  }).prefault({}),
  shutdown: z.strictObject({
    /** how long in-flight requests may run on after SIGTERM */
    grace: duration('10s'),
  }).prefault({}),
  routes: z.array(route).min(1, 'needs at least one route'),
})

/** The validated config, with durations in ms and sizes in bytes. */
export type Config = z.output<typeof configSchema>
export type RouteConfig = Config['routes'][number]
export type FencingConfig = NonNullable<RouteConfig['fencing']>
export type IdempotencyConfig = NonNullable<RouteConfig['idempotency']>
