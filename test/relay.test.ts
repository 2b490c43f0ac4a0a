/**
 * `npm run example:relay` (examples/relay/run.ts) end to end, as a child process: real payments
 * service, fencegate with a SQLite store, lease queue and two workers, worker A frozen with
 * SIGSTOP past its lease. Needs `npm run build` (npm test builds first).
 */
import { describe, expect, it } from 'vitest'
import { spawn } from 'node:child_process'
import { readFileSync, rmSync } from 'node:fs'
import { join, resolve } from 'node:path'
import type { RelayResult } from '../examples/relay/run.js'
import { tempDir } from './helpers/gateway.js'

const RUN = resolve(import.meta.dirname, '../dist/examples/relay/run.js')

describe('examples/relay', () => {
  it('runs the seed timeline with real processes: one charge, B replayed, A refused at the gateway and the queue', async () => {
    const startedAt = Date.now()
    const dir = tempDir('fg-relay-test-')
    try {
      const resultFile = join(dir, 'result.json')
      const child = spawn(process.execPath, [RUN], { env: { ...process.env, RELAY_RESULT_FILE: resultFile }, stdio: ['ignore', 'pipe', 'pipe'] })
      let output = ''
      child.stdout.on('data', (c: Buffer) => { output += c.toString('utf8') })
      child.stderr.on('data', (c: Buffer) => { output += c.toString('utf8') })
      const code = await new Promise<number | null>((r) => child.once('close', (c) => r(c)))
      expect(code, output).toBe(0)
      const result = JSON.parse(readFileSync(resultFile, 'utf8')) as RelayResult

      expect(result.ok).toBe(true)
      expect(result.failures).toEqual([])

      // the queue: B's generation is the next one, A's ack was refused, B's accepted
      const { a, b } = result.generations
      expect(b).toBe(a! + 1)
      expect(result.exitCodes).toEqual({ a: 3, b: 0 })
      expect(result.aAck).toMatchObject({ event: 'ack-refused', status: 409, answer: { error: 'stale-generation', currentGeneration: b } })
      expect(result.job).toMatchObject({ state: 'done', doneBy: { worker: 'B', generation: b } })

      // the gateway: A forwarded, B replayed the same response, A's late write 412
      const { a1, b: bc, a2 } = result.charges
      expect(a1).toMatchObject({ status: 201, replayed: false, generation: a })
      expect(bc).toMatchObject({ status: 201, replayed: true, generation: b })
      expect(bc!.body).toEqual(a1!.body)
      expect(a2).toMatchObject({ status: 412, generation: a, body: { type: 'urn:fencegate:problem:stale-fencing-token', token: String(a), highestToken: String(b) } })
      // how late A came: measured from the store's record of when B's token was first accepted
      // (the run checks it is at least the time between B's charge and A's SIGCONT: in `failures`)
      const late = a2!.body.supersededForMs as number
      expect(late).toBeGreaterThan(0)
      expect(late).toBeLessThan(Date.now() - startedAt)
      expect(a2!.body.detail).toContain(`token ${b} took over ${late >= 1000 ? `${(late / 1000).toFixed(1)} s` : `${late} ms`} before this request`)

      // the payments service applied exactly one charge: A's
      expect(result.ledger).toHaveLength(1)
      expect(result.ledger![0]).toMatchObject({ account: result.account, fencingToken: String(a), idempotencyKey: result.jobId })

      // fencegate audit --json on the store
      const route = result.audit.routes.find((r: { route: string }) => r.route === 'payments')
      expect(route).toMatchObject({ forwarded: 1, replayed: 1, keys: 1 })
      expect(route.stale).toBeGreaterThanOrEqual(1)

      // fencegate leases: A's lateness, and a lease advised from the observed effect
      const leases = result.leases.routes.find((r: { route: string }) => r.route === 'payments')
      expect(leases.effects.count).toBe(1)
      expect(leases.stale).toMatchObject({ count: 1, measured: 1, latenessMaxMs: late })
      expect(leases.generations).toMatchObject({ resources: 1, total: 2, handovers: 1 })
      expect(leases.advice.minimumLeaseMs).toBeGreaterThanOrEqual(1500)
      expect(result.leasesText).toMatch(/advice {7}lease ≥ \S+, renew every \S+/)

      // and last, the seed key's timeline from the attempt log: A forwarded, B replayed, A refused
      expect(result.timeline.entries.map((e: { token: string; outcome: string; status: number }) => `${e.token} ${e.outcome} ${e.status}`))
        .toEqual([`${a} forwarded 201`, `${b} replayed 201`, `${a} stale 412`])
      expect(result.timeline.entries[2]).toMatchObject({ lateMs: late, highestToken: String(b) })
      expect(result.timeline.entries[0].upstreamMs).toBeGreaterThan(0)
      expect(result.timelineText).toMatch(new RegExp(`412  stale  token ${a}  refused \\d+ ms after token ${b} took over`))
      expect(output.trimEnd().split('\n').slice(-6).join('\n')).toContain(`412  stale  token ${a}  refused`)

      // the report says so, and ends with the audit table
      expect(output).toContain('SIGSTOP')
      expect(output).toContain('Idempotent-Replayed: true')
      expect(output).toContain('stale-fencing-token')
      expect(output).toContain('route payments')
      expect(output).toContain('The timeline held')
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  }, 30_000)
})
