/**
 * Worker processes on fencegate/client under faults: 4 relay workers (examples/relay/worker.ts,
 * child processes) take jobs from a lease queue and charge one account through the gateway,
 * each charge inside `withLease('account:A', …)` with 1 s leases from the gateway's lease
 * service, sent, then after a short pause sent again under the same lease (a re-run step);
 * meanwhile workers are frozen with SIGSTOP past their lease in that pause, and killed with
 * SIGKILL (and replaced). Then:
 * - the payments ledger holds every job's charge exactly once, its tokens never going down;
 * - lease tokens strictly rise across every grant, whoever took it;
 * - every write an old holder sent after a newer lease was granted was refused 412 (or cancelled
 *   by the client once its lease was lost) and never reached the upstream: every charge the
 *   upstream applied was sent before any newer grant;
 * - the client's decision for each answer is the table's (src/client/decisions.ts).
 */
import { randomBytes } from 'node:crypto'
import { afterAll, beforeAll, expect, test } from 'vitest'
import { startPayments } from '../examples/payments/server.js'
import { paymentsRoutes } from '../examples/payments/routes.js'
import { startQueue } from '../examples/relay/queue.js'
import { distPath, startChild, stopChildren, type Child, type ChildEvent } from '../examples/children.js'
import { decide } from '../src/client/index.js'
import { startTestGateway, type TestGateway } from './helpers/gateway.js'
import { send } from './helpers/http.js'
import { sleep, until } from './helpers/wait.js'

const JOBS = 20
const WORKERS = 4
const run = randomBytes(3).toString('hex')
const account = `acct-${run}`

let payments: Awaited<ReturnType<typeof startPayments>>
let gw: TestGateway
let queue: Awaited<ReturnType<typeof startQueue>>

beforeAll(async () => {
  payments = await startPayments(0)
  gw = await startTestGateway(`store:
  kind: sqlite
  path: "@DIR@/fencegate.db"
leases:
  resources: ["account:*"]
  maxTtl: 1m
${paymentsRoutes(payments.url)}`)
  queue = await startQueue({ emit: () => {} })
})
afterAll(async () => {
  await stopChildren()
  await queue?.close()
  await gw?.close()
  await payments?.close()
})

const time = (e: ChildEvent) => Date.parse(e.time)

test('SIGSTOPs past the lease and SIGKILLs: every job charged once, every write after a takeover refused, every decision the table\'s', async () => {
  for (let i = 0; i < JOBS; i++) {
    const r = await send(`${queue.url}/jobs`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ id: `job-${run}-${i}`, payload: { account, amount: 100 + i, currency: 'eur' } }) })
    expect(r.status).toBe(201)
  }
  let started = 0
  const workers: Child[] = []
  const spawnWorker = () => {
    const w = startChild(`worker ${started}`, distPath('examples/relay/worker.js'),
      ['--queue', queue.url, '--gateway', gw.url, '--name', `w${started++}`, '--lease-ms', '1000', '--renew-ms', '250', '--jobs', '1000', '--claim-timeout', '4000', '--pause-before-ack', '200', '--charge-again'])
    workers.push(w)
  }
  for (let i = 0; i < WORKERS; i++) spawnWorker()

  // faults: freeze a worker while it holds the lease (in its pause between the charge and the
  // charge again, both under the lease), for 1.5–2.5 s; now and then kill one
  const frozen = new Set<Child>()
  const seenGrants = new Set<string>()
  let kills = 0
  let freezes = 0
  const done = () => [...queue.jobs.values()].every((j) => j.state === 'done')
  const deadline = Date.now() + 45_000
  while (!done() && Date.now() < deadline) {
    for (const w of workers.filter((x) => x.alive && !frozen.has(x))) {
      const grant = w.events.filter((e) => e.event === 'pausing').at(-1)
      const id = grant && `${w.name} ${grant.job} ${grant.token}`
      if (!grant || seenGrants.has(id!)) continue
      seenGrants.add(id!)
      if (Math.random() < 0.4 && frozen.size === 0) {
        w.freeze()
        frozen.add(w)
        freezes++
        const ms = 1500 + Math.random() * 1000
        setTimeout(() => { if (w.alive) w.thaw(); frozen.delete(w) }, ms)
      } else if (kills < 2 && (Math.random() < 0.15 || (kills === 0 && seenGrants.size >= 6))) {
        w.proc.kill('SIGKILL')
        kills++
        spawnWorker()
      }
    }
    await sleep(20)
  }
  await until(() => frozen.size === 0, { timeoutMs: 5000, message: 'frozen workers thawed' })
  expect(done(), JSON.stringify([...queue.jobs.values()].map((j) => [j.id, j.state, j.claims.length]))).toBe(true)
  await Promise.all(workers.map((w) => w.stop(5000)))
  expect(freezes).toBeGreaterThan(0)
  expect(kills).toBeGreaterThan(0)

  const events: ChildEvent[] = workers.flatMap((w) => w.events.map((e) => ({ ...e, by: w.name })))
  const charges = events.filter((e) => e.event === 'charge')
  const grants = events.filter((e) => e.event === 'lease' && e.type === 'acquired').sort((a, b) => time(a) - time(b))

  // the ledger: each job once, tokens never going down
  const ledger = (await send(`${payments.url}/accounts/${account}/charges`)).json().charges as { idempotencyKey: string; fencingToken: string }[]
  expect(ledger.map((c) => c.idempotencyKey).sort()).toEqual([...queue.jobs.keys()].sort())
  const tokens = ledger.map((c) => BigInt(c.fencingToken))
  for (let i = 1; i < tokens.length; i++) expect(tokens[i] >= tokens[i - 1], `ledger tokens ${tokens.join(', ')}`).toBe(true)

  // grants: strictly rising tokens in the order they were granted
  const granted = grants.map((g) => Number(g.token))
  expect(new Set(granted).size).toBe(granted.length)
  expect([...granted].sort((a, b) => a - b)).toEqual(granted)

  // every write sent after a newer grant: never accepted, never at the upstream
  let afterTakeover = 0
  for (const c of charges) {
    const newer = grants.some((g) => Number(g.token) > c.token && time(g) < c.sentAt)
    if (!newer) continue
    afterTakeover++
    expect(c, 'a write sent after a newer lease was granted').toMatchObject({ decision: { action: 'stop' } })
    expect([412, 0]).toContain(c.status)
  }
  // none reached the upstream: it applied one charge per job and no more (the ledger above)
  expect(ledger).toHaveLength(JOBS)
  // ... and every charge the upstream applied came from a write sent before any newer grant
  for (const c of charges.filter((x) => x.status === 201 && !x.replayed)) {
    expect(grants.some((g) => Number(g.token) > c.token && time(g) < c.sentAt)).toBe(false)
  }

  // the client's decision for each answer is the table's, per answer kind
  const kinds = new Map<string, number>()
  for (const c of charges) {
    const want = c.status === 0 ? { action: 'stop', case: 'aborted' } : decide({ status: c.status, headers: { 'idempotent-replayed': c.replayed ? 'true' : undefined }, body: c.body })
    expect(c.decision, JSON.stringify(c)).toMatchObject({ action: want.action, case: want.case })
    kinds.set(`${c.status} ${c.decision.case}`, (kinds.get(`${c.status} ${c.decision.case}`) ?? 0) + 1)
  }
  expect(kinds.get('201 applied')).toBeGreaterThanOrEqual(JOBS - kills)
  for (const k of kinds.keys()) expect(['201 applied', '201 replayed', '412 stale-fencing-token', '0 aborted']).toContain(k)
  // a frozen holder lost its lease: told by a 412 on its renewal or its write (or, when its
  // renewal was cut off by its own timeout on waking, by the lease's end passing unrenewed)
  const lost = events.filter((e) => e.event === 'lease' && e.type === 'lost')
  expect(lost.length).toBeGreaterThan(0)
  for (const l of lost) expect(l.reason === 'expired' || (l.decision?.status === 412 && l.decision?.action === 'stop'), JSON.stringify(l)).toBe(true)
  expect(afterTakeover).toBeGreaterThan(0)
}, 60_000)
