// Contract §3: every row of the fencing table against a running gateway and a real upstream,
// asserting the status, the problem type and what the upstream received.
import { describe, expect, test } from 'vitest'
import { headerValues } from './helpers/upstream.js'
import { withGateway } from './helpers/gateway.js'
import { expectProblem, post, metrics, metric } from './helpers/http.js'

const { up, gw } = withGateway((up) => ({
  store: { kind: 'sqlite', path: '@DIR@/fg.db' },
  routes: [
    { name: 'ledger', path: '/ledger/:res', upstream: up.url, fencing: { resource: 'ledger:{param.res}' } },
    { name: 'tenant', path: '/tenant', upstream: up.url, fencing: { resource: '{header.X-Tenant}/{query.doc}' } },
    { name: 'optional', path: '/optional/:res', upstream: up.url, fencing: { resource: '{param.res}', required: false, tokenHeader: 'X-Lease-Generation' } },
  ],
}))
let n = 0
const res = () => `r${++n}-${Date.now()}`

const write = (r: string, token?: string | string[]) =>
  post(`${gw.url}/ledger/${r}`, { r }, token === undefined ? {} : { 'fencing-token': token })

describe('fencing tokens', () => {
  test('a token on a fresh resource is accepted and forwarded unchanged', async () => {
    const r = res()
    const before = up.count(`/ledger/${r}`)
    const reply = await write(r, '5')
    expect(reply.status).toBe(201)
    expect(up.count(`/ledger/${r}`)).toBe(before + 1)
    expect(headerValues(up.last(), 'fencing-token')).toEqual(['5'])
  })

  test('equal tokens are accepted: one lease holder may write many times', async () => {
    const r = res()
    expect((await write(r, '7')).status).toBe(201)
    expect((await write(r, '7')).status).toBe(201)
    expect(up.count(`/ledger/${r}`)).toBe(2)
  })

  test('a stale token gets 412 with resource, token and highestToken, and nothing is forwarded', async () => {
    const r = res()
    await write(r, '10')
    const reply = await write(r, '9')
    expectProblem(reply, { status: 412, type: 'stale-fencing-token', members: { resource: `ledger:${r}`, token: '9', highestToken: '10' } })
    expect(up.count(`/ledger/${r}`)).toBe(1)
  })

  test('a higher token raises the high-water mark', async () => {
    const r = res()
    await write(r, '1')
    expect((await write(r, '2')).status).toBe(201)
    expect((await write(r, '1')).json().highestToken).toBe('2')
  })

  test('a missing token on a route that requires one gets 428', async () => {
    const r = res()
    expectProblem(await write(r), { status: 428, type: 'fencing-token-required' })
    expect(up.count(`/ledger/${r}`)).toBe(0)
  })

  test.each(['-1', '01', '+5', '1.0', '1 7', 'abc', '', '9223372036854775808', '0x10', '1e3'])('malformed token %j gets 400 and does not move the mark', async (bad) => {
    const r = res()
    await write(r, '1')
    expectProblem(await write(r, bad), { status: 400, type: 'fencing-token-malformed' })
    expect((await write(r, '1')).status).toBe(201)
    expect(up.count(`/ledger/${r}`)).toBe(2)
  })

  test('the header given twice is malformed', async () => {
    const r = res()
    expectProblem(await write(r, ['9', '1']), { status: 400, type: 'fencing-token-malformed' })
    expect(up.count(`/ledger/${r}`)).toBe(0)
  })

  test('2^63−1 is accepted and compared exactly, as is 2^53+1 against 2^53', async () => {
    const a = res()
    expect((await write(a, '9223372036854775807')).status).toBe(201)
    const stale = await write(a, '9223372036854775806')
    expect(stale.status).toBe(412)
    expect(stale.text).toContain('"highestToken":"9223372036854775807"')
    const b = res()
    expect((await write(b, '9007199254740993')).status).toBe(201)
    expect((await write(b, '9007199254740992')).status).toBe(412)
  })

  test('resources are independent', async () => {
    const a = res(), b = res()
    await write(a, '10')
    expect((await write(b, '1')).status).toBe(201)
  })

  test('a resource template that cannot be filled gets 400 fencing-resource-missing', async () => {
    const before = up.count('/tenant')
    expectProblem(await post(`${gw.url}/tenant?doc=d1`, {}, { 'fencing-token': '1' }), { status: 400, type: 'fencing-resource-missing' })
    expect(up.count('/tenant')).toBe(before)
    const ok = await post(`${gw.url}/tenant?doc=d1`, {}, { 'fencing-token': '1', 'x-tenant': 't1' })
    expect(ok.status).toBe(201)
    expect(up.count('/tenant')).toBe(before + 1)
  })

  test('a resource filled with a NUL (%00) gets 400 fencing-resource-missing, and nothing is forwarded', async () => {
    const before = up.count('/tenant')
    expectProblem(await post(`${gw.url}/tenant?doc=d%00x`, {}, { 'fencing-token': '1', 'x-tenant': 't1' }), { status: 400, type: 'fencing-resource-missing' })
    expect(up.count('/tenant')).toBe(before)
  })

  test('templates read headers and query: another tenant is another resource', async () => {
    await post(`${gw.url}/tenant?doc=d2`, {}, { 'fencing-token': '5', 'x-tenant': 'ta' })
    expect((await post(`${gw.url}/tenant?doc=d2`, {}, { 'fencing-token': '1', 'x-tenant': 'tb' })).status).toBe(201)
    expect((await post(`${gw.url}/tenant?doc=d2`, {}, { 'fencing-token': '1', 'x-tenant': 'ta' })).status).toBe(412)
  })

  test('required: false lets a request without a token through, and still checks one that has it', async () => {
    const r = res()
    expect((await post(`${gw.url}/optional/${r}`, {})).status).toBe(201)
    expect((await post(`${gw.url}/optional/${r}`, {}, { 'x-lease-generation': '4' })).status).toBe(201)
    const stale = await post(`${gw.url}/optional/${r}`, {}, { 'x-lease-generation': '3' })
    expect(stale.status).toBe(412)
  })

  test.each(['fresh%2F..%2Fvictim', '..%2Fvictim', 'x%2f%2e%2e%2fvictim', 'x%5C..%5Cvictim'])('a dot segment behind an encoded separator (%s) is refused, not fenced as a new resource', async (res) => {
    const before = up.seen.length
    expectProblem(await post(`${gw.url}/ledger/${res}`, {}, { 'fencing-token': '1' }), { status: 400, type: 'bad-path' })
    expect(up.seen.length).toBe(before)
  })

  test('naming the token header in Connection does not stop it reaching the upstream', async () => {
    const r = res()
    expect((await post(`${gw.url}/ledger/${r}`, {}, { 'fencing-token': '3', connection: 'fencing-token' })).status).toBe(201)
    expect(headerValues(up.last(), 'fencing-token')).toEqual(['3'])
  })

  test('a declared body over the route limit is refused before the token can raise the mark', async () => {
    const r = res()
    const { createConnection } = await import('node:net')
    const port = Number(new URL(gw.url).port)
    const answer = await new Promise<string>((resolve) => {
      const s = createConnection(port, '127.0.0.1', () => s.write(`POST /ledger/${r} HTTP/1.1\r\nHost: x\r\nFencing-Token: 100\r\nContent-Length: 20000000\r\n\r\n`))
      let got = ''
      s.on('data', (d) => { got += d.toString('latin1'); if (got.includes('\r\n\r\n')) { s.destroy(); resolve(got) } })
      s.on('error', () => resolve(got))
    })
    expect(answer).toMatch(/^HTTP\/1\.1 413/)
    expect((await write(r, '10')).status).toBe(201)
  })

  test('an absolute-form request target reaches the upstream in origin-form, so Host names the authority', async () => {
    const r = res()
    const { createConnection } = await import('node:net')
    const port = Number(new URL(gw.url).port)
    await new Promise<void>((resolve) => {
      const s = createConnection(port, '127.0.0.1', () => s.write(`POST http://evil.example/ledger/${r} HTTP/1.1\r\nHost: evil.example\r\nFencing-Token: 1\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}`))
      s.on('data', () => {})
      s.on('close', () => resolve())
      s.on('error', () => resolve())
    })
    const seen = up.seen.find((x) => x.url.includes(`/ledger/${r}`))
    expect(seen?.url).toBe(`/ledger/${r}`)
  })

  test('rejections are counted by reason', async () => {
    const before = await metrics(gw.adminUrl)
    const r = res()
    await write(r, '3'); await write(r, '2'); await write(r); await write(r, 'x')
    const after = await metrics(gw.adminUrl)
    for (const reason of ['stale', 'missing', 'malformed']) {
      expect(metric(after, 'fencegate_fencing_rejections_total', { route: 'ledger', reason }) - metric(before, 'fencegate_fencing_rejections_total', { route: 'ledger', reason })).toBe(1)
    }
    expect(metric(after, 'fencegate_requests_total', { route: 'ledger', outcome: 'stale', code: '412', method: 'POST' })).toBeGreaterThan(metric(before, 'fencegate_requests_total', { route: 'ledger', outcome: 'stale', code: '412', method: 'POST' }))
  })

  test('50 concurrent shuffled tokens: nothing below the mark at its check gets through, and the mark ends at the maximum', async () => {
    const r = res()
    const tokens = Array.from({ length: 50 }, (_, i) => i + 1).sort(() => Math.random() - 0.5)
    const replies = await Promise.all(tokens.map(async (t) => ({ t, reply: await write(r, String(t)) })))
    const accepted = replies.filter((x) => x.reply.status === 201).map((x) => x.t)
    expect(accepted).toContain(50)
    for (const { t, reply } of replies.filter((x) => x.reply.status !== 201)) {
      expect(reply.status).toBe(412)
      const highest = Number(reply.json().highestToken)
      expect(highest).toBeGreaterThan(t)
      expect(accepted).toContain(highest)
    }
    // what the upstream received is exactly what was accepted
    const got = up.seen.filter((s) => s.url === `/ledger/${r}`).map((s) => Number(headerValues(s, 'fencing-token')[0]))
    expect(got.sort((a, b) => a - b)).toEqual([...accepted].sort((a, b) => a - b))
    expect((await write(r, '49')).json().highestToken).toBe('50')
  })
})
