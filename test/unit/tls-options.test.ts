// The options phase 2 wires into the upstream pools and the store clients (src/tls/upstream.ts,
// src/tls/store.ts), and the TLS reasons a 502's detail names (src/tls/reasons.ts), against real
// TLS servers with openssl-made certificates: what undici does with the options is what counts.
import https from 'node:https'
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import type { TLSSocket } from 'node:tls'
import { Pool } from 'undici'
import { afterAll, beforeAll, describe, expect, test } from 'vitest'
import { parseConfig } from '../../src/config/load.js'
import { upstreamTls } from '../../src/tls/upstream.js'
import { pgTlsOptions, redisTlsOptions, storeTlsMaterial } from '../../src/tls/store.js'
import { tlsReason } from '../../src/tls/reasons.js'
import { makePki, type Pki, type Pem } from '../helpers/certs.js'

let pki: Pki
let server: Pem
let client: Pem
const servers: { close(cb: () => void): void }[] = []

beforeAll(() => {
  pki = makePki()
  server = pki.issue('upstream')
  client = pki.issue('gateway-client', { client: true })
})
afterAll(async () => { await Promise.all(servers.map((s) => new Promise<void>((r) => s.close(() => r())))) })

/** An HTTPS upstream answering with the CN of the client certificate it was shown ("" for none). */
async function upstream(pem: Pem, requireClient: boolean): Promise<string> {
  const s = https.createServer({ cert: pem.certPem, key: pem.keyPem, ...(requireClient ? { ca: pki.ca.certPem } : {}), requestCert: requireClient, rejectUnauthorized: requireClient }, (req, res) => {
    const peer = (req.socket as TLSSocket).getPeerCertificate()
    res.end(String(peer?.subject?.CN ?? ''))
  })
  servers.push(s)
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r))
  return `https://localhost:${(s.address() as AddressInfo).port}`
}

/** routes[0] of a config with this upstream block. */
function route(url: string, tls?: Record<string, string>) {
  const block = tls ? `\n      tls: { ${Object.entries(tls).map(([k, v]) => `${k}: ${v}`).join(', ')} }` : ''
  return parseConfig(`routes:\n  - name: pay\n    match: { path: /pay/* }\n    upstream:\n      url: ${url}${block}\n`, '/tmp/fencegate.yaml', {}).routes[0]
}

/** One GET through a Pool made as phase 2 will make it; the body, or the error's TLS reason. */
async function get(url: string, connect: object | undefined): Promise<{ body?: string; reason?: string; error?: unknown }> {
  const pool = new Pool(new URL(url).origin, { connect: { timeout: 2000, ...connect } })
  try {
    const r = await pool.request({ path: '/', method: 'GET' })
    return { body: await r.body.text() }
  } catch (e) {
    return { reason: tlsReason(e), error: e }
  } finally {
    await pool.destroy()
  }
}

describe('upstreamTls: undici connect options', () => {
  test('the private CA trusted and the client certificate presented (mutual TLS)', async () => {
    const url = await upstream(server, true)
    const tls = upstreamTls(route(url, { ca: pki.ca.cert, cert: client.cert, key: client.key }), 0)!
    expect(tls.connect).toMatchObject({ rejectUnauthorized: true, servername: 'localhost' })
    expect((await get(url, tls.connect)).body).toBe('gateway-client')
  })

  test('none for an https:// upstream without upstream.tls (the system\'s CAs) or an http:// one', () => {
    expect(upstreamTls(route('https://localhost:1'), 0)).toBeUndefined()
    expect(upstreamTls(route('http://localhost:1'), 0)).toBeUndefined()
  })

  test('the fingerprint changes with the files\' contents and the servername only', () => {
    const a = upstreamTls(route('https://localhost:1', { ca: pki.ca.cert }), 0)!
    const b = upstreamTls(route('https://localhost:2', { ca: pki.ca.cert }), 0)!
    const c = upstreamTls(route('https://localhost:1', { ca: pki.ca.cert, servername: 'payments.internal' }), 0)!
    expect(a.fingerprint).toBe(b.fingerprint)
    expect(c.fingerprint).not.toBe(a.fingerprint)
    expect(c.connect.servername).toBe('payments.internal')
  })
})

describe('tlsReason: what the 502 detail names', () => {
  test('a certificate signed by a CA not trusted: unable to verify the first certificate', async () => {
    const url = await upstream(server, false)
    expect((await get(url, undefined)).reason).toBe('unable to verify the first certificate')
  })

  test('a self-signed certificate', async () => {
    const url = await upstream(pki.selfSigned('self'), false)
    expect((await get(url, upstreamTls(route(url, { ca: pki.ca.cert }), 0)!.connect)).reason).toBe('self-signed certificate')
  })

  test('a name the certificate does not hold: Hostname/IP does not match', async () => {
    const url = await upstream(server, false)
    const r = await get(url, upstreamTls(route(url, { ca: pki.ca.cert, servername: 'payments.internal' }), 0)!.connect)
    expect(r.reason).toMatch(/^Hostname\/IP does not match certificate's altnames: Host: payments\.internal\. is not in the cert's altnames: DNS:localhost/)
  })

  test('an expired certificate', async () => {
    const url = await upstream(pki.issue('old-upstream', { days: -1 }), false)
    expect((await get(url, upstreamTls(route(url, { ca: pki.ca.cert }), 0)!.connect)).reason).toBe('certificate has expired')
  })

  test('an upstream that wants a client certificate, presented none', async () => {
    const url = await upstream(server, true)
    const r = await get(url, upstreamTls(route(url, { ca: pki.ca.cert }), 0)!.connect)
    // TLS 1.3: the alert comes after the handshake, on the first read; some builds reset instead
    if (r.reason === undefined) expect((r.error as { code?: string }).code).toMatch(/ECONNRESET|UND_ERR_SOCKET/)
    else expect(r.reason).toMatch(/^the upstream requires a client certificate/)
  })

  test('a cleartext server on an https:// URL: it does not speak TLS', async () => {
    const s = http.createServer((_, res) => res.end('plain'))
    servers.push(s)
    await new Promise<void>((r) => s.listen(0, '127.0.0.1', r))
    const url = `https://localhost:${(s.address() as AddressInfo).port}`
    expect((await get(url, upstreamTls(route(url, { ca: pki.ca.cert }), 0)!.connect)).reason).toMatch(/^the upstream does not speak TLS on this port/)
  })

  test('not a TLS error: undefined', async () => {
    expect(tlsReason(Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' }))).toBeUndefined()
    expect(tlsReason(undefined)).toBeUndefined()
  })
})

describe('store TLS options', () => {
  const store = (kind: string, url: string) => parseConfig(`store: { kind: ${kind}, url: "${url}", tls: { ca: ${pki.ca.cert}, cert: ${client.cert}, key: ${client.key} } }\nroutes:\n  - name: pay\n    match: { path: /pay/* }\n    upstream: { url: "http://127.0.0.1:1" }\n`, '/tmp/fencegate.yaml', {}).store

  test('redis: tls for one server or a cluster; with Sentinels the Sentinels\' links and the primary\'s too', () => {
    const m = storeTlsMaterial(store('redis', 'rediss://r:6380'))
    expect(m?.leaf?.serialNumber).toBe(client.serial)
    expect(redisTlsOptions(m, { sentinels: false })).toEqual({ tls: { ca: pki.ca.certPem, cert: client.certPem, key: client.keyPem, rejectUnauthorized: true } })
    const s = redisTlsOptions(m, { sentinels: true })
    expect(s.enableTLSForSentinelMode).toBe(true)
    expect(s.sentinelTLS).toEqual(s.tls)
    expect(redisTlsOptions(undefined, { sentinels: true })).toEqual({})
  })

  test('postgres: sslmode taken off the URL (pg would let it replace ssl), the name checked', () => {
    const m = storeTlsMaterial(store('postgres', 'postgres://u@db.internal:5432/x?sslmode=verify-full&application_name=fg'))
    const o = pgTlsOptions('postgres://u@db.internal:5432/x?sslmode=verify-full&application_name=fg', m)
    expect(o.connectionString).toBe('postgres://u@db.internal:5432/x?application_name=fg')
    expect(o.ssl).toMatchObject({ rejectUnauthorized: true, servername: 'db.internal', ca: pki.ca.certPem })
    expect(pgTlsOptions('postgres://127.0.0.1/x', m).ssl?.servername).toBeUndefined()
    expect(pgTlsOptions('postgres://db/x', undefined)).toEqual({ connectionString: 'postgres://db/x' })
  })
})
