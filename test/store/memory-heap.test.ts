// What a stored answer costs in the memory store: 100,000 completed records of a 40-byte answer
// with four header lines, each body a view into a 64 KiB chunk as a socket delivers it, measured
// in a child process of its own (process.memoryUsage after a forced full GC, before and after).
// Bounds: at most 1 KiB of heap per record (one string holds status, headers and body; no object
// per header, no Buffer keeping its chunk alive), nothing off the heap, and at most 240 MiB of
// RSS for all of them — about 0.5 KiB a record on Node 20, so 1M records fit in a few hundred MiB.
import { resolve } from 'node:path'
import { expect, test } from 'vitest'
import { run } from '../helpers/run.js'

const MEMORY = resolve(import.meta.dirname, '../../dist/src/store/memory/index.js')
const N = 100_000

const CHILD = `
const { MemoryStore } = await import(${JSON.stringify(MEMORY)})
const n = ${N}
const store = new MemoryStore({ maxRecords: n })
const chunk = Buffer.alloc(65536, 0x41)
const headers = [['server', 'nginx/1.22.1'], ['date', 'Wed, 02 Dec 2026 02:40:00 GMT'], ['content-type', 'application/json'], ['content-length', '40']]
const now = Date.now()
const used = () => { gc(); gc(); const m = process.memoryUsage(); return { heap: m.heapUsed, off: m.external + m.arrayBuffers, rss: m.rss } }
const key = (i) => ({ route: 'payments', scope: '', key: 'k-1764643200-123456-' + i })
const m0 = used()
for (let i = 0; i < n; i++) {
  const req = { fingerprint: String(i).padStart(64, '0'), claimId: 'c' + i, leaseMs: 30000, ttlMs: 86400000, retryUnknown: false }
  await store.claim(key(i), req, now)
  const body = chunk.subarray(i % 1000, (i % 1000) + 40)
  await store.finish(key(i), req.claimId, { kind: 'completed', response: { status: 201, headers: headers.map(([a, b]) => [a, b]), body } }, 86400000, now)
}
const m1 = used()
const replay = await store.claim(key(7), { fingerprint: String(7).padStart(64, '0'), claimId: 'x', leaseMs: 1, ttlMs: 1, retryUnknown: false }, now)
console.log(JSON.stringify({ records: store.capacity().records, heap: (m1.heap - m0.heap) / n, off: (m1.off - m0.off) / n, rssMiB: (m1.rss - m0.rss) / 2 ** 20, replay: { ...replay.response, body: replay.response.body.toString('latin1') } }))
`

test(`${N} stored answers of 40 bytes: at most 1 KiB of heap each, nothing off the heap, RSS under 240 MiB`, { timeout: 180_000 }, async () => {
  const r = await run(process.execPath, ['--expose-gc', '--input-type=module', '-e', CHILD], { timeout: 120_000 })
  expect(r.status, r.stderr).toBe(0)
  const m = JSON.parse(r.stdout)
  expect(m.records).toBe(N)
  // the record is still the answer, byte for byte
  expect(m.replay).toEqual({ status: 201, headers: [['server', 'nginx/1.22.1'], ['date', 'Wed, 02 Dec 2026 02:40:00 GMT'], ['content-type', 'application/json'], ['content-length', '40']], body: 'A'.repeat(40) })
  expect(m.heap, `heap bytes per record: ${m.heap}`).toBeLessThan(1024)
  expect(m.off, `bytes off the heap per record: ${m.off}`).toBeLessThan(16)
  expect(m.rssMiB, `RSS growth, MiB: ${m.rssMiB}`).toBeLessThan(240)
})
