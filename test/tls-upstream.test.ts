// Contract §5b, upstream TLS: a route's `upstream.tls` trusts its own CA, presents a client
// certificate (mutual TLS) and sends and checks `servername`. An upstream whose certificate does
// not verify is never sent the request: 502 upstream-unavailable naming the TLS reason, the
// claim released so the key's retry is forwarded once the config trusts it. A reload reads the
// files again: new connections present the new client certificate.
import { copyFileSync, renameSync, rmSync } from 'node:fs'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, test } from 'vitest'
import { parseConfig } from '../src/config/load.js'
import { makePki, type Pem, type Pki } from './helpers/certs.js'
import { freePort, gatewayConfig, spawnGateway, startTestGateway, tempDir, writeFileSync, type GatewaySpec, type TestGateway } from './helpers/gateway.js'
import { expectProblem, metric, metrics, post } from './helpers/http.js'
import { startHttpsUpstream, type HttpsUpstream } from './helpers/https-upstream.js'
import { until } from './helpers/wait.js'

let pki: Pki
let server: Pem
let client: Pem
const DAY = 86_400

beforeAll(() => {
  pki = makePki()
  server = pki.issue('upstream')
  client = pki.issue('gateway', { client: true, days: 40 })
})

/** A gateway with one idempotent route to `url`, its upstream.tls `tls`. */
const spec = (url: string, tls: Record<string, string> | undefined): GatewaySpec => ({
  routes: [{ name: 'pay', path: '/pay/*', methods: ['POST'], upstream: { url, ...(tls ? { tls } : {}) }, idempotency: {} }],
})

describe('mutual TLS to an upstream that demands a client certificate', () => {
  let up: HttpsUpstream
  let gw: TestGateway
  let bare: TestGateway
  beforeAll(async () => {
    up = await startHttpsUpstream({ cert: server, clientCa: pki.ca.certPem })
    gw = await startTestGateway(spec(up.url, { ca: pki.ca.cert, cert: client.cert, key: client.key }))
    bare = await startTestGateway(spec(up.url, { ca: pki.ca.cert }))
  })
  afterAll(async () => { await gw?.close(); await bare?.close(); await up?.close() })

  test('the request reaches the upstream, which saw the gateway\'s client certificate; its expiry is a gauge', async () => {
    const r = await post(`${gw.url}/pay/1`, { amount: 5 }, { 'idempotency-key': 'mtls-1' })
    expect(r.status, r.text).toBe(201)
    expect(up.seen.at(-1)).toMatchObject({ url: '/pay/1', clientSerial: client.serial })
    const left = metric(await metrics(gw.adminUrl), 'fencegate_tls_certificate_expiry_seconds', { route: 'pay' })
    expect(left).toBeGreaterThan(39 * DAY)
    expect(left).toBeLessThanOrEqual(40 * DAY)
  })

  test('without a client certificate: 502 naming why, nothing taken by the upstream', async () => {
    const before = up.seen.length
    const r = await post(`${bare.url}/pay/2`, { amount: 5 }, { 'idempotency-key': 'mtls-2' })
    expectProblem(r, { status: 502, type: 'upstream-unavailable', detail: [/client certificate/, 'nothing was sent'] })
    expect(up.seen.length).toBe(before)
    const m = await metrics(bare.adminUrl)
    expect(metric(m, 'fencegate_requests_total', { route: 'pay', outcome: 'upstream_error', code: '502' })).toBe(1)
    expect(metric(m, 'fencegate_unknown_outcomes_total', { route: 'pay', reason: 'reset' })).toBe(0)
  })
})

describe('an upstream certificate that does not verify', () => {
  let selfSigned: Pem
  let up: HttpsUpstream
  let gw: TestGateway
  beforeAll(async () => {
    selfSigned = pki.selfSigned('lone')
    up = await startHttpsUpstream({ cert: selfSigned })
    gw = await startTestGateway(spec(up.url, { ca: pki.ca.cert }))
  })
  afterAll(async () => { await gw?.close(); await up?.close() })

  test('502 with the TLS reason, nothing received; once the config trusts it, the key\'s retry is forwarded once', async () => {
    const first = await post(`${gw.url}/pay/3`, { amount: 7 }, { 'idempotency-key': 'untrusted-1' })
    expectProblem(first, { status: 502, type: 'upstream-unavailable', detail: ['self-signed certificate', 'nothing was sent'] })
    expect(up.seen).toEqual([])
    expect(metric(await metrics(gw.adminUrl), 'fencegate_requests_total', { route: 'pay', outcome: 'upstream_error', code: '502' })).toBe(1)
    const next = parseConfig(gatewayConfig(spec(up.url, { ca: selfSigned.cert })), join(gw.dir, 'fencegate.yaml'))
    expect(await gw.reload(next)).toEqual({ applied: true, routes: 1 })
    const retry = await post(`${gw.url}/pay/3`, { amount: 7 }, { 'idempotency-key': 'untrusted-1' })
    expect(retry.status, retry.text).toBe(201)
    const again = await post(`${gw.url}/pay/3`, { amount: 7 }, { 'idempotency-key': 'untrusted-1' })
    expect(again.status).toBe(201)
    expect(again.headers['idempotent-replayed']).toBe('true')
    expect(up.count('/pay/3')).toBe(1)
  })
})

describe('the name checked', () => {
  let named: Pem
  let up: HttpsUpstream
  let gw: TestGateway
  beforeAll(async () => {
    named = pki.issue('payments', { san: 'DNS:payments.internal' })
    up = await startHttpsUpstream({ cert: named })
  })
  afterAll(async () => { await gw?.close(); await up?.close() })

  test('a certificate for another name: 502 saying the name does not match, nothing received', async () => {
    gw = await startTestGateway(spec(up.url, { ca: pki.ca.cert }))
    const r = await post(`${gw.url}/pay/4`, { amount: 1 }, { 'idempotency-key': 'name-1' })
    expectProblem(r, { status: 502, type: 'upstream-unavailable', detail: [/Hostname\/IP does not match certificate's altnames/, 'nothing was sent'] })
    expect(up.seen).toEqual([])
    await gw.close()
    gw = await startTestGateway(spec(up.url, { ca: pki.ca.cert, servername: 'other.internal' }))
    const wrong = await post(`${gw.url}/pay/4`, { amount: 1 }, { 'idempotency-key': 'name-2' })
    expectProblem(wrong, { status: 502, type: 'upstream-unavailable', detail: /Host: other\.internal/ })
    expect(up.seen).toEqual([])
  })

  test('servername is sent as SNI and checked instead of the URL\'s host', async () => {
    await gw?.close()
    gw = await startTestGateway(spec(up.url, { ca: pki.ca.cert, servername: 'payments.internal' }))
    const r = await post(`${gw.url}/pay/5`, { amount: 1 }, { 'idempotency-key': 'name-3' })
    expect(r.status, r.text).toBe(201)
    expect(up.seen.at(-1)).toMatchObject({ url: '/pay/5', servername: 'payments.internal' })
  })
})

describe('rotation of the client certificate on SIGHUP', () => {
  let up: HttpsUpstream
  beforeAll(async () => { up = await startHttpsUpstream({ cert: server, clientCa: pki.ca.certPem }) })
  afterAll(async () => { await up?.close() })

  test('new connections present the new client certificate; the gauge follows', async () => {
    const dir = tempDir('fg-tls-up-rot-')
    const live = { cert: join(dir, 'client.crt'), key: join(dir, 'client.key') }
    const install = (pem: Pem) => {
      for (const [from, to] of [[pem.cert, live.cert], [pem.key, live.key]]) { copyFileSync(from, `${to}.tmp`); renameSync(`${to}.tmp`, to) }
    }
    install(client)
    const port = await freePort()
    const admin = await freePort()
    const file = join(dir, 'fencegate.yaml')
    writeFileSync(file, gatewayConfig({
      ...spec(up.url, { ca: pki.ca.cert, ...live }),
      listen: `127.0.0.1:${port}`, admin: { listen: `127.0.0.1:${admin}` }, store: { kind: 'sqlite', path: join(dir, 'fg.db') },
    }))
    const gw = await spawnGateway(file, port, admin, join(dir, 'gw.log'))
    try {
      const url = `http://127.0.0.1:${port}`
      expect((await post(`${url}/pay/6`, {}, { 'idempotency-key': 'rot-1' })).status).toBe(201)
      expect(up.seen.at(-1)?.clientSerial).toBe(client.serial)
      // requests in a loop across the rotation: none fails (the old pool drains)
      let running = true
      const failures: string[] = []
      let n = 0
      const loop = (async () => {
        while (running) {
          const r = await post(`${url}/pay/load`, {}, { 'idempotency-key': `rot-load-${n++}` }).catch((e: Error) => ({ status: 0, text: e.message }))
          if (r.status !== 201) failures.push(`${r.status} ${r.text}`)
        }
      })()
      await until(() => n > 10, { timeoutMs: 5000 })
      const renewed = pki.issue('gateway-renewed', { client: true, days: 80 })
      install(renewed)
      gw.child.kill('SIGHUP')
      await until(async () => metric(await metrics(gw.adminUrl), 'fencegate_config_reloads_total', { result: 'applied' }) === 1, { timeoutMs: 5000, message: () => gw.log() })
      const at = n
      await until(() => n > at + 10, { timeoutMs: 5000 })
      running = false
      await loop
      expect(failures).toEqual([])
      const r = await post(`${url}/pay/7`, {}, { 'idempotency-key': 'rot-2' })
      expect(r.status, r.text).toBe(201)
      expect(up.seen.at(-1)).toMatchObject({ url: '/pay/7', clientSerial: renewed.serial })
      expect(metric(await metrics(gw.adminUrl), 'fencegate_tls_certificate_expiry_seconds', { route: 'pay' })).toBeGreaterThan(79 * DAY)
      // a key that cannot be read refuses the reload: the running pools keep the renewed certificate
      rmSync(live.key)
      gw.child.kill('SIGHUP')
      await until(async () => metric(await metrics(gw.adminUrl), 'fencegate_config_reloads_total', { result: 'refused' }) === 1, { timeoutMs: 5000, message: () => gw.log() })
      expect(gw.log()).toContain(`routes[0].upstream.tls.key: cannot read ${live.key}: no such file`)
      const still = await post(`${url}/pay/8`, {}, { 'idempotency-key': 'rot-3' })
      expect(still.status, still.text).toBe(201)
      expect(up.seen.at(-1)).toMatchObject({ url: '/pay/8', clientSerial: renewed.serial })
    } finally {
      await gw.stop()
    }
  })
})

test('with --workers, the primary\'s gauge shows the client certificate each route presents', async () => {
  const up = await startHttpsUpstream({ cert: server, clientCa: pki.ca.certPem })
  const dir = tempDir('fg-tls-up-w-')
  const port = await freePort()
  const admin = await freePort()
  const file = join(dir, 'fencegate.yaml')
  writeFileSync(file, gatewayConfig({
    ...spec(up.url, { ca: pki.ca.cert, cert: client.cert, key: client.key }),
    listen: `127.0.0.1:${port}`, admin: { listen: `127.0.0.1:${admin}` }, store: { kind: 'sqlite', path: join(dir, 'fg.db') },
  }))
  const gw = await spawnGateway(file, port, admin, join(dir, 'gw.log'), ['--workers', '2'])
  try {
    expect((await post(`http://127.0.0.1:${port}/pay/w`, {}, { 'idempotency-key': 'w-1' })).status).toBe(201)
    expect(up.seen.at(-1)?.clientSerial).toBe(client.serial)
    const m = await metrics(gw.adminUrl)
    expect(metric(m, 'fencegate_tls_certificate_expiry_seconds', { route: 'pay' })).toBeGreaterThan(39 * DAY)
    // one series, the primary's, not one per worker
    expect(m.split('\n').filter((l) => l.startsWith('fencegate_tls_certificate_expiry_seconds{') && l.includes('route="pay"'))).toHaveLength(1)
  } finally {
    await gw.stop()
    await up.close()
  }
})
