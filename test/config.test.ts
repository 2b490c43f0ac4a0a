// Bad config: every kind of mistake exits 2 with one line per problem naming its YAML path
// (contract §2), through the real CLI.
import { describe, expect, test } from 'vitest'
import { spawnSync } from 'node:child_process'
import { readdirSync, writeFileSync } from 'node:fs'
import { join, resolve } from 'node:path'
import { CLI, tempDir } from './helpers/gateway.js'

const GOOD = `listen: 127.0.0.1:0
admin:
  listen: 127.0.0.1:0
store:
  kind: memory
routes:
  - name: payments
    match:
      path: /accounts/:account/*
      methods: [POST]
    upstream:
      url: http://127.0.0.1:9090
      timeout: 10s
    fencing:
      resource: "account:{param.account}"
    idempotency:
      ttl: 24h
      maxResponseBytes: 1MiB
`

function cli(args: string[], yaml?: string, env: Record<string, string> = {}) {
  const dir = tempDir('fg-config-')
  const file = join(dir, 'fencegate.yaml')
  if (yaml !== undefined) writeFileSync(file, yaml)
  const r = spawnSync(process.execPath, [CLI, ...args, '--config', file], { encoding: 'utf8', timeout: 15_000, env: { ...process.env, ...env } })
  return { code: r.status, out: r.stdout, err: r.stderr, file }
}
const check = (yaml: string, env?: Record<string, string>) => cli(['check-config'], yaml, env)

describe('check-config', () => {
  test('a good config exits 0', () => {
    const r = check(GOOD)
    expect(r.err).toBe('')
    expect(r.code).toBe(0)
  })

  test('every config shipped in config/ is valid', () => {
    const dir = resolve(import.meta.dirname, '../config')
    const files = readdirSync(dir).filter((f) => f.endsWith('.yaml'))
    expect(files).toContain('fencegate.yaml')
    for (const f of files) {
      const r = spawnSync(process.execPath, [CLI, 'check-config', '--config', join(dir, f)], { encoding: 'utf8' })
      expect(r.stderr, f).toBe('')
      expect(r.status, f).toBe(0)
    }
  })

  test.each([
    ['unknown key', GOOD.replace('      timeout: 10s', '      timeout: 10s\n      retries: 3'), 'routes[0].upstream.retries: unknown key'],
    ['unknown top-level key', `${GOOD}logging: debug\n`, 'logging: unknown key'],
    ['bad duration', GOOD.replace('timeout: 10s', 'timeout: 10 seconds'), 'routes[0].upstream.timeout: "10 seconds" is not a duration'],
    ['bare number as duration', GOOD.replace('ttl: 24h', 'ttl: 86400'), 'routes[0].idempotency.ttl: 86400 is not a duration (write it with its unit'],
    ['lease shorter than the upstream timeout', GOOD.replace('ttl: 24h', 'ttl: 24h\n      lease: 5s'), 'routes[0].idempotency.lease: lease (5000 ms) must be at least upstream.timeout (10000 ms)'],
    ['ttl shorter than the lease', GOOD.replace('ttl: 24h', 'ttl: 20s'), 'routes[0].idempotency.ttl: ttl (20000 ms) must be at least lease (30000 ms)'],
    ['zero duration', GOOD.replace('ttl: 24h', 'ttl: 0s'), 'routes[0].idempotency.ttl: 0s is out of range'],
    ['timeout longer than a timer can hold', GOOD.replace('timeout: 10s', 'timeout: 30d'), 'routes[0].upstream.timeout: 30d is out of range (1ms to 1h)'],
    ['bad size', GOOD.replace('maxResponseBytes: 1MiB', 'maxResponseBytes: lots'), 'routes[0].idempotency.maxResponseBytes: "lots" is not a size'],
    ['bad serialize wait', GOOD.replace('      resource: "account:{param.account}"', '      resource: "account:{param.account}"\n      serialize: true\n      serializeWait: soon'), 'routes[0].fencing.serializeWait: "soon" is not a duration'],
    ['serialize not a boolean', GOOD.replace('      resource: "account:{param.account}"', '      resource: "account:{param.account}"\n      serialize: yes please'), 'routes[0].fencing.serialize'],
    ['template naming a parameter the path lacks', GOOD.replace('{param.account}', '{param.acct}'), 'routes[0].fencing.resource: {param.acct} names no parameter'],
    ['template naming a header that cannot exist', GOOD.replace('{param.account}', '{header.X Tenant}'), 'routes[0].fencing.resource: {header.X Tenant} cannot exist'],
    ['template naming a hop-by-hop header', GOOD.replace('{param.account}', '{header.Connection}'), 'routes[0].fencing.resource: {header.Connection} names a hop-by-hop header'],
    ['template with an unknown source', GOOD.replace('{param.account}', '{cookie.sid}'), 'routes[0].fencing.resource: placeholder {cookie.sid}'],
    ['two routes with one name', GOOD + GOOD.slice(GOOD.indexOf('  - name')), 'routes[1].name: route name "payments" is already used by routes[0]'],
    ['route name that is not a bounded label', GOOD.replace('name: payments', 'name: Payments API'), 'routes[0].name: must match [a-z0-9_-]+'],
    ['bad method', GOOD.replace('methods: [POST]', 'methods: [FETCH]'), 'routes[0].match.methods[0]'],
    ['bad upstream url', GOOD.replace('url: http://127.0.0.1:9090', 'url: ftp://x'), 'routes[0].upstream.url'],
    ['bad store kind', GOOD.replace('kind: memory', 'kind: mongo'), 'store.kind'],
    ['redis without url', GOOD.replace('kind: memory', 'kind: redis'), 'store.url: store.kind redis needs store.url'],
    ['redis with a postgres url', GOOD.replace('kind: memory', 'kind: redis\n  url: postgres://x/db'), 'store.url: store.kind redis needs a redis:// or rediss:// URL'],
    ['postgres with a redis url', GOOD.replace('kind: memory', 'kind: postgres\n  url: redis://x'), 'store.url: store.kind postgres needs a postgres:// or postgresql:// URL'],
    ['postgres schema that is not an identifier', GOOD.replace('kind: memory', 'kind: postgres\n  url: postgres://x/db\n  schema: Fence-Gate'), 'store.schema: must be a lower-case SQL identifier'],
    ['redis key prefix with braces', GOOD.replace('kind: memory', 'kind: redis\n  url: redis://x\n  keyPrefix: "{a}"'), 'store.keyPrefix: must be 1-64 of'],
    ['bad statement timeout', GOOD.replace('kind: memory', 'kind: postgres\n  url: postgres://x/db\n  statementTimeout: 5s5'), 'store.statementTimeout: "5s5" is not a duration'],
    ['bad listen', GOOD.replace('listen: 127.0.0.1:0\nadmin', 'listen: 8080\nadmin'), 'listen: must be HOST:PORT'],
    ['no routes', GOOD.slice(0, GOOD.indexOf('routes:')) + 'routes: []\n', 'routes: needs at least one route'],
    ['unset environment variable', GOOD.replace('http://127.0.0.1:9090', '${FG_TEST_UPSTREAM_UNSET}'), 'routes[0].upstream.url: environment variable FG_TEST_UPSTREAM_UNSET is not set'],
    ['not YAML', 'routes: [\n', 'not valid YAML'],
  ])('%s: exit 2 naming the YAML path', (_what, yaml, expected) => {
    const r = check(yaml)
    expect(r.code).toBe(2)
    expect(r.err).toContain(expected)
    expect(r.err).not.toMatch(/\n\s+at /) // never a stack trace
  })

  test('the message gives the file and line of the mistake', () => {
    const r = check(GOOD.replace('timeout: 10s', 'timeout: soon'))
    expect(r.err).toMatch(/fencegate\.yaml:13: routes\[0\]\.upstream\.timeout/)
  })

  test('several mistakes: one line each', () => {
    const r = check(GOOD.replace('timeout: 10s', 'timeout: soon').replace('ttl: 24h', 'ttl: never'))
    expect(r.code).toBe(2)
    expect(r.err.trim().split('\n')).toHaveLength(2)
  })

  test('${ENV} and ${ENV:-default} are interpolated', () => {
    const yaml = GOOD.replace('http://127.0.0.1:9090', '${FG_TEST_UP}').replace('timeout: 10s', 'timeout: ${FG_TEST_TIMEOUT:-5s}')
    expect(check(yaml, { FG_TEST_UP: 'http://127.0.0.1:1' }).code).toBe(0)
    expect(check(yaml, { FG_TEST_UP: 'http://127.0.0.1:1', FG_TEST_TIMEOUT: 'later' }).err).toContain('"later" is not a duration')
  })

  test('a missing file exits 2 and says so', () => {
    const r = spawnSync(process.execPath, [CLI, 'check-config', '--config', '/nonexistent/fencegate.yaml'], { encoding: 'utf8' })
    expect(r.status).toBe(2)
    expect(r.stderr).toContain('cannot read the file: ENOENT')
  })
})

describe('start-up', () => {
  test('a bad config stops start-up with exit 2', () => {
    const r = cli([], GOOD.replace('kind: memory', 'kind: memory\n  colour: blue'))
    expect(r.code).toBe(2)
    expect(r.err).toContain('store.colour: unknown key')
  })

  test('a store that cannot be opened stops start-up with exit 2 naming store', () => {
    const r = cli([], GOOD.replace('kind: memory', 'kind: sqlite\n  path: /dev/null/fencegate.db'))
    expect(r.code).toBe(2)
    expect(r.err).toMatch(/: store: store unreachable at start-up/)
  })

  test('a taken port stops start-up with exit 2', async () => {
    const net = await import('node:net')
    const s = net.createServer()
    await new Promise<void>((r) => s.listen(0, '127.0.0.1', r))
    const port = (s.address() as { port: number }).port
    try {
      const r = cli([], GOOD.replace('listen: 127.0.0.1:0\nadmin', `listen: 127.0.0.1:${port}\nadmin`))
      expect(r.code).toBe(2)
      expect(r.err).toContain('EADDRINUSE')
    } finally {
      s.close()
    }
  })
})
