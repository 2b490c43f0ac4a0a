// Contract §5b's keys: the schema (cert and key together, upstream.tls only on https://,
// store.tls only on redis rediss:// and postgres, no key turning verification off) and every
// TLS file read and parsed when the config is checked, each problem naming its YAML path —
// through parseConfig (what start-up and a reload call) and through `fencegate check-config`.
import { copyFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { beforeAll, describe, expect, test } from 'vitest'
import { ConfigError, parseConfig } from '../src/config/load.js'
import { makePki, type Pki, type Pem } from './helpers/certs.js'
import { freePort, spawnGateway, tempDir } from './helpers/gateway.js'
import { runCli } from './helpers/run.js'

let pki: Pki
let server: Pem
let other: Pem
let expired: Pem
let empty: string

beforeAll(() => {
  pki = makePki()
  server = pki.issue('server')
  other = pki.issue('other')
  expired = pki.issue('expired', { days: -1 })
  empty = join(pki.dir, 'empty.pem')
  writeFileSync(empty, 'not a certificate\n')
})

const route = (upstream: string) => `routes:
  - name: pay
    match: { path: /pay/* }
    upstream:
${upstream}`

const yaml = (top: string, upstream = '      url: http://127.0.0.1:9090\n') => `${top}\n${route(upstream)}`

/** The problems of a config as `path: message` lines; [] when it validates. */
function problems(text: string, file = join(pki.dir, 'fencegate.yaml')): string[] {
  try {
    parseConfig(text, file, {})
    return []
  } catch (e) {
    if (!(e instanceof ConfigError)) throw e
    return e.problems.map((p) => `${p.path}: ${p.message}`)
  }
}

describe('the schema', () => {
  test('a listener, an upstream and a store with TLS validate, relative paths taken from the config file\'s folder', () => {
    const dir = tempDir('fg-tls-rel-')
    for (const f of ['server.pem', 'server-key.pem', 'ca.pem']) copyFileSync(join(pki.dir, f), join(dir, f))
    const c = parseConfig(yaml(`tls: { cert: server.pem, key: server-key.pem, clientCa: ca.pem }
admin:
  tls: { cert: ${server.cert}, key: ${server.key} }
store: { kind: postgres, url: "postgres://db.internal/x?sslmode=verify-full", tls: { ca: ${pki.ca.cert}, cert: ${server.cert}, key: ${server.key} } }`,
    `      url: https://127.0.0.1:9443\n      tls: { ca: ${pki.ca.cert}, cert: ${server.cert}, key: ${server.key}, servername: payments.internal }\n`), join(dir, 'fencegate.yaml'), {})
    expect(c.tls).toEqual({ cert: join(dir, 'server.pem'), key: join(dir, 'server-key.pem'), clientCa: join(dir, 'ca.pem') })
    expect(c.admin.tls).toEqual({ cert: server.cert, key: server.key })
    expect(c.routes[0].upstream.tls).toEqual({ ca: pki.ca.cert, cert: server.cert, key: server.key, servername: 'payments.internal' })
    expect(c.store.tls).toEqual({ ca: pki.ca.cert, cert: server.cert, key: server.key })
  })

  test('tls needs cert and key; a client certificate needs its key', () => {
    expect(problems(yaml(`tls: { cert: ${server.cert} }`))).toEqual(['tls.key: is required'])
    expect(problems(yaml('', `      url: https://127.0.0.1:9443\n      tls: { cert: ${server.cert} }\n`))).toEqual(['routes[0].upstream.tls.key: cert needs its key: give cert and key together, or neither'])
    expect(problems(yaml(`store: { kind: redis, url: "rediss://r:6380", tls: { key: ${server.key} } }`))).toEqual(['store.tls.cert: key needs its certificate: give cert and key together, or neither'])
  })

  test('upstream.tls on an http:// upstream is a config error naming the path', () => {
    expect(problems(yaml('', `      url: http://127.0.0.1:9090\n      tls: { ca: ${pki.ca.cert} }\n`))).toEqual([
      'routes[0].upstream.tls: only with an https:// upstream: http://127.0.0.1:9090 is cleartext, so there is no TLS to configure (write https://, or remove upstream.tls)',
    ])
  })

  test('no key turns peer verification off: unknown keys are refused', () => {
    expect(problems(yaml(`tls: { cert: ${server.cert}, key: ${server.key}, rejectUnauthorized: false }`))).toEqual(['tls.rejectUnauthorized: unknown key'])
    expect(problems(yaml('', `      url: https://127.0.0.1:9443\n      tls: { insecure: true }\n`))).toEqual(['routes[0].upstream.tls.insecure: unknown key'])
    expect(problems(yaml(`store: { kind: redis, url: "rediss://r:6380", tls: { verify: false } }`))).toEqual(['store.tls.verify: unknown key'])
  })

  test('store.tls: only redis with rediss:// and postgres without a weaker sslmode', () => {
    expect(problems(yaml(`store: { kind: sqlite, tls: { ca: ${pki.ca.cert} } }`))).toEqual(['store.tls: only with store.kind redis or postgres, not sqlite'])
    expect(problems(yaml(`store: { kind: redis, url: "redis://r:6379", tls: { ca: ${pki.ca.cert} } }`))).toEqual(['store.url: store.tls needs rediss:// URLs, not redis://… : redis:// is the cleartext scheme'])
    expect(problems(yaml(`store: { kind: redis, url: "rediss://r:6380", tls: { ca: ${pki.ca.cert} } }`))).toEqual([])
    expect(problems(yaml(`store: { kind: postgres, url: "postgres://db/x?sslmode=require", tls: { ca: ${pki.ca.cert} } }`))).toEqual([
      'store.url: sslmode=require contradicts store.tls, which verifies the server\'s certificate and name (verify-full): remove sslmode from the URL, or write sslmode=verify-full',
    ])
  })
})

describe('the files, read and parsed with the config', () => {
  test('a file that cannot be read names its path and why', () => {
    expect(problems(yaml(`tls: { cert: /nonexistent/x.pem, key: ${server.key} }`))).toEqual(['tls.cert: cannot read /nonexistent/x.pem: no such file'])
    expect(problems(yaml(`admin: { tls: { cert: ${server.cert}, key: ${pki.dir} } }`))).toEqual([`admin.tls.key: cannot read ${pki.dir}: is a directory`])
  })

  test('a CA file that holds no certificate', () => {
    expect(problems(yaml('', `      url: https://127.0.0.1:9443\n      tls: { ca: ${empty} }\n`))).toEqual([`routes[0].upstream.tls.ca: ${empty} holds no certificate (a PEM "-----BEGIN CERTIFICATE-----" block)`])
    expect(problems(yaml(`tls: { cert: ${server.cert}, key: ${server.key}, clientCa: ${empty} }`))).toEqual([`tls.clientCa: ${empty} holds no certificate (a PEM "-----BEGIN CERTIFICATE-----" block)`])
  })

  test('a key that does not match its certificate', () => {
    expect(problems(yaml(`tls: { cert: ${server.cert}, key: ${other.key} }`))).toEqual([`tls.key: does not match tls.cert (${other.key} is not the key of the certificate in ${server.cert})`])
  })

  test('a key file holding no key, a certificate file holding a key', () => {
    expect(problems(yaml(`tls: { cert: ${server.key}, key: ${server.cert} }`))).toEqual([
      `tls.cert: ${server.key} holds no certificate (a PEM "-----BEGIN CERTIFICATE-----" block)`,
      expect.stringMatching(new RegExp(`^tls\\.key: ${server.cert} holds no private key that can be read`)),
    ])
  })

  test('a certificate already expired', () => {
    const [line] = problems(yaml(`tls: { cert: ${expired.cert}, key: ${expired.key} }`))
    expect(line).toMatch(/^tls\.cert: expired on \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/)
    const end = new Date(line.slice('tls.cert: expired on '.length)).getTime()
    expect(end).toBeLessThan(Date.now())
    expect(end).toBeGreaterThan(Date.now() - 2 * 86_400_000)
  })

  test('every problem of every block in one pass, in the file\'s order', () => {
    expect(problems(yaml(`tls: { cert: /nonexistent/a.pem, key: ${server.key} }
admin: { tls: { cert: ${server.cert}, key: ${other.key} } }
store: { kind: redis, url: "rediss://r:6380", tls: { ca: /nonexistent/c.pem } }`, `      url: https://127.0.0.1:9443\n      tls: { ca: ${empty} }\n`))).toEqual([
      'tls.cert: cannot read /nonexistent/a.pem: no such file',
      `admin.tls.key: does not match admin.tls.cert (${other.key} is not the key of the certificate in ${server.cert})`,
      'store.tls.ca: cannot read /nonexistent/c.pem: no such file',
      `routes[0].upstream.tls.ca: ${empty} holds no certificate (a PEM "-----BEGIN CERTIFICATE-----" block)`,
    ])
  })
})

describe('fencegate check-config', () => {
  const cli = async (text: string) => {
    const file = join(tempDir('fg-tls-cc-'), 'fencegate.yaml')
    writeFileSync(file, text)
    const r = await runCli(['check-config', '--config', file], { timeout: 15_000 })
    return { code: r.status, out: r.stdout, err: r.stderr, file }
  }

  test('a config whose TLS files are good is ok', async () => {
    const r = await cli(yaml(`tls: { cert: ${server.cert}, key: ${server.key}, clientCa: ${pki.ca.cert} }`))
    expect(r.err).toBe('')
    expect(r.code).toBe(0)
    expect(r.out).toBe(`${r.file}: ok (1 route)\n`)
  })

  test('exits 2 with one line per TLS problem, each with its file, line and YAML path', async () => {
    const r = await cli(yaml(`tls: { cert: /nonexistent/x.pem, key: ${server.key} }\nadmin:\n  tls: { cert: ${expired.cert}, key: ${expired.key} }`,
      `      url: http://127.0.0.1:9090\n      tls: { ca: ${pki.ca.cert} }\n`))
    expect(r.code).toBe(2)
    const lines = r.err.trim().split('\n')
    expect(lines).toContain(`${r.file}:1: tls.cert: cannot read /nonexistent/x.pem: no such file`)
    expect(lines.some((l) => new RegExp(`^${r.file}:3: admin\\.tls\\.cert: expired on \\d{4}-`).test(l))).toBe(true)
    expect(lines).toContain(`${r.file}:9: routes[0].upstream.tls: only with an https:// upstream: http://127.0.0.1:9090 is cleartext, so there is no TLS to configure (write https://, or remove upstream.tls)`)
  })
})
