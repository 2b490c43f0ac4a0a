/**
 * The config schema (contract §2), validated with zod. Durations and sizes are turned into ms
 * and bytes here, so the rest of the code never parses text. Unknown keys are errors.
 */
import { z } from 'zod'
import { parseSize } from './units.js'
import { listenerTls, storeTls, storeTlsIssues, upstreamTls } from './tls.js'
import { settleSchema } from './settle.js'
import { leasesSchema } from './leases.js'
import { duration, headerName, HOUR, optionalDuration } from './fields.js'

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

/** An http(s) URL, or undefined when absent or empty (`${ENV:-}`). */
const optionalUrl = z.preprocess((v) => (v === '' ? undefined : v), z.url({ protocol: /^https?$/, message: 'must be an http:// or https:// URL' }).optional())

const METHODS = ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS'] as const
const method = z.string().transform((s) => s.toUpperCase()).pipe(z.enum(METHODS, { message: `must be one of ${METHODS.join(', ')}` }))

const fencing = z.strictObject({
  resource: z.string().min(1, 'must not be empty'),
  tokenHeader: headerName.default('Fencing-Token'),
  required: z.boolean().default(true),
  /**
   * hold a newer token until the older requests for the resource have ended: `true` this
   * process's, `store` those of every gateway sharing the store (src/fencing/window.ts)
   */
  serialize: z.unknown().default(false).transform((v, ctx): boolean | 'store' => {
    if (v === true || v === false || v === 'store') return v
    const yaml = typeof v === 'string' && /^(yes|no|on|off|y|n)$/i.test(v) ? ' (YAML 1.2 reads it as text)' : ''
    ctx.addIssue({ code: 'custom', message: `must be false, true or store, not ${JSON.stringify(v)}${yaml}` })
    return z.NEVER
  }),
  /** how long a held request waits before 503 serialize-timeout; default: upstream.timeout */
  serializeWait: optionalDuration(HOUR),
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
  /**
   * upstream statuses that mean "nothing happened, try again": the claim is released and the
   * response not stored (contract §4's default); a 2xx never qualifies
   */
  releaseStatuses: z.array(z.number().int().min(400, 'must be a 4xx or 5xx status: a 1xx-3xx response means the request was handled, so releasing its key would let a retry apply it twice').max(599, 'must be an HTTP status, 400 to 599')).default([429, 502, 503, 504]),
  /** contract §4a: unknown outcomes settled by asking the resource; absent: they wait for an operator */
  settle: settleSchema.optional(),
})

const route = z.strictObject({
  name: z.string().regex(/^[a-z0-9_-]+$/, 'must match [a-z0-9_-]+ (it is a metric label)'),
  match: z.strictObject({
    path: z.string().startsWith('/', 'must start with "/"'),
    methods: z.array(method).min(1).optional(),
  }),
  upstream: z.strictObject({
    url: z.url({ protocol: /^https?$/, message: 'must be an http:// or https:// URL' }),
    timeout: duration('10s', HOUR),
    connectTimeout: duration('5s', HOUR),
    connections: z.number().int().min(1).max(4096).default(128),
    /** contract §5b: the CA trusted for this upstream, the client certificate presented, the name checked */
    tls: upstreamTls.optional(),
  }).superRefine((u, ctx) => {
    if (u.tls && u.url.startsWith('http:')) ctx.addIssue({ code: 'custom', path: ['tls'], message: `only with an https:// upstream: ${u.url} is cleartext, so there is no TLS to configure (write https://, or remove upstream.tls)` })
  }),
  /** a request body larger than this is answered 413 before anything is forwarded */
  maxRequestBytes: size('10MiB'),
  fencing: fencing.optional(),
  idempotency: idempotency.optional(),
  /**
   * a route with neither fencing nor idempotency writes nothing to the store (contract §8);
   * `true` puts its requests in the attempt log too. Routes with either always write theirs.
   */
  attemptLog: z.boolean().optional(),
}).superRefine((r, ctx) => {
  if (r.attemptLog === false && (r.fencing || r.idempotency)) ctx.addIssue({ code: 'custom', path: ['attemptLog'], message: 'a route with fencing or idempotency always writes its attempts to the attempt log (the audit of its claim); attemptLog only turns it on for a route with neither' })
})

export const configSchema = z.strictObject({
  listen: listen('127.0.0.1:8080'),
  /** contract §5b: the proxy listener serves HTTPS (HTTP/1.1) with this certificate */
  tls: listenerTls.optional(),
  admin: z.strictObject({
    listen: listen('127.0.0.1:9464'),
    /** the admin listener serves HTTPS with this certificate */
    tls: listenerTls.optional(),
    token: z.string().optional().transform((t) => (t ? t : undefined)),
    /** needed by the admin write actions (POST /resolve, POST /store/accept-loss); without it they answer 403 */
    writeToken: z.string().optional().transform((t) => (t ? t : undefined)),
    /**
     * the audit view's address as operators reach it (e.g. behind a proxy): the base of the view
     * links in access-log lines and problems; without it, access lines give relative paths and
     * problems give none
     */
    publicUrl: optionalUrl.transform((u) => u?.replace(/\/+$/, '')),
    /** a Grafana dashboard URL (dashboards/fencegate.json as imported): the Routes view links its counts to the dashboard's panels */
    grafanaUrl: optionalUrl,
    /**
     * contract §5a: `store` makes /readyz 503 while the store cannot answer; `serving` keeps it
     * 200 while the process serves (guarded routes then answer 503 store-unavailable themselves),
     * for a Service in front of several replicas sharing one store
     */
    readiness: z.enum(['store', 'serving']).default('store'),
  }).prefault({}),
  store: z.strictObject({
    kind: z.enum(['memory', 'sqlite', 'redis', 'postgres']).default('sqlite'),
    path: z.string().default('./data/fencegate.db'),
    url: z.string().optional(),
    timeout: duration('1s', HOUR),
    onStateLoss: z.enum(['fail-closed', 'accept']).default('fail-closed'),
    /** sqlite: `full` (every commit on disk before it is answered: survives a power loss); `normal` only when acceptRisks names `synchronous` */
    synchronous: z.enum(['normal', 'full']).default('full'),
    /** memory: most high-water marks; a new resource past it is refused (503), a mark never forgotten */
    maxResources: z.number().int().min(1).default(1_000_000),
    /** memory: most unexpired idempotency records; a new key past it is refused (503) unless acceptRisks names maxRecords */
    maxRecords: z.number().int().min(1).default(100_000),
    /** memory: most attempt log entries within audit.retention; past it new entries are dropped (counted) unless acceptRisks names maxAttempts */
    maxAttempts: z.number().int().min(1).default(100_000),
    /** redis: namespace of every key, so deployments (or test runs) can share one Redis */
    keyPrefix: z.string().regex(/^[A-Za-z0-9_.-]{1,64}$/, 'must be 1-64 of A-Z a-z 0-9 _ . -').default('fencegate'),
    /** postgres: the schema holding fencegate's tables */
    schema: z.string().regex(/^[a-z_][a-z0-9_]{0,62}$/, 'must be a lower-case SQL identifier ([a-z_][a-z0-9_]*, at most 63 characters)').default('public'),
    /** postgres: create or update the schema at start-up (else run `fencegate migrate`) */
    migrate: z.boolean().default(true),
    /** postgres: most connections per gateway process */
    pool: z.number().int().min(1).max(1000).default(10),
    /** postgres: the server cancels a statement running longer than this */
    statementTimeout: duration('5s', HOUR),
    /** redis: `url` lists seed nodes of a Redis Cluster (comma-separated redis:// URLs) */
    cluster: z.boolean().default(false),
    /**
     * redis: replicas that must acknowledge a write (WAIT) before the request relies on it; fewer: 503.
     * postgres: synchronous standbys that must be configured (synchronous_standby_names with
     * synchronous_commit on, remote_write or remote_apply); fewer: 503 on guarded routes.
     * 0: no replication guarantee, so a failover (a promoted replica, a new timeline) is state loss.
     */
    replicas: z.number().int('must be a whole number').min(0, 'must be 0 or more').max(64, 'must be at most 64').default(0),
    /** redis: Sentinel addresses (host:port) to find the primary through; `url` then only gives credentials, TLS and database */
    sentinels: z.array(z.string().regex(/^[^\s:/,]+:\d{1,5}$/, 'must be host:port')).min(1, 'must list at least one Sentinel (host:port)').optional(),
    /** redis: the name of the primary the Sentinels watch (sentinel monitor <name> …) */
    sentinelName: z.string().regex(/^[A-Za-z0-9_.-]{1,128}$/, 'must be 1-128 of A-Z a-z 0-9 _ . -').optional(),
    /** redis: how long WAIT waits for `replicas`; default: a quarter of `timeout` */
    replicasTimeout: optionalDuration(HOUR),
    /**
     * risks the operator accepts that the store forgets entries before their time (fencegate
     * doctor): `maxmemory-policy` (redis: an evicting policy can forget marks and records, else
     * start-up is refused); `maxRecords` (memory: when full, the oldest completed record is dropped,
     * counted, instead of a new key refused); `maxAttempts` (memory: the oldest attempt log entry);
     * `synchronous` (sqlite: `synchronous: normal`, whose last commits a power loss can take)
     */
    acceptRisks: z.array(z.enum(['maxmemory-policy', 'maxRecords', 'maxAttempts', 'synchronous'])).default([]),
    /**
     * redis, postgres: how far the store's clock may be from this gateway's before a warning (log
     * line, fencegate_store_clock_offset_exceeded). Leases and deadlines run on the store's clock
     * whatever it is; the gateway's own shows in Retry-After, supersededForMs and the attempt log.
     */
    maxClockOffset: duration('1s', HOUR),
    /** redis (rediss://), postgres: the CA trusted for the store, the client certificate presented (contract §5b) */
    tls: storeTls.optional(),
  }).superRefine((s, ctx) => {
    for (const issue of storeTlsIssues(s)) ctx.addIssue({ code: 'custom', ...issue })
    s.acceptRisks.forEach((risk, i) => {
      const kind = risk === 'maxmemory-policy' ? 'redis' : risk === 'synchronous' ? 'sqlite' : 'memory'
      if (s.kind !== kind) ctx.addIssue({ code: 'custom', path: ['acceptRisks', i], message: risk === 'maxmemory-policy' ? `maxmemory-policy is a Redis setting: only with store.kind redis, not ${s.kind}` : risk === 'synchronous' ? `synchronous is a SQLite setting: only with store.kind sqlite, not ${s.kind}` : `${risk} is a memory store limit: only with store.kind memory, not ${s.kind}` })
    })
    // a power loss can take normal's last commits unnoticed (a mark falls back): only when named
    if (s.kind === 'sqlite' && s.synchronous === 'normal' && !s.acceptRisks.includes('synchronous')) {
      ctx.addIssue({ code: 'custom', path: ['synchronous'], message: 'normal can lose the last commits on a power loss or kernel crash (a high-water mark falls back, a completed record vanishes), unnoticed: use full (the default), or name the risk in store.acceptRisks: [synchronous]' })
    }
    if (s.cluster && s.kind !== 'redis') ctx.addIssue({ code: 'custom', path: ['cluster'], message: `only with store.kind redis (a Redis Cluster's seed nodes in store.url), not ${s.kind}` })
    if (s.replicas > 0 && s.kind !== 'redis' && s.kind !== 'postgres') ctx.addIssue({ code: 'custom', path: ['replicas'], message: `only with store.kind redis (WAIT for Redis replicas) or postgres (synchronous standbys), not ${s.kind}` })
    if (s.sentinels && s.kind !== 'redis') ctx.addIssue({ code: 'custom', path: ['sentinels'], message: `only with store.kind redis, not ${s.kind}` })
    else if (s.sentinels && s.cluster) ctx.addIssue({ code: 'custom', path: ['sentinels'], message: 'a Redis Cluster fails over by itself: use store.sentinels or store.cluster, not both' })
    else if (s.sentinels && !s.sentinelName) ctx.addIssue({ code: 'custom', path: ['sentinelName'], message: 'store.sentinels needs store.sentinelName: the name the Sentinels monitor the primary under' })
    if (s.sentinelName && !s.sentinels) ctx.addIssue({ code: 'custom', path: ['sentinels'], message: 'store.sentinelName needs store.sentinels: the Sentinels\' host:port addresses' })
    if (s.replicasTimeout !== undefined && s.kind === 'postgres') ctx.addIssue({ code: 'custom', path: ['replicasTimeout'], message: 'only with store.kind redis (WAIT); PostgreSQL waits for its synchronous standbys itself' })
    if (s.kind === 'redis' && s.url !== undefined) {
      const urls = s.url.split(',').map((u) => u.trim())
      if (urls.length > 1 && !s.cluster) ctx.addIssue({ code: 'custom', path: ['url'], message: 'lists several nodes: set store.cluster: true for a Redis Cluster, or give one URL' })
      else if (urls.length > 1 && urls.some((u) => !/^rediss?:\/\/[^,\s]+$/.test(u))) ctx.addIssue({ code: 'custom', path: ['url'], message: 'every seed node must be a redis:// or rediss:// URL, comma-separated' })
    }
    if (s.replicasTimeout !== undefined && s.replicasTimeout >= s.timeout) {
      ctx.addIssue({ code: 'custom', path: ['replicasTimeout'], message: `must be shorter than store.timeout (${s.timeout} ms): the write and its WAIT must answer within store.timeout, else the request fails as a timeout` })
    }
  }).prefault({}),
  /** the attempt log (contract §8) */
  audit: z.strictObject({
    /** entries older than this are deleted (redis: trimmed from the stream) */
    retention: duration('7d'),
    /** also write every entry as one JSON line to stdout */
    stdout: z.boolean().default(false),
    /** most entries waiting to be written; past it new entries are dropped and counted */
    queueSize: z.number().int().min(1).max(10_000_000).default(10_000),
  }).prefault({}),
  /** what the gateway writes to stderr (contract §2: log.access, log.level) */
  log: z.strictObject({
    /** `all`: a line per request; `decisions`: each request refused, replayed or not completed; `off` */
    access: z.enum(['all', 'decisions', 'off']).default('decisions'),
    level: z.enum(['debug', 'info', 'warn', 'error']).default('info'),
    /** the request id's header: the client's value when sane, else a new one; forwarded and echoed */
    requestIdHeader: headerName.default('X-Request-Id'),
  }).prefault({}),
  shutdown: z.strictObject({
    /** how long in-flight requests may run on after SIGTERM */
    grace: duration('10s', HOUR),
  }).prefault({}),
  /**
   * The proxy listener's client timeouts (node:http). A connection that overruns one is answered
   * 408 where a request is under way, and closed. Defaults after nginx, see docs/requests.md, "Forwarding".
   */
  server: z.strictObject({
    /** the request line and headers must be in within this (Apache mod_reqtimeout's 20s; nginx client_header_timeout is 60s) */
    headersTimeout: duration('20s', HOUR),
    /** the whole request, body included, must be in within this; the wait for the upstream does not count (nginx client_body_timeout: 60s) */
    requestTimeout: duration('60s', HOUR),
    /** an idle keep-alive connection is closed after this (nginx keepalive_timeout 75s) */
    keepAliveTimeout: duration('75s', HOUR),
  }).superRefine((s, ctx) => {
    // node:http refuses it, and a head that may take longer than the whole request means nothing
    if (s.headersTimeout > s.requestTimeout) {
      ctx.addIssue({ code: 'custom', path: ['headersTimeout'], message: `headersTimeout (${s.headersTimeout} ms) must be at most requestTimeout (${s.requestTimeout} ms): the headers are part of the request` })
    }
  }).prefault({}),
  routes: z.array(route).min(1, 'needs at least one route'),
  /** contract §3a: the lease service on the proxy listener; absent: none */
  leases: leasesSchema.optional(),
})

/** The validated config, with durations in ms and sizes in bytes. */
export type Config = z.output<typeof configSchema>
export type RouteConfig = Config['routes'][number]
export type FencingConfig = NonNullable<RouteConfig['fencing']>
export type IdempotencyConfig = NonNullable<RouteConfig['idempotency']>
export type SettleConfig = NonNullable<IdempotencyConfig['settle']>
