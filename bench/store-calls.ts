/**
 * The client's CPU for a new key's store calls, with nothing else in the process: `admit` (fence
 * and claim) then `finish` with a 43-byte answer, N keys, 50 in flight at a time (the shared
 * benchmark's connections), through fencegate's store class opened from a gateway config. A
 * loop like this moves by a few percent between runs, where a proxy under wrk moves by ten or
 * more: it tells a change in the store's client path from noise.
 *
 * With `--raw` (Redis only) the same two scripts go out through ioredis alone — EVALSHA of the
 * sequenced ADMIT and FINISH with the same keys and arguments, on a client set up as the
 * store's — so the gap between the two figures is fencegate's store code and the rest is the
 * client library's.
 *
 *   node dist/bench/store-calls.js CONFIG.yaml [--raw] [--keys 60000]
 *
 * Prints µs of CPU (user + system) per new key. On Redis the keys it made are deleted at the end;
 * the other stores keep its records until their ttl (24 h) ends.
 */
import { randomUUID } from 'node:crypto'
import { Redis } from 'ioredis'
import { loadConfig } from '../src/config/load.js'
import { openStore } from '../src/store/index.js'
import { SEQUENCED } from '../src/store/redis/scripts.js'

const argv = process.argv.slice(2)
const file = argv.find((a) => !a.startsWith('--') && argv[argv.indexOf(a) - 1] !== '--keys')
if (!file) {
  process.stderr.write('usage: store-calls CONFIG.yaml [--raw] [--keys N]\n')
  process.exit(2)
}
const raw = argv.includes('--raw')
const N = argv.includes('--keys') ? Number(argv[argv.indexOf('--keys') + 1]) : 60_000, C = 50
const config = loadConfig(file)
const prefix = `fgcalls${process.pid}`
if (config.store.kind === 'redis') config.store.keyPrefix = prefix
if (raw && config.store.kind !== 'redis') throw new Error('--raw needs a redis store')

const body = Buffer.from('{"id":"ch_1","amount":100,"currency":"eur"}')
const headers: [string, string][] = [['server', 'nginx/1.22.1'], ['date', new Date().toUTCString()], ['content-type', 'application/json'], ['content-length', '43']]
const fingerprint = 'a'.repeat(64)
let op: (i: number) => Promise<unknown>
let close: () => Promise<unknown>

if (!raw) {
  const store = await openStore(config.store, config.audit)
  op = async (i) => {
    const key = { route: 'payments', scope: '', key: `${prefix}-${Date.now()}-${i}` }
    const claimId = randomUUID()
    await store.admit({ resource: `account:acct-${i % 64}`, token: 7n }, key, { fingerprint, claimId, leaseMs: 30_000, ttlMs: 86_400_000, retryUnknown: false }, Date.now())
    await store.finish(key, claimId, { kind: 'completed', response: { status: 201, headers, body } }, 86_400_000, Date.now())
  }
  close = () => store.close()
} else {
  const redis = new Redis(config.store.url!, { enableAutoPipelining: false }) // as the store's own client (one server)
  const admit = await redis.script('LOAD', SEQUENCED.fgAdmit.lua) as string
  const finish = await redis.script('LOAD', SEQUENCED.fgFinish.lua) as string
  const k = (s: string) => `{fg:${prefix}:${s}}`
  op = async (i) => {
    const record = k(`r:payments::k-${i}`), claimId = randomUUID()
    await (redis as unknown as { evalshaBuffer(...a: (string | number | Buffer)[]): Promise<unknown> }).evalshaBuffer(admit, 6, k(`f:account%3Aacct-${i % 64}`), record, `${k(`f:account%3Aacct-${i % 64}`)}s`, k('unsettled'), k('seq'), `${k('unsettled')}n`,
      '7', fingerprint, claimId, '30000', '86400000', '0', '', '')
    await redis.evalsha(finish, 4, record, k('unsettled'), k('seq'), `${k('unsettled')}n`, claimId, 'completed', '', '86400000', '201', JSON.stringify(headers), body, '', '')
  }
  close = () => redis.quit()
}

let next = 0
const run = async (n: number) => {
  const end = next + n
  await Promise.all(Array.from({ length: C }, async () => { while (next < end) await op(next++) }))
}
await run(5_000) // warm-up
const c0 = process.cpuUsage()
await run(N)
const c = process.cpuUsage(c0)
process.stdout.write(`${config.store.kind}${raw ? ' (ioredis alone)' : ''}: ${((c.user + c.system) / N).toFixed(1)} µs of CPU per new key (admit + finish), ${N} keys, ${C} in flight\n`)
await close()
if (config.store.kind === 'redis') {
  // the run's keys: every one under its prefix
  const r = new Redis(config.store.url!)
  for (let cursor = '0'; ;) {
    const [nextCursor, keys] = await r.scan(cursor, 'MATCH', `{fg:${prefix}:*`, 'COUNT', 1000)
    if (keys.length) await r.del(...keys)
    if ((cursor = nextCursor) === '0') break
  }
  await r.quit()
}
process.exit(0)
