// Bad config: every kind of mistake exits 2 with one line per problem naming its YAML path
// (contract §2), through the real CLI.
import { describe, expect, test } from 'vitest'
import { readdirSync, writeFileSync } from 'node:fs'
import { join, resolve } from 'node:path'
import { tempDir } from './helpers/gateway.js'
import { runCli } from './helpers/run.js'

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

async function cli(args: string[], yaml?: string, env: Record<string, string> = {}) {
  const dir = tempDir('fg-config-')
  const file = join(dir, 'fencegate.yaml')
  if (yaml !== undefined) writeFileSync(file, yaml)
  const r = await runCli([...args, '--config', file], { timeout: 15_000, env: { ...process.env, ...env } })
  return { code: r.status, out: r.stdout, err: r.stderr, file }
}
const check = (yaml: string, env?: Record<string, string>) => cli(['check-config'], yaml, env)

describe('check-config', () => {
  test('a good config exits 0', async () => {
    const r = await check(GOOD)
    expect(r.err).toBe('')
    expect(r.code).toBe(0)
  })

  test('every config shipped in config/ is valid', async () => {
    const dir = resolve(import.meta.dirname, '../config')
    const files = readdirSync(dir).filter((f) => f.endsWith('.yaml'))
    expect(files).toContain('fencegate.yaml')
    for (const f of files) {
      const r = await runCli(['check-config', '--config', join(dir, f)])
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
    ['serialize neither a boolean nor store', GOOD.replace('      resource: "account:{param.account}"', '      resource: "account:{param.account}"\n      serialize: sotre'), 'routes[0].fencing.serialize: must be false, true or store'],
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
    // contract §3a
    ['leases without resources', GOOD + 'leases:\n  maxTtl: 5m\n', 'leases.resources: is required'],
    ['leases with no resource pattern', GOOD + 'leases:\n  resources: []\n', 'leases.resources: must list at least one resource pattern'],
    ['a lease pattern with a * inside', GOOD + 'leases:\n  resources: ["a*b"]\n', 'leases.resources[0]: may hold one *, at the end only'],
    ['a defaultTtl neither a duration nor advice', GOOD + 'leases:\n  resources: ["account:*"]\n  defaultTtl: adivce\n', 'leases.defaultTtl: "adivce" is neither a duration'],
    ['a defaultTtl above maxTtl', GOOD + 'leases:\n  resources: ["account:*"]\n  defaultTtl: 10m\n  maxTtl: 5m\n', 'leases.defaultTtl: must be between 1s and maxTtl'],
    ['a maxTtl below 1 s', GOOD + 'leases:\n  resources: ["account:*"]\n  maxTtl: 500ms\n', 'leases.maxTtl: must be at least 1s'],
    ['a maxTtl that is no duration', GOOD + 'leases:\n  resources: ["account:*"]\n  maxTtl: 300\n', 'leases.maxTtl: 300 is not a duration'],
    ['a lease path ending in /', GOOD + 'leases:\n  resources: ["account:*"]\n  path: /leases/\n', 'leases.path: must be a path'],
    ['a route under the lease path', GOOD + 'leases:\n  resources: ["account:*"]\n  path: /accounts\n', 'routes[0].match.path: route payments never matches: every request to /accounts/:account/* is a call of the lease service'],
    // issue 15 §4: in the config's own terms, with "did you mean"
    ['a misspelt top-level key', GOOD.replace('store:', 'stroe:'), 'stroe: unknown key (did you mean "store"?)'],
    ['a misspelt nested key', GOOD.replace('      resource: "account:{param.account}"', '      resource: "account:{param.account}"\n      tokenHeadr: X-Token'), 'routes[0].fencing.tokenHeadr: unknown key (did you mean "tokenHeader"?)'],
    ['yes for a boolean', GOOD.replace('      resource: "account:{param.account}"', '      resource: "account:{param.account}"\n      required: yes'), 'routes[0].fencing.required: must be true or false, not "yes"'],
    ['a store kind that does not exist', GOOD.replace('kind: memory', 'kind: sqlit'), 'store.kind: must be one of memory, sqlite, redis, postgres, not "sqlit" (did you mean "sqlite"?)'],
    ['a route shadowed by an earlier one', GOOD.replace('routes:\n', 'routes:\n  - name: everything\n    match:\n      path: /*\n    upstream:\n      url: http://127.0.0.1:9090\n'),
      'routes[1].match.path: route payments never matches: routes[0] (everything: /*, every method) comes first and takes every request it would get, so its fencing and idempotency never applies'],
    ['a path in upstream.url', GOOD.replace('url: http://127.0.0.1:9090', 'url: http://127.0.0.1:9090/v1'), 'routes[0].upstream.url: has a path or query ("/v1"): fencegate forwards each request\'s own path and query to the upstream\'s origin unchanged'],
    ['listen equal to admin.listen', GOOD.replace('listen: 127.0.0.1:0\nadmin:\n  listen: 127.0.0.1:0', 'listen: 127.0.0.1:8080\nadmin:\n  listen: 127.0.0.1:8080'), 'admin.listen: 127.0.0.1:8080 is taken by listen (127.0.0.1:8080)'],
    ['idempotency methods the route never admits', GOOD.replace('ttl: 24h', 'ttl: 24h\n      methods: [PUT]'), 'routes[0].idempotency.methods: none of PUT is in match.methods (POST), so this route never uses an idempotency key'],
    ['a 2xx in releaseStatuses', GOOD.replace('ttl: 24h', 'ttl: 24h\n      releaseStatuses: [201]'), 'routes[0].idempotency.releaseStatuses[0]: must be a 4xx or 5xx status'],
    ['sqlite synchronous normal without accepting its risk', GOOD.replace('kind: memory', 'kind: sqlite\n  synchronous: normal'), 'store.synchronous: normal can lose the last commits on a power loss or kernel crash'],
    ['synchronous accepted on a store that is not sqlite', GOOD.replace('kind: memory', 'kind: memory\n  acceptRisks: [synchronous]'), 'store.acceptRisks[0]: synchronous is a SQLite setting: only with store.kind sqlite, not memory'],
    ['a tab in the indentation', GOOD.replace('    fencing:', '\tfencing:'), 'not valid YAML: Tabs are not allowed as indentation (indent with spaces)'],
  ])('%s: exit 2 naming the YAML path', async (_what, yaml, expected) => {
    const r = await check(yaml)
    expect(r.code).toBe(2)
    expect(r.err).toContain(expected)
    expect(r.err).not.toMatch(/\n\s+at /) // never a stack trace
  })

  test('a tab in the indentation: its line and column', async () => {
    expect((await check(GOOD.replace('    fencing:', '\tfencing:'))).err).toMatch(/fencegate\.yaml:14:1: routes\[0\][.\w]*: not valid YAML: Tabs are not allowed/)
  })

  test('the message gives the file and line of the mistake', async () => {
    const r = await check(GOOD.replace('timeout: 10s', 'timeout: soon'))
    expect(r.err).toMatch(/fencegate\.yaml:13: routes\[0\]\.upstream\.timeout/)
  })

  test('every problem in one pass: unset variable, misspelt key, bad value, shadowed route, listeners', async () => {
    const yaml = `listen: 127.0.0.1:7000
admin:
  listen: 127.0.0.1:7000
stroe:
  kind: memory
routes:
  - name: all
    match:
      path: /*
    upstream:
      url: \${FG_TEST_UNSET_UPSTREAM}
  - name: pay
    match:
      path: /accounts/:a/*
    upstream:
      url: http://127.0.0.1:9090
      timeout: 10 s
    fencing:
      resource: "{param.a}"
  - name: pay2
    match:
      path: /accounts/:a/charges
      methods: [POST]
    upstream:
      url: http://127.0.0.1:9090/v1
    fencing:
      resource: "{param.a}"
      required: no
`
    const r = await check(yaml)
    expect(r.code).toBe(2)
    const lines = r.err.trim().split('\n')
    expect(lines).toEqual([
      expect.stringMatching(/:3: admin\.listen: 127\.0\.0\.1:7000 is taken by listen/),
      expect.stringMatching(/:4: stroe: unknown key \(did you mean "store"\?\)$/),
      expect.stringMatching(/:11: routes\[0\]\.upstream\.url: environment variable FG_TEST_UNSET_UPSTREAM is not set/),
      // routes[0] and routes[1] have a value wrong, and the shadowing of their paths is still seen
      expect.stringMatching(/:14: routes\[1\]\.match\.path: route pay never matches: routes\[0\] \(all: \/\*, every method\)/),
      expect.stringMatching(/:17: routes\[1\]\.upstream\.timeout: "10 s" is not a duration/),
      expect.stringMatching(/:22: routes\[2\]\.match\.path: route pay2 never matches: routes\[0\] \(all: \/\*, every method\)/),
      expect.stringMatching(/:25: routes\[2\]\.upstream\.url: has a path or query \("\/v1"\)/),
      expect.stringMatching(/:28: routes\[2\]\.fencing\.required: must be true or false, not "no" \(YAML 1\.2 reads it as text\)$/),
    ])
  })

  // Two unrelated mistakes, one a value of the wrong kind and one only seen across fields: the
  // first must not hide the second (a route whose timeout is wrong still has a name and a path).
  const TWO = GOOD + `  - name: other
    match:
      path: /other/*
      methods: [POST]
    upstream:
      url: http://127.0.0.1:9091
`
  test.each([
    ['a bad duration and a repeated route name', TWO.replace('timeout: 10s', 'timeout: 10 s').replace('name: other', 'name: payments'),
      [/:13: routes\[0\]\.upstream\.timeout: "10 s" is not a duration/, /:19: routes\[1\]\.name: route name "payments" is already used by routes\[0\]$/]],
    ['an admin token of the wrong kind and the listeners on one port', GOOD.replace('listen: 127.0.0.1:0\nadmin:\n  listen: 127.0.0.1:0', 'listen: 127.0.0.1:8080\nadmin:\n  listen: 127.0.0.1:8080\n  token: 5'),
      [/:3: admin\.listen: 127\.0\.0\.1:8080 is taken by listen \(127\.0\.0\.1:8080\)/, /:4: admin\.token: must be text, not 5$/]],
    ['a bad size in a route and that route shadowed by an earlier one', TWO.replace('path: /other/*', 'path: /accounts/:account/charges').replace('      url: http://127.0.0.1:9091', '      url: http://127.0.0.1:9091\n    maxRequestBytes: lots'),
      [/:21: routes\[1\]\.match\.path: route other never matches: routes\[0\] \(payments: \/accounts\/:account\/\*, POST\) comes first/, /:25: routes\[1\]\.maxRequestBytes: "lots" is not a size/]],
    ['a misspelt key in a route and that route listing HEAD alone', TWO.replace('      methods: [POST]\n    upstream:\n      url: http://127.0.0.1:9091', '      methods: [HEAD]\n    upstream:\n      url: http://127.0.0.1:9091\n      timout: 5s'),
      [/:22: routes\[1\]\.match\.methods: HEAD alone never matches/, /:25: routes\[1\]\.upstream\.timout: unknown key \(did you mean "timeout"\?\)$/]],
    ['a bad fencing value and idempotency methods the route never admits', GOOD.replace('      resource: "account:{param.account}"', '      resource: "account:{param.account}"\n      required: yes').replace('ttl: 24h', 'ttl: 24h\n      methods: [PUT]'),
      [/:16: routes\[0\]\.fencing\.required: must be true or false, not "yes"/, /:19: routes\[0\]\.idempotency\.methods: none of PUT is in match\.methods \(POST\)/]],
    ['a connection count out of range and, in the same route, a lease shorter than the upstream timeout', GOOD.replace('      timeout: 10s', '      timeout: 10s\n      connections: 0').replace('ttl: 24h', 'ttl: 24h\n      lease: 5s'),
      [/:14: routes\[0\]\.upstream\.connections: must be at least 1, not 0$/, /:19: routes\[0\]\.idempotency\.lease: lease \(5000 ms\) must be at least upstream\.timeout \(10000 ms\)/]],
  ])('%s: two lines, each naming its YAML path', async (_what, yaml, expected) => {
    const r = await check(yaml)
    expect(r.code).toBe(2)
    expect(r.err.trim().split('\n')).toEqual(expected.map((re) => expect.stringMatching(re)))
  })

  test('a YAML syntax error: one line, with line and column', async () => {
    const r = await check(GOOD.replace('      methods: [POST]', '      methods: [POST'))
    expect(r.code).toBe(2)
    const lines = r.err.trim().split('\n')
    expect(lines).toHaveLength(1)
    // the line and column where the parser noticed, and the key it was under
    expect(lines[0]).toMatch(/fencegate\.yaml:\d+:\d+: routes\[0\][.\w[\]]*: not valid YAML: /)
  })

  test('several mistakes: one line each', async () => {
    const r = await check(GOOD.replace('timeout: 10s', 'timeout: soon').replace('ttl: 24h', 'ttl: never'))
    expect(r.code).toBe(2)
    expect(r.err.trim().split('\n')).toHaveLength(2)
  })

  test('${ENV} and ${ENV:-default} are interpolated', async () => {
    const yaml = GOOD.replace('http://127.0.0.1:9090', '${FG_TEST_UP}').replace('timeout: 10s', 'timeout: ${FG_TEST_TIMEOUT:-5s}')
    expect((await check(yaml, { FG_TEST_UP: 'http://127.0.0.1:1' })).code).toBe(0)
    expect((await check(yaml, { FG_TEST_UP: 'http://127.0.0.1:1', FG_TEST_TIMEOUT: 'later' })).err).toContain('"later" is not a duration')
  })

  test('a missing file exits 2 and says so', async () => {
    const r = await runCli(['check-config', '--config', '/nonexistent/fencegate.yaml'])
    expect(r.status).toBe(2)
    expect(r.stderr).toContain('cannot read the file: ENOENT')
  })
})

describe('start-up', () => {
  test('a bad config stops start-up with exit 2', async () => {
    const r = await cli([], GOOD.replace('kind: memory', 'kind: memory\n  colour: blue'))
    expect(r.code).toBe(2)
    expect(r.err).toContain('store.colour: unknown key')
  })

  test('a SQLite path that cannot be opened stops start-up with exit 2 naming store.path', async () => {
    const r = await cli([], GOOD.replace('kind: memory', 'kind: sqlite\n  path: /dev/null/fencegate.db'))
    expect(r.code).toBe(2)
    expect(r.err).toMatch(/: store\.path: the sqlite store cannot be opened/)
  })

  test('a taken port stops start-up with exit 2', async () => {
    const net = await import('node:net')
    const s = net.createServer()
    await new Promise<void>((r) => s.listen(0, '127.0.0.1', r))
    const port = (s.address() as { port: number }).port
    try {
      const r = await cli([], GOOD.replace('listen: 127.0.0.1:0\nadmin', `listen: 127.0.0.1:${port}\nadmin`))
      expect(r.code).toBe(2)
      expect(r.err).toContain('EADDRINUSE')
    } finally {
      s.close()
    }
  })
})

// issue 15 §3, §5: check-config --connect, and the conventions every command keeps
describe('check-config --connect', () => {
  test('a store that answers: exit 0 saying so; one that does not: exit 1 (not a config mistake)', async () => {
    const ok = await cli(['check-config', '--connect'], GOOD)
    expect(ok.err).toBe('')
    expect(ok.code).toBe(0)
    expect(ok.out).toContain('the memory store answers')
    const { freePort } = await import('./helpers/gateway.js')
    const port = await freePort()
    const down = await cli(['check-config', '--connect'], GOOD.replace('kind: memory', `kind: redis\n  url: redis://127.0.0.1:${port}\n  timeout: 200ms`))
    expect(down.code).toBe(1)
    expect(down.err).toMatch(/^store: the redis store cannot be opened/)
    // without --connect the same config is fine: the store is not checked
    expect((await cli(['check-config'], GOOD.replace('kind: memory', `kind: redis\n  url: redis://127.0.0.1:${port}`))).code).toBe(0)
  })
})

describe('CLI conventions', () => {
  const run = async (...args: string[]) => {
    const r = await runCli(args, { timeout: 15_000 })
    return { code: r.status, out: r.stdout, err: r.stderr }
  }

  test('help, help COMMAND and COMMAND --help print usage and exit 0; -v and --version the version', async () => {
    const all = await run('help')
    expect(all.code).toBe(0)
    for (const c of ['start', 'check-config', 'migrate', 'audit', 'resolve', 'unknown', 'store accept-loss']) expect(all.out).toContain(c)
    expect(all.out).toMatch(/exit codes: 0 ok; 1 runtime failure .*; 2 usage or config mistake/)
    const one = await run('help', 'resolve')
    expect(one.code).toBe(0)
    expect(one.out).toContain('usage: fencegate resolve')
    expect(one.out).toContain('--reason TEXT')
    expect((await run('resolve', '--help')).out).toBe(one.out)
    expect((await run('store', 'accept-loss', '--help')).out).toContain('usage: fencegate store accept-loss')
    expect((await run('help', 'store', 'accept-loss')).out).toContain('usage: fencegate store accept-loss')
    expect((await run('-v')).out).toMatch(/^fencegate \d+\.\d+\.\d+/)
    expect((await run('--version')).out).toBe((await run('-v')).out)
    expect((await run('--help')).out).toBe(all.out)
  })

  test('a misspelt command or flag: exit 2 with a suggestion', async () => {
    const cmd = await run('chek-config')
    expect(cmd.code).toBe(2)
    expect(cmd.err).toContain('unknown command "chek-config" (did you mean "check-config"?)')
    const flag = await run('check-config', '--confg', 'x.yaml')
    expect(flag.code).toBe(2)
    expect(flag.err).toContain('check-config has no flag --confg (did you mean --config?)')
    const elsewhere = await run('audit', '--reason', 'x')
    expect(elsewhere.code).toBe(2)
    expect(elsewhere.err).toContain('--reason is a flag of resolve, store accept-loss')
    const sub = await run('store', 'acept-loss')
    expect(sub.code).toBe(2)
    expect(sub.err).toContain('(did you mean "accept-loss"?)')
  })

  test('store alone lists its subcommands', async () => {
    const r = await run('store')
    expect(r.code).toBe(0)
    expect(r.out).toContain('fencegate store accept-loss')
  })

  test('--json: errors as one JSON object on stdout, with the exit code of the table', async () => {
    const usage = await run('audit', '--json', '--bogus')
    expect(usage.code).toBe(2)
    expect(JSON.parse(usage.out)).toMatchObject({ error: { type: 'usage', message: expect.stringContaining('--bogus') }, exitCode: 2 })
    const bad = await cli(['check-config', '--json'], GOOD.replace('store:', 'stroe:'))
    expect(bad.code).toBe(2)
    expect(bad.err).toBe('')
    expect(JSON.parse(bad.out)).toMatchObject({ error: { type: 'config', problems: [{ path: 'stroe', line: 4, message: 'unknown key (did you mean "store"?)' }] }, exitCode: 2 })
    const good = await cli(['check-config', '--json'], GOOD)
    expect(JSON.parse(good.out)).toMatchObject({ ok: true, routes: 1 })
  })
})
