/**
 * `npm run example:relay` (examples/relay/run.ts) end to end, as a child process: real payments
 * service, fencegate with a SQLite store and its lease service, lease queue and two workers on
 * fencegate/client (tokens from the lease service on the account), worker A frozen with SIGSTOP
 * past its leases. Needs `npm run build` (npm test builds first).
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

      // the queue: B's generation is the next one; A did not ack (its decision was stop), B did
      const g = result.generations
      expect(g.b).toBe(g.a! + 1)
      expect(result.exitCodes).toEqual({ a: 3, b: 0 })
      expect(result.aAck).toMatchObject({ event: 'abandoned', decision: { action: 'stop' } })
      expect(result.job).toMatchObject({ state: 'done', doneBy: { worker: 'B', generation: g.b } })

      // the tokens: from the gateway's lease service on the account, B's the next one after A's
      const { a, b } = result.tokens
      expect(b).toBe(a! + 1)

      // the gateway: A forwarded, B replayed the same response, A's late write 412
      const { a1, b: bc, a2 } = result.charges
      expect(a1).toMatchObject({ status: 201, replayed: false, token: a, generation: g.a, decision: { action: 'done', case: 'applied' } })
      expect(bc).toMatchObject({ status: 201, replayed: true, token: b, generation: g.b, decision: { action: 'done', case: 'replayed' } })
      expect(bc!.body).toEqual(a1!.body)
      // A's late write: refused at the gateway, or cancelled by the client once its renewal was
      // refused; the client's decision is stop either way
      expect(a2).toMatchObject({ token: a, decision: { action: 'stop' } })
      const refusedAtGateway = a2!.status === 412
      if (refusedAtGateway) {
        expect(a2).toMatchObject({ decision: { case: 'stale-fencing-token' }, body: { type: 'urn:fencegate:problem:stale-fencing-token', token: String(a), highestToken: String(b) } })
        // how late A came: measured from the store's record of when B's token was first accepted
        const late = a2!.body.supersededForMs as number
        expect(late).toBeGreaterThan(0)
        expect(late).toBeLessThan(Date.now() - startedAt)
      } else {
        expect(a2).toMatchObject({ status: 0, decision: { case: 'aborted' } })
      }
      expect(result.aAck).toBeDefined()

      // the payments service applied exactly one charge: A's
      expect(result.ledger).toHaveLength(1)
      expect(result.ledger![0]).toMatchObject({ account: result.account, fencingToken: String(a), idempotencyKey: result.jobId })

      // fencegate audit --json on the store
      const route = result.audit.routes.find((r: { route: string }) => r.route === 'payments')
      expect(route).toMatchObject({ forwarded: 1, replayed: 1, keys: 1 })
      // a write the client cancelled after it was sent may still have reached the door: refused there
      const staleAtGateway = route.stale
      expect(staleAtGateway).toBe(refusedAtGateway ? 1 : staleAtGateway === 1 ? 1 : 0)

      // fencegate leases: the gateway saw the account's two tokens, one handover; A's lateness when it came to the door
      const leases = result.leases.routes.find((r: { route: string }) => r.route === 'payments')
      expect(leases.effects.count).toBe(1)
      expect(leases.generations).toMatchObject({ resources: 1, total: 2, handovers: 1 })
      expect(leases.advice.minimumLeaseMs).toBeGreaterThanOrEqual(1500)
      expect(result.leasesText).toMatch(/advice {7}lease ≥ \S+, renew every \S+/)

      // and last, the seed key's timeline from the attempt log: A forwarded, B replayed, (A refused)
      const entries = result.timeline.entries.map((e: { token: string; outcome: string; status: number }) => `${e.token} ${e.outcome} ${e.status}`)
      expect(result.timeline.entries[0].upstreamMs).toBeGreaterThan(0)
      if (staleAtGateway) {
        const late = result.timeline.entries[2]?.lateMs
        if (refusedAtGateway) expect(late).toBe(a2!.body.supersededForMs)
        expect(leases.stale).toMatchObject({ count: 1, measured: 1, latenessMaxMs: late })
        expect(entries).toEqual([`${a} forwarded 201`, `${b} replayed 201`, `${a} stale 412`])
        expect(result.timeline.entries[2]).toMatchObject({ lateMs: expect.any(Number), highestToken: String(b) })
        expect(result.timelineText).toMatch(new RegExp(`412  stale  token ${a}  refused \\d+ ms after token ${b} took over`))
      } else {
        expect(leases.stale).toMatchObject({ count: 0 })
        expect(entries).toEqual([`${a} forwarded 201`, `${b} replayed 201`])
      }

      // the report says so, and ends with the audit table
      expect(output).toContain('SIGSTOP')
      expect(output).toContain('Idempotent-Replayed: true')
      expect(output).toContain('route payments')
      expect(output).toContain('The timeline held')
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  }, 30_000)
})
