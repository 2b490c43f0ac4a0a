// Contract §5b, the listeners: the proxy serves HTTPS (HTTP/1.1, ALPN http/1.1) with `tls`, the
// admin listener with `admin.tls`; `tls.clientCa` admits only clients presenting a certificate it
// signed; a cleartext request on a TLS port is never served; X-Forwarded-Proto is https.
import { rmSync } from 'node:fs'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, test } from 'vitest'
import { parseConfig } from '../src/config/load.js'
import { makePki, type Pki, type Pem } from './helpers/certs.js'
import { gatewayConfig, startTestGateway, type TestGateway } from './helpers/gateway.js'
import { cleartext, httpsPost, httpsSend, type TlsClient } from './helpers/https.js'
import { expectProblem, metric, send } from './helpers/http.js'
import { startUpstream, headerValues, type Upstream } from './helpers/upstream.js'

let pki: Pki
let server: Pem
let up: Upstream
let trust: TlsClient

beforeAll(async () => {
  pki = makePki()
  server = pki.issue('server')
  trust = { ca: pki.ca.certPem }
  up = await startUpstream()
})
afterAll(async () => { await up?.close() })

const payments = () => ({ name: 'payments', path: '/accounts/:account/*', upstream: up.url, fencing: { resource: 'account:{param.account}' }, idempotency: {} })

describe('the proxy listener with tls', () => {
  let gw: TestGateway
  beforeAll(async () => {
    gw = await startTestGateway({ tls: { cert: server.cert, key: server.key }, store: { kind: 'sqlite', path: '@DIR@/fg.db' }, routes: [payments()] })
  })
  afterAll(async () => { await gw?.close() })

  test('serves HTTPS: a write forwarded, its retry replayed, the stale token refused 412', async () => {
    expect(gw.url).toMatch(/^https:\/\/127\.0\.0\.1:\d+$/)
    const before = up.seen.length
    const charge = (token: string) => httpsPost(`${gw.url}/accounts/acct-1/charges`, trust, { amount: 1250 }, { 'fencing-token': token, 'idempotency-key': 'job-9' })
    const first = await charge('33')
    expect(first.status).toBe(201)
    expect(first.alpn).toBe('http/1.1')
    expect(first.serial).toBe(server.serial)
    const replay = await charge('34')
    expect(replay.status).toBe(201)
    expect(replay.headers['idempotent-replayed']).toBe('true')
    expect(replay.text).toBe(first.text)
    const stale = await charge('33')
    expectProblem(stale, { status: 412, type: 'stale-fencing-token' })
    // one request reached the upstream, in cleartext, saying the client's link was https
    expect(up.seen.length - before).toBe(1)
    const seen = up.seen[before]
    expect(headerValues(seen, 'x-forwarded-proto')).toEqual(['https'])
    expect(JSON.parse(seen.body.toString())).toEqual({ amount: 1250 })
  })

  test('a cleartext request on the TLS port is never served', async () => {
    const before = up.seen.length
    const got = await cleartext(gw.url, '/accounts/acct-2/charges')
    expect(got.toString('latin1')).not.toContain('HTTP/')
    expect(up.seen.length).toBe(before)
    // and the listener still serves HTTPS
    expect((await httpsSend(`${gw.url}/accounts/acct-2/x`, trust, { headers: { 'fencing-token': '1' } })).status).toBe(201)
  })

  test('a client that does not trust the certificate\'s CA cannot connect', async () => {
    const stranger = pki.selfSigned('stranger')
    await expect(httpsSend(`${gw.url}/accounts/acct-3/x`, { ca: stranger.certPem })).rejects.toThrow(/self[- ]signed|unable to verify|unable to get/i)
  })
})

describe('tls.clientCa', () => {
  let gw: TestGateway
  let client: Pem
  beforeAll(async () => {
    client = pki.issue('client-1', { client: true })
    gw = await startTestGateway({ tls: { cert: server.cert, key: server.key, clientCa: pki.ca.cert }, routes: [{ name: 'plain', path: '/plain/*', upstream: up.url }] })
  })
  afterAll(async () => { await gw?.close() })

  test('a caller without a client certificate is refused, and nothing is forwarded', async () => {
    const before = up.seen.length
    await expect(httpsSend(`${gw.url}/plain/a`, trust)).rejects.toThrow()
    expect(up.seen.length).toBe(before)
  })

  test('a caller with a certificate the CA signed is served', async () => {
    const r = await httpsSend(`${gw.url}/plain/b`, { ...trust, cert: client.certPem, key: client.keyPem })
    expect(r.status).toBe(201)
    expect(headerValues(up.last(), 'x-forwarded-proto')).toEqual(['https'])
  })

  test('after a rotation: client certificates still required, ALPN still http/1.1, the new certificate served', async () => {
    const fresh = pki.issue('server-rotated')
    const text = gatewayConfig({ tls: { cert: fresh.cert, key: fresh.key, clientCa: pki.ca.cert }, routes: [{ name: 'plain', path: '/plain/*', upstream: up.url }] })
    expect(await gw.reload(parseConfig(text, join(gw.dir, 'fencegate.yaml'), {}))).toEqual({ applied: true, routes: 1 })
    await expect(httpsSend(`${gw.url}/plain/d`, trust)).rejects.toThrow()
    const r = await httpsSend(`${gw.url}/plain/e`, { ...trust, cert: client.certPem, key: client.keyPem })
    expect(r.status).toBe(201)
    expect(r.serial).toBe(fresh.serial)
    expect(r.alpn).toBe('http/1.1')
  })

  test('a caller with a certificate another CA signed (self-signed) is refused', async () => {
    const before = up.seen.length
    const self = pki.selfSigned('self-client', { client: true })
    await expect(httpsSend(`${gw.url}/plain/c`, { ...trust, cert: self.certPem, key: self.keyPem })).rejects.toThrow()
    expect(up.seen.length).toBe(before)
  })
})

describe('admin.tls', () => {
  let gw: TestGateway
  let adminCert: Pem
  beforeAll(async () => {
    adminCert = pki.issue('admin', { days: 10 })
    gw = await startTestGateway({ tls: { cert: server.cert, key: server.key }, admin: { tls: { cert: adminCert.cert, key: adminCert.key } }, routes: [{ name: 'plain', path: '/plain/*', upstream: up.url }] })
  })
  afterAll(async () => { await gw?.close() })

  test('/metrics over HTTPS shows each listener\'s seconds until its certificate\'s notAfter', async () => {
    expect(gw.adminUrl).toMatch(/^https:\/\//)
    const r = await httpsSend(`${gw.adminUrl}/metrics`, trust)
    expect(r.status).toBe(200)
    expect(r.serial).toBe(adminCert.serial)
    expect(r.text).toContain('# TYPE fencegate_tls_certificate_expiry_seconds gauge')
    const day = 86_400
    const proxy = metric(r.text, 'fencegate_tls_certificate_expiry_seconds', { listener: 'proxy' })
    const admin = metric(r.text, 'fencegate_tls_certificate_expiry_seconds', { listener: 'admin' })
    expect(proxy).toBeGreaterThan(29 * day)
    expect(proxy).toBeLessThanOrEqual(30 * day)
    expect(admin).toBeGreaterThan(9 * day)
    expect(admin).toBeLessThanOrEqual(10 * day)
  })

  test('cleartext on the admin port is not served', async () => {
    expect((await cleartext(gw.adminUrl, '/metrics')).toString('latin1')).not.toContain('HTTP/')
    await expect(send(gw.adminUrl.replace('https:', 'http:') + '/metrics')).rejects.toThrow()
  })
})

test('a plain listener shows no expiry series', async () => {
  const gw = await startTestGateway({ routes: [{ name: 'plain', path: '/plain/*', upstream: up.url }] })
  try {
    expect(gw.url).toMatch(/^http:\/\//)
    const text = (await send(`${gw.adminUrl}/metrics`)).text
    expect(text).not.toMatch(/^fencegate_tls_certificate_expiry_seconds\{/m)
  } finally {
    await gw.close()
  }
})

describe('reload, in process', () => {
  let gw: TestGateway
  let spec: (tls?: object) => string
  beforeAll(async () => {
    spec = (tls: object = { cert: server.cert, key: server.key }) => gatewayConfig({ tls: tls as { cert: string; key: string }, routes: [{ name: 'plain', path: '/plain/*', upstream: up.url }] })
    gw = await startTestGateway(spec())
  })
  afterAll(async () => { await gw?.close() })

  // the running config's own listen values (127.0.0.1:0) and file, so only TLS differs
  const next = async (text: string) => parseConfig(text, join(gw.dir, 'fencegate.yaml'), {})

  test('turning client certificates on, or TLS off, needs a restart: refused, named', async () => {
    const withCa = await gw.reload(await next(spec({ cert: server.cert, key: server.key, clientCa: pki.ca.cert })))
    expect(withCa).toMatchObject({ applied: false, reason: 'it changes tls.clientCa, which only a restart can change' })
    const plain = await gw.reload(await next(gatewayConfig({ routes: [{ name: 'plain', path: '/plain/*', upstream: up.url }] })))
    expect(plain).toMatchObject({ applied: false, reason: 'it changes tls, which only a restart can change' })
    expect((plain as { problems: string[] }).problems[0]).toMatch(/^tls: changed, but a listener is created with or without TLS/)
  })

  test('new files applied to new connections; a file gone by the time it is read refuses the reload and keeps the running one', async () => {
    const fresh = pki.issue('in-process-2')
    expect(await gw.reload(await next(spec({ cert: fresh.cert, key: fresh.key })))).toEqual({ applied: true, routes: 1 })
    expect((await httpsSend(`${gw.url}/plain/a`, trust)).serial).toBe(fresh.serial)
    const gone = pki.issue('in-process-3')
    const config = await next(spec({ cert: gone.cert, key: gone.key }))
    rmSync(gone.key)
    const refused = await gw.reload(config)
    expect(refused).toEqual({ applied: false, reason: 'a TLS file cannot be used', problems: [`tls.key: cannot read ${gone.key}: no such file`] })
    expect((await httpsSend(`${gw.url}/plain/b`, trust)).serial).toBe(fresh.serial)
    const m = (await send(`${gw.adminUrl}/metrics`)).text
    expect(metric(m, 'fencegate_config_reloads_total', { result: 'refused' })).toBe(3)
    expect(gw.logs.some((l) => l.includes('config reload refused: a TLS file cannot be used'))).toBe(true)
  })
})
