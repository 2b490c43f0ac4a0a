/**
 * A separate gateway process for sqlite.test.ts. Opens the SqliteStore at FG_DB, prints
 * "ready", waits for "go <claimUntil>" on stdin (so the processes start together), then:
 * - claims: until claimUntil (epoch ms), claims key `t<Date.now() / 5>` over and over, so
 *   every process hammers the same key during the same 5 ms window however far apart they
 *   drift (a store locked out by the other retries on timers, so the processes take turns in short runs);
 * - fences: FG_ROUNDS fences of one resource with this worker's rising tokens
 *   (worker+1, worker+1+workers, ...), interleaved with the other workers' tokens.
 * Prints one JSON line with what the store answered. Run with vite-node (it resolves the .ts
 * sources); not a test file itself.
 */
import { createInterface } from 'node:readline'
import { SqliteStore } from '../../src/store/index.js'

const path = process.env.FG_DB!
const worker = Number(process.env.FG_WORKER)
const workers = Number(process.env.FG_WORKERS)
const rounds = Number(process.env.FG_ROUNDS)

// synchronous normal: the test is about two processes taking turns on the lock, and an fsync per commit
// would leave too few turns in the claim window on a loaded machine to show any
const store = new SqliteStore({ path, busyTimeoutMs: 10_000, reapIntervalMs: 0, synchronous: 'normal' })
// warm up (statements, JIT) on keys and a resource nobody else touches
for (let i = 0; i < 50; i++) {
  await store.fence(`warmup/${worker}`, BigInt(i))
  await store.claim({ route: 'warmup', scope: String(worker), key: String(i) }, { fingerprint: 'fp', claimId: 'w', leaseMs: 1, ttlMs: 1, retryUnknown: false }, 0)
}
process.stdout.write('ready\n')
let claimUntil = 0
const lines = createInterface({ input: process.stdin })
for await (const line of lines) {
  const m = /^go (\d+)$/.exec(line.trim())
  if (m) { claimUntil = Number(m[1]); break }
}
lines.close()

/** key -> [attempts, claimed by this worker] */
const claims: Record<string, [number, boolean]> = {}
let n = 0
for (let now = Date.now(); now < claimUntil; now = Date.now()) {
  const key = `t${Math.floor(now / 5)}`
  const c = await store.claim({ route: 'POST /x', scope: 'a'.repeat(64), key }, {
    fingerprint: 'fp', claimId: `w${worker}-${n++}`, leaseMs: 600_000, ttlMs: 600_000, retryUnknown: false,
  }, 1_700_000_000_000)
  if (c.kind !== 'claimed' && c.kind !== 'in_flight') throw new Error(`unexpected claim result ${c.kind}`)
  const entry = (claims[key] ??= [0, false])
  entry[0]++
  if (c.kind === 'claimed') {
    if (entry[1]) throw new Error(`${key} claimed twice by worker ${worker}`)
    entry[1] = true
  }
}

const fences: [token: string, accepted: boolean, highest: string][] = []
for (let i = 0; i < rounds; i++) {
  const token = BigInt(i * workers + worker + 1)
  const f = await store.fence('res/xproc', token)
  fences.push([String(token), f.accepted, String(f.highest)])
}
await store.close()
process.stdout.write(JSON.stringify({ claims, fences }) + '\n')
