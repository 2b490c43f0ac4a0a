// Contract §7 (traces) and §5 (traceparent replaced, never appended), with the production SDK
// set-up (startTracing) exporting to memory, a real gateway and a real upstream.
import { createHash } from 'node:crypto'
import { afterAll, beforeAll, beforeEach, describe, expect, test } from 'vitest'
import { context, SpanKind } from '@opentelemetry/api'
import { suppressTracing } from '@opentelemetry/core'
import { InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace'
import { startTracing, type Tracing } from '../src/telemetry/sdk.js'
import { headerValues } from './helpers/upstream.js'
import { withGateway } from './helpers/gateway.js'
import { post as tracedPost, send as tracedSend } from './helpers/http.js'
import { sleep, until } from './helpers/wait.js'

// The test's own requests are an uninstrumented client's: undici is instrumented in this
// process, so they run with tracing suppressed (no span, no traceparent of their own).
const untraced = <A extends unknown[], R>(f: (...a: A) => Promise<R>) => (...a: A) => context.with(suppressTracing(context.active()), () => f(...a))
const post = untraced(tracedPost)
const send = untraced(tracedSend)

const exporter = new InMemorySpanExporter()
let tracing: Tracing
// tracing first, then the gateway; on the way out the gateway first (hooks run as a stack)
beforeAll(() => { tracing = startTracing({ spanProcessors: [new SimpleSpanProcessor({ exporter })] }) })
afterAll(async () => { await tracing?.shutdown() })
const { up, gw } = withGateway((up) => ({
  routes: [
    { name: 'ledger', path: '/ledger/:res', upstream: up.url, fencing: { resource: 'acct:{param.res}' }, idempotency: { required: false } },
    { name: 'plain', path: '/plain/*', upstream: up.url },
  ],
}))
beforeEach(() => exporter.reset())

// the gateway's calls to the upstream (the test's own undici requests are CLIENT spans too)
const clients = () => exporter.getFinishedSpans().filter((s) => s.kind === SpanKind.CLIENT && String(s.attributes['url.full']).startsWith(up.url))
// the gateway's SERVER spans (the test upstream, in this process, makes some too: children of a CLIENT span)
const servers = () => {
  const calls = new Set(clients().map((c) => c.spanContext().spanId))
  return exporter.getFinishedSpans().filter((s) => s.kind === SpanKind.SERVER && !calls.has(s.parentSpanContext?.spanId ?? ''))
}

/** The spans end when the response's connection is done: wait (3 s at most) until `get` finds them. */
const spans = <T>(get: () => T, what: string) =>
  until(get, { timeoutMs: 3000, intervalMs: 10, message: () => `${what}; spans: ${exporter.getFinishedSpans().map((s) => `${s.name}/${s.kind}`).join(', ')}` })
/** the list, or undefined while it is empty */
const nonEmpty = <T>(xs: T[]): T[] | undefined => (xs.length > 0 ? xs : undefined)

const serverSpan = (outcome: string) => spans(() => servers().find((s) => s.attributes['fencegate.outcome'] === outcome), `a SERVER span with outcome ${outcome}`)
const sha256 = (s: string) => createHash('sha256').update(s).digest('hex')

describe('traces (tracing on)', () => {
  test('a stale write: SERVER span "POST /ledger/:res" with outcome stale, the fencing attributes and the rejection event', async () => {
    expect((await post(`${gw.url}/ledger/a`, {}, { 'fencing-token': '12' })).status).toBe(201)
    expect((await post(`${gw.url}/ledger/a`, {}, { 'fencing-token': '9' })).status).toBe(412)
    const span = await serverSpan('stale')
    expect(span.name).toBe('POST /ledger/:res')
    expect(span.attributes).toMatchObject({
      'http.route': '/ledger/:res',
      'http.request.method': 'POST',
      'http.response.status_code': 412,
      'fencegate.route': 'ledger',
      'fencegate.outcome': 'stale',
      'fencegate.fencing.resource': 'acct:a',
      'fencegate.fencing.token': '9',
      'fencegate.fencing.highest_token': '12',
    })
    const event = span.events.find((e) => e.name === 'fencegate.fencing.rejected')
    expect(event?.attributes).toMatchObject({ reason: 'stale', 'fencegate.fencing.token': '9', 'fencegate.fencing.highest_token': '12' })
    // refused before the upstream: no CLIENT span in its trace
    expect(clients().filter((c) => c.spanContext().traceId === span.spanContext().traceId)).toEqual([])
  })

  test('a missing token is a fencing rejection event too', async () => {
    expect((await post(`${gw.url}/ledger/b`, {})).status).toBe(428)
    const span = await serverSpan('token_missing')
    expect(span.events.map((e) => [e.name, e.attributes?.reason])).toEqual([['fencegate.fencing.rejected', 'missing']])
  })

  test('first request with a key: one CLIENT span under the SERVER span, result stored; the replay: no CLIENT span, the replayed event', async () => {
    const headers = { 'fencing-token': '1', 'idempotency-key': '"order-77"' }
    const first = await post(`${gw.url}/ledger/c`, { amount: 1 }, headers)
    expect(first.status).toBe(201)
    const forwarded = await serverSpan('forwarded')
    const trace = forwarded.spanContext().traceId
    const client = await spans(() => nonEmpty(clients().filter((c) => c.spanContext().traceId === trace)), 'the CLIENT span')
    expect(client).toHaveLength(1)
    expect(client[0].parentSpanContext?.spanId).toBe(forwarded.spanContext().spanId)
    expect(forwarded.attributes['fencegate.idempotency.result']).toBe('stored')
    expect(forwarded.attributes['fencegate.idempotency.key_hash']).toBe(sha256('\norder-77')) // the attempt log's hash: scope (none) and key

    exporter.reset()
    const again = await post(`${gw.url}/ledger/c`, { amount: 1 }, headers)
    expect(again.headers['idempotent-replayed']).toBe('true')
    const replay = await serverSpan('replayed')
    expect(replay.attributes).toMatchObject({
      'fencegate.idempotency.result': 'replayed',
      'fencegate.idempotency.key_hash': sha256('\norder-77'),
      'http.route': '/ledger/:res',
    })
    expect(replay.events.map((e) => e.name)).toContain('fencegate.idempotency.replayed')
    await sleep(50)
    expect(clients()).toEqual([])
    expect(up.count('/ledger/c')).toBe(1)
  })

  test('the upstream receives exactly one traceparent: the gateway\'s, in the SERVER span\'s trace, parented by the CLIENT span', async () => {
    const r = await send(`${gw.url}/plain/x`)
    expect(r.status).toBe(201)
    const span = await serverSpan('forwarded')
    expect(span.name).toBe('GET /plain/*')
    const got = headerValues(up.last(), 'traceparent')
    expect(got).toHaveLength(1)
    const [, traceId, parentId] = got[0].split('-')
    expect(traceId).toBe(span.spanContext().traceId)
    const [client] = await spans(() => nonEmpty(clients().filter((c) => c.spanContext().traceId === traceId)), 'the CLIENT span')
    expect(parentId).toBe(client.spanContext().spanId)
  })

  test('a client\'s traceparent becomes the SERVER span\'s parent and is replaced upstream, never appended', async () => {
    const traceId = '4bf92f3577b34da6a3ce929d0e0e4736'
    const clientSpan = '00f067aa0ba902b7'
    const r = await send(`${gw.url}/plain/y`, { headers: { traceparent: `00-${traceId}-${clientSpan}-01`, tracestate: 'vendor=1' } })
    expect(r.status).toBe(201)
    const span = await spans(() => servers().find((s) => s.spanContext().traceId === traceId && s.attributes['fencegate.route'] === 'plain'), 'the SERVER span in the client\'s trace')
    expect(span.parentSpanContext?.spanId).toBe(clientSpan)
    const seen = up.last()
    const tp = headerValues(seen, 'traceparent')
    expect(tp).toHaveLength(1)
    expect(tp[0]).toMatch(new RegExp(`^00-${traceId}-[0-9a-f]{16}-01$`))
    expect(tp[0]).not.toContain(clientSpan)
    expect(headerValues(seen, 'tracestate')).toEqual(['vendor=1'])
  })

  test('no span carries a raw idempotency key, Authorization, cookie or body', async () => {
    await post(`${gw.url}/ledger/d`, { card: 'secret-body-4242' }, {
      'fencing-token': '1', 'idempotency-key': 'secret-key-xyz', authorization: 'Bearer secret-auth', cookie: 'sid=secret-cookie',
    })
    await serverSpan('forwarded')
    await spans(() => nonEmpty(clients()), 'the CLIENT span')
    const dump = JSON.stringify(exporter.getFinishedSpans().map((s) => [s.name, s.attributes, s.events]))
    for (const secret of ['secret-key-xyz', 'secret-auth', 'secret-cookie', 'secret-body-4242']) expect(dump).not.toContain(secret)
  })

  test('an unmatched path: SERVER span named by the method alone, outcome no_route', async () => {
    expect((await send(`${gw.url}/nowhere`)).status).toBe(404)
    const span = await serverSpan('no_route')
    expect(span.name).toBe('GET')
    expect(span.attributes['http.route']).toBeUndefined()
  })

  test('admin scrapes and probes make no spans', async () => {
    await send(`${gw.adminUrl}/metrics`)
    await send(`${gw.adminUrl}/readyz`)
    await sleep(50)
    expect(servers()).toEqual([])
  })

  test('the duration histograms carry the request\'s trace_id as an exemplar in OpenMetrics', async () => {
    await send(`${gw.url}/plain/exemplar`)
    const span = await serverSpan('forwarded')
    const traceId = span.spanContext().traceId
    const om = await send(`${gw.adminUrl}/metrics`, { headers: { accept: 'application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5' } })
    expect(om.headers['content-type']).toMatch(/^application\/openmetrics-text; version=1\.0\.0/)
    expect(om.text).toMatch(new RegExp(`fencegate_request_duration_seconds_bucket\\{le="[^"]+",route="plain",outcome="forwarded"\\} \\d+ # \\{trace_id="${traceId}",span_id="[0-9a-f]{16}"\\} [0-9.e-]+ [0-9.]+`))
    expect(om.text).toMatch(new RegExp(`fencegate_upstream_duration_seconds_bucket\\{[^}]*route="plain"[^}]*\\} \\d+ # \\{trace_id="${traceId}"`))
    expect(om.text.trimEnd().endsWith('# EOF')).toBe(true)
    // the Prometheus text format has no exemplars and keeps the counters' _total names
    const text = await send(`${gw.adminUrl}/metrics`)
    expect(text.headers['content-type']).toMatch(/^text\/plain/)
    expect(text.text).not.toContain('trace_id')
    expect(text.text).toContain('# TYPE fencegate_requests_total counter')
  })
})
