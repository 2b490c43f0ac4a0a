/**
 * Issue 12 §1 and §5 against a running gateway, a real upstream and a SQLite store: the 412's
 * `supersededForMs` (from the store's record of when the superseding token was first accepted),
 * the lateness histogram and the generations counter, the attempt log's effect durations and
 * lateness, `GET /leases` and `fencegate leases` — advice that changes when the upstream gets
 * slower — and the 409's Retry-After from the route's observed effect durations.
 */
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { beforeAll, describe, expect, test } from 'vitest'
import { gatewayConfig, withGateway, type GatewaySpec } from './helpers/gateway.js'
import { runCli } from './helpers/run.js'
import { expectProblem, metric, metrics, post, send } from './helpers/http.js'
import { sleep } from './helpers/wait.js'
import { retryAfterSeconds, EffectDurations } from '../src/idempotency/retry-after.js'
import { routeLeases, human } from '../src/audit/leases.js'
import { brokerSettings } from '../src/audit/broker-settings.js'
import { parseConfig } from '../src/config/load.js'

const run = Date.now().toString(36)

const config = (upstream: string): GatewaySpec => ({
  store: { kind: 'sqlite', path: '@DIR@/fg.db' },
  routes: [
    { name: 'work', path: '/work/:res/*', upstream, fencing: { resource: 'job:{param.res}' }, idempotency: { lease: '30s' } },
    { name: 'sized', path: '/sized/:res/*', upstream, fencing: { resource: 'sized:{param.res}' }, idempotency: { lease: '2s' } },
    { name: 'retry', path: '/retry/*', upstream, idempotency: { lease: '30s' } },
    { name: 'plain', path: '/plain/*', upstream },
  ],
})
const { up, gw } = withGateway((up) => config(up.url))
/** the same config in a file, on the gateway's store, for the CLI */
let configPath: string
beforeAll(() => {
  configPath = join(gw.dir, 'fencegate.yaml')
  writeFileSync(configPath, gatewayConfig(config(up.url)).replaceAll('@DIR@', gw.dir))
})

const write = (path: string, token: string, key?: string) => post(`${gw.url}${path}`, {}, { 'fencing-token': token, ...(key ? { 'idempotency-key': key } : {}) })
const count = async (name: string, labels: Record<string, string>) => metric(await metrics(gw.adminUrl), name, labels)

describe('a 412 says how long ago the writer was superseded', () => {
  test('supersededForMs counts from the first acceptance of the superseding token (an equal token does not reset it), in the body, the detail, the histogram and the attempt log', async () => {
    const res = `a-${run}`
    const lateBefore = await count('fencegate_fencing_stale_lateness_seconds_count', { route: 'work' })
    const gensBefore = await count('fencegate_fencing_generations_total', { route: 'work' })
    const took = Date.now() // before the write: the mark's since is taken while it is handled
    expect((await write(`/work/${res}/apply`, '5', `${res}-k1`)).status).toBe(201) // admit: raises the mark
    await sleep(300)
    const body = expectProblem(await write(`/work/${res}/apply`, '4', `${res}-k2`), {
      status: 412, type: 'stale-fencing-token', members: { token: '4', highestToken: '5' },
      detail: /\(token 5 took over \d+ ms before this request\)\.$/,
    })
    expect(body.supersededForMs).toBeGreaterThanOrEqual(280)
    expect(body.supersededForMs).toBeLessThanOrEqual(Date.now() - took)

    // the same holder writes again (equal token, no key: the fence alone): the mark's since stays
    expect((await write(`/work/${res}/apply`, '5')).status).toBe(201)
    await sleep(1100)
    const later = expectProblem(await write(`/work/${res}/apply`, '4'), { status: 412, type: 'stale-fencing-token', detail: /took over 1\.\d s before this request/ })
    expect(later.supersededForMs).toBeGreaterThanOrEqual(1380)

    // a newer generation: a writer one behind is late by about nothing
    const sixAt = Date.now() // before the write: token 6 is first accepted while it is handled
    expect((await write(`/work/${res}/apply`, '6', `${res}-k3`)).status).toBe(201)
    const fresh = expectProblem(await write(`/work/${res}/apply`, '5', `${res}-k4`), { status: 412, type: 'stale-fencing-token', members: { highestToken: '6' } })
    expect(fresh.supersededForMs).toBeLessThan(300)

    // stale and with a key it cannot use: 412 first (precedence), the mark read, not raised
    const refused = expectProblem(await write(`/work/${res}/apply`, '3', 'x'.repeat(256)), { status: 412, type: 'stale-fencing-token' })
    // counted from 6's first acceptance, as the fresh one was, and no earlier
    expect(refused.supersededForMs).toBeGreaterThanOrEqual(fresh.supersededForMs as number)
    expect(refused.supersededForMs).toBeLessThanOrEqual(Date.now() - sixAt)

    expect(await count('fencegate_fencing_stale_lateness_seconds_count', { route: 'work' })).toBe(lateBefore + 4)
    expect(await count('fencegate_fencing_generations_total', { route: 'work' })).toBe(gensBefore + 2)

    // the attempt log keeps each stale write's lateness and each forward's effect duration
    await gw.audit.flush()
    const t = (await send(`${gw.adminUrl}/audit/timeline?resource=${encodeURIComponent(`job:${res}`)}`)).json()
    const stale = t.entries.filter((e: { outcome: string }) => e.outcome === 'stale')
    expect(stale.map((e: { lateMs: number }) => e.lateMs)).toEqual([body.supersededForMs, later.supersededForMs, fresh.supersededForMs, refused.supersededForMs])
    const forwarded = t.entries.filter((e: { outcome: string }) => e.outcome === 'forwarded')
    expect(forwarded).toHaveLength(3)
    for (const e of forwarded) expect(e.upstreamMs).toBeGreaterThan(0)
  })
})

describe('fencegate leases', () => {
  test('advice from the observed effects, which grows when the upstream gets slower; idempotency.lease compared with it', async () => {
    for (let i = 0; i < 10; i++) expect((await write(`/sized/s${i}-${run}/apply?ms=20`, '1')).status).toBe(201)
    const quick = (await send(`${gw.adminUrl}/leases?route=sized`)).json()
    expect(quick.routes).toHaveLength(1)
    const q = quick.routes[0]
    expect(q).toMatchObject({ route: 'sized', configured: { idempotencyLeaseMs: 2000, upstreamTimeoutMs: 2000 } })
    expect(q.effects.count).toBe(10)
    expect(q.effects.p50Ms).toBeGreaterThanOrEqual(20)
    expect(q.advice.effectBasis).toBe('max')
    // E ≈ 20-100 ms, M = 1 s: L = 1.5 (E + M), rounded up to 100 ms
    expect(q.advice.marginMs).toBe(1000)
    expect(q.advice.minimumLeaseMs).toBe(Math.ceil((1.5 * (q.advice.effectMs + 1000)) / 100) * 100)
    expect(q.advice.renewalIntervalMs).toBe(Math.floor(q.advice.minimumLeaseMs / 300) * 100)
    expect(q.advice.lines.join('\n')).toMatch(/^Minimum lease: /m)
    expect(q.advice.lines.join('\n')).toContain('idempotency.lease (2s) covers the effect plus the margin')
    expect(q.advice.warnings.join('\n')).toMatch(/Only 10 answered writes in this window/)
    // GET /leases gives the same advice as each broker's setting
    expect(q.advice.brokers.map((b: { broker: string }) => b.broker)).toEqual(['NATS JetStream', 'RabbitMQ', 'BullMQ', 'Amazon SQS'])
    expect(q.advice.brokers[0].settings).toMatchObject({ 'ack_wait (API, ns)': q.advice.minimumLeaseMs * 1_000_000 })
    expect(q.advice.brokers[2].settings).toMatchObject({ lockDuration: q.advice.minimumLeaseMs, lockRenewTime: q.advice.renewalIntervalMs })

    // the upstream slows down: 1.5 s effects
    await Promise.all([0, 1, 2].map((i) => write(`/sized/slow${i}-${run}/apply?ms=1500`, '1')))
    const slow = (await send(`${gw.adminUrl}/leases?route=sized`)).json().routes[0]
    expect(slow.effects.count).toBe(13)
    expect(slow.effects.maxMs).toBeGreaterThanOrEqual(1500)
    expect(slow.advice.minimumLeaseMs).toBeGreaterThanOrEqual(4500) // 1.5 × (1.5 s + 1.5 s)
    expect(slow.advice.minimumLeaseMs).toBeGreaterThan(q.advice.minimumLeaseMs)
    expect(slow.advice.warnings.join('\n')).toMatch(/idempotency\.lease \(2s\) is shorter than the effect plus the margin/)
    expect(slow.generations).toMatchObject({ resources: 13, total: 13, handovers: 0 })
  })

  test('the stale writers\' lateness, with a warning when it is longer than the advised margin; the CLI reads the same from the store', async () => {
    await gw.audit.flush()
    const r = (await send(`${gw.adminUrl}/leases?route=work&since=1h`)).json().routes[0]
    expect(r.stale.count).toBeGreaterThanOrEqual(4)
    expect(r.stale.measured).toBe(r.stale.count)
    expect(r.stale.latenessMaxMs).toBeGreaterThanOrEqual(1380)
    expect(r.generations.handovers).toBeGreaterThanOrEqual(1)
    expect(r.advice.warnings.join('\n')).toMatch(/stale writes came up to 1\.\d+ s after their successor took over .*longer than the 1 s margin/)

    const json = await runCli(['leases', '--config', configPath, '--route', 'work', '--json'], { env: { ...process.env, OTEL_SDK_DISABLED: 'true' } })
    expect(json.status, json.stderr).toBe(0)
    const cli = JSON.parse(json.stdout)
    expect(cli.routes[0].stale).toEqual(r.stale)
    expect(cli.routes[0].effects.count).toBe(r.effects.count)
    expect(cli.method.join(' ')).toMatch(/Pub\/Sub.*BullMQ.*SQS/)
    const text = await runCli(['leases', '--config', configPath], { env: { ...process.env, OTEL_SDK_DISABLED: 'true' } })
    expect(text.status, text.stderr).toBe(0)
    expect(text.stdout).toMatch(/^route work /m)
    expect(text.stdout).toMatch(/^route sized /m)
    expect(text.stdout).not.toMatch(/^route retry /m) // not fenced
    expect(text.stdout).toMatch(/advice {7}lease ≥ \S+, renew every \S+/)
    expect(text.stdout).toContain('the gateway sees only the writes that reach it')
    expect(text.stdout).toMatch(/^ {4}NATS JetStream {2}ack_wait \S+, .*msg\.working\(\) every /m)
    expect(text.stdout).toMatch(/^ {4}RabbitMQ {8}consumer_timeout 60000, x-consumer-timeout 60000, heartbeat \d+$/m)
    expect(text.stdout).toMatch(/^ {4}BullMQ {10}lockDuration \d+, lockRenewTime \d+/m)
    expect(text.stdout).toMatch(/^ {4}Amazon SQS {6}VisibilityTimeout \d+, /m)
    expect(cli.routes[0].advice.brokers.map((b: { broker: string }) => b.broker)).toEqual(['NATS JetStream', 'RabbitMQ', 'BullMQ', 'Amazon SQS'])
    const bad = await runCli(['leases', '--config', configPath, '--route', 'nope'])
    expect(bad.status).toBe(2)
    expect((await send(`${gw.adminUrl}/leases?route=nope`)).status).toBe(400)
  })

  test('routeLeases alone: p99.9 from 1000 writes on, generations in token order, unanswered writes named', () => {
    const rc = parseConfig(`routes:\n  - name: w\n    match: { path: "/w/*" }\n    upstream: { url: "http://127.0.0.1:9", timeout: 5s }\n    fencing: { resource: "x" }\n`, '/tmp/x.yaml').routes[0]
    const entries = Array.from({ length: 2000 }, (_, i) => ({ time: i * 1000, kind: 'attempt' as const, replica: 'r', route: 'w', resource: `res${i % 2}`, token: String(1 + Math.floor(i / 500)), outcome: 'forwarded' as const, upstreamMs: i === 1999 ? 9000 : 100 + (i % 10) }))
    entries.push({ time: 3_000_000, kind: 'attempt', replica: 'r', route: 'w', resource: 'res0', token: '9', outcome: 'outcome_unknown' as never, unknown: 'timeout' } as never)
    const r = routeLeases(rc, entries, 3_600_000)
    expect(r.effects).toMatchObject({ count: 2000, p50Ms: 104, maxMs: 9000, unanswered: 1 })
    expect(r.advice.effectBasis).toBe('p99.9')
    expect(r.advice.effectMs).toBe(r.effects.p999Ms)
    // 4 tokens on each resource, then token 9 on res0; tenures of 500 s between first writes
    expect(r.generations).toMatchObject({ resources: 2, total: 9, handovers: 7, maxPerResource: 5, medianTenureMs: 500_000 })
    expect(r.advice.warnings.join('\n')).toMatch(/1 fenced write was sent and got no answer within upstream\.timeout \(5 s\)/)
    // the advice in each broker's words: L = 1.5 × (p99.9 109 ms + 1 s) = 1.7 s, renewed every 500 ms
    expect(r.advice).toMatchObject({ minimumLeaseMs: 1700, renewalIntervalMs: 500 })
    const brokers = Object.fromEntries(r.advice.brokers!.map((b) => [b.broker, b.settings]))
    expect(brokers).toEqual({
      'NATS JetStream': { ack_wait: '1700ms', 'ack_wait (API, ns)': 1_700_000_000, 'msg.working() every': '500ms', max_deliver: -1 },
      RabbitMQ: { consumer_timeout: 60_000, 'x-consumer-timeout': 60_000, heartbeat: 1 },
      BullMQ: { lockDuration: 1700, lockRenewTime: 500, stalledInterval: 1700 },
      'Amazon SQS': { VisibilityTimeout: 2, 'ChangeMessageVisibility every': '500ms' },
    })
    // RabbitMQ's floor of a minute, AWS's 6 × the function timeout
    expect(r.advice.brokers!.find((b) => b.broker === 'RabbitMQ')!.note).toContain('so 1700ms becomes 1m')
    expect(r.advice.brokers!.find((b) => b.broker === 'Amazon SQS')!.note).toContain('at least 6 × the function timeout: with a function timeout of 2 s, 12 s')
    const long = brokerSettings(180_000, 60_000)
    expect(long.find((b) => b.broker === 'RabbitMQ')!.settings).toEqual({ consumer_timeout: 180_000, 'x-consumer-timeout': 180_000, heartbeat: 90 })
    expect(long.find((b) => b.broker === 'RabbitMQ')!.note).not.toContain('becomes')
    expect(long.find((b) => b.broker === 'Amazon SQS')!.settings).toMatchObject({ VisibilityTimeout: 180 })
    expect(brokerSettings(50_000_000, 1000).find((b) => b.broker === 'Amazon SQS')!.settings).toMatchObject({ VisibilityTimeout: 43_200 })
    expect(human(41_300)).toBe('41.3 s')
    expect(human(125_000)).toBe('2 min 5 s')
  })
})

describe('Retry-After of a 409 request-in-flight', () => {
  test('from the route\'s observed effect durations (p90), never less than 1 s', async () => {
    // nothing observed on the route yet: 1 s
    const k0 = `first-${run}`
    const lone = post(`${gw.url}/retry/slow?ms=400`, {}, { 'idempotency-key': k0 })
    await sleep(100)
    const early = await post(`${gw.url}/retry/slow?ms=400`, {}, { 'idempotency-key': k0 })
    expectProblem(early, { status: 409, type: 'request-in-flight', headers: { 'retry-after': '1' } })
    await lone
    // the upstream takes 1.6 s (upstream.timeout is 2 s): a repeat is told to come back in 2 s
    const warm = await Promise.all(Array.from({ length: 6 }, (_, i) => post(`${gw.url}/retry/slow?ms=1600`, {}, { 'idempotency-key': `warm-${run}-${i}` })))
    expect(warm.map((r) => r.status)).toEqual([200, 200, 200, 200, 200, 200])
    const k = `busy-${run}`
    const firstAttempt = post(`${gw.url}/retry/slow?ms=1600`, {}, { 'idempotency-key': k })
    await sleep(100)
    const repeat = await post(`${gw.url}/retry/slow?ms=1600`, {}, { 'idempotency-key': k })
    expectProblem(repeat, { status: 409, type: 'request-in-flight', headers: { 'retry-after': '2' } })
    expect((await firstAttempt).status).toBe(200)
  })

  test('retryAfterSeconds: no later than the record\'s lease end, never below 1', () => {
    expect(retryAfterSeconds(10_000, 0, undefined)).toBe(1)
    expect(retryAfterSeconds(30_000, 0, 2100)).toBe(3)
    expect(retryAfterSeconds(1_500, 0, 9000)).toBe(2)
    expect(retryAfterSeconds(100, 0, 9000)).toBe(1)
    expect(retryAfterSeconds(30_000, 0, 10)).toBe(1)
    const d = new EffectDurations()
    for (let i = 1; i <= 4; i++) d.add(i * 100)
    expect(d.quantile(0.9)).toBeUndefined()
    for (let i = 5; i <= 10; i++) d.add(i * 100)
    expect(d.quantile(0.9)).toBe(900)
    expect(d.quantile(0.5)).toBe(500)
  })
})
