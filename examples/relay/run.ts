/**
 * `npm run example:relay`: the seed's timeline with real processes, each one a child of this one.
 *
 *   payments   node dist/examples/payments/server.js 0      the naive sample service (applies every charge)
 *   fencegate  node dist/src/cli.js --config <tmp>/fencegate.yaml   SQLite store in a temp folder,
 *              fencing resource account:{param.account}, idempotency required
 *              and its lease service for account:* (the tokens the fence checks)
 *   queue      node dist/examples/relay/queue.js           lease-based, claim generations from 33
 *   worker A   node dist/examples/relay/worker.js          leases of 1 s, pauses 0.5 s before its ack
 *   worker B   node dist/examples/relay/worker.js          started once A's claim has expired
 *
 * The route fences the ACCOUNT, a resource many jobs share, so the workers take their
 * Fencing-Token from the gateway's lease service (fencegate/client's withLease), not from the
 * queue: the queue's claim generation says who holds the job (and whose ack counts), the lease's
 * token who may write to the account.
 *
 *   A claims job-9 (generation N), takes the lease on the account (token T), charges → 201
 *   A is frozen with SIGSTOP before its ack; its renewals stop, both its leases expire
 *   B claims job-9 again (generation N+1), takes the lease (token T+1), the same charge
 *                                                                                  → 201 replayed, no second charge
 *   B acks and releases its lease                                                  → done
 *   A gets SIGCONT: its renewal is refused (412), the client aborts A's requests; A's charge
 *   again with token T is refused at the gateway (412 stale-fencing-token) or cancelled before
 *   an answer came: either way the client decides stop, and A does not ack
 *   the payments ledger holds exactly one charge; then `fencegate audit` on the store, and the
 *   seed key's timeline from the attempt log (`fencegate audit --route payments --key job-9`,
 *   buildTimeline in src/audit/timeline.ts) with A's lateness, and `fencegate leases`
 *
 * Exit 0 when every step held, 1 when one did not (or a process failed). Every child process is
 * stopped on the way out, also on an error or Ctrl-C. `--keep` leaves the temp folder (config,
 * store, logs) in place so `fencegate audit --config <it>` can be run again.
 */
import { spawn, execFile, type ChildProcess } from 'node:child_process'
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { dirname, join, resolve, sep } from 'node:path'
import { createInterface } from 'node:readline'
import { randomBytes } from 'node:crypto'
import { fileURLToPath } from 'node:url'
import { call, sleep, type Reply } from './http.js'
import { paymentsRoutes } from '../payments/routes.js'
import { isMain } from '../is-main.js'

export interface RelayOptions {
  /** where the readable report goes; default process.stdout, `null` for silence */
  out?: { write(text: string): unknown } | null
  /** keep the temp folder (config, SQLite store, logs) instead of deleting it */
  keep?: boolean
  /** worker lease in ms (default 1000) */
  leaseMs?: number
  /** the first claim generation the queue hands out (default 33, as in the README) */
  firstGeneration?: number
}

/** What a worker reported, one JSON line per event. */
export interface WorkerEvent { event: string; worker?: string; [k: string]: any }

export interface RelayResult {
  ok: boolean
  checks: string[]
  failures: string[]
  account: string
  jobId: string
  /** claim generations of A and B */
  generations: { a?: number; b?: number }
  /** the charge events: A's first, B's, A's late retry */
  charges: { a1?: WorkerEvent; b?: WorkerEvent; a2?: WorkerEvent }
  /** the lease tokens (Fencing-Token) A and B wrote with */
  tokens: { a?: number; b?: number }
  /** exit codes of the workers (0 acked, 3 left to the queue) */
  exitCodes: { a?: number | null; b?: number | null }
  /** what A did at the end: `abandoned`, by the client's decision stop */
  aAck?: WorkerEvent
  /** the job as the queue holds it at the end */
  job?: any
  /** the payments service's own ledger for the account */
  ledger?: any[]
  /** `fencegate audit --json`, parsed */
  audit?: any
  /** `fencegate audit` as printed for people */
  auditTable?: string
  /** `fencegate audit --route payments --key job-9 --json`, parsed: the seed key's timeline */
  timeline?: any
  /** the same timeline as printed for people */
  timelineText?: string
  /** `fencegate leases --json`, parsed */
  leases?: any
  /** `fencegate leases` as printed for people */
  leasesText?: string
  /** the temp folder (deleted at the end unless `keep`) */
  dir: string
  configPath: string
}

const here = dirname(fileURLToPath(import.meta.url))
/** dist/ whether this runs compiled (dist/examples/relay) or from source (examples/relay, e.g. under vitest) */
const DIST = here.endsWith(`${sep}dist${sep}examples${sep}relay`) ? resolve(here, '../..') : resolve(here, '../../dist')
const JS = {
  cli: join(DIST, 'src/cli.js'),
  payments: join(DIST, 'examples/payments/server.js'),
  queue: join(DIST, 'examples/relay/queue.js'),
  worker: join(DIST, 'examples/relay/worker.js'),
}

/** One child process: its stdout lines (parsed when JSON), stderr, and its exit. */
class Child {
  lines: string[] = []
  events: WorkerEvent[] = []
  stderr = ''
  exitCode: number | null | undefined = undefined
  readonly exited: Promise<number | null>
  private waiters: (() => void)[] = []
  stopped = false

  constructor(readonly name: string, readonly proc: ChildProcess) {
    createInterface({ input: proc.stdout! }).on('line', (line) => {
      this.lines.push(line)
      try { const e = JSON.parse(line); if (e && typeof e === 'object') this.events.push(e) } catch { /* plain text */ }
      this.wake()
    })
    proc.stderr!.on('data', (c: Buffer) => { this.stderr += c.toString('utf8') })
    // 'close', not 'exit': every stdout line has been read by then
    this.exited = new Promise((r) => proc.once('close', (code) => { this.exitCode = code; this.wake(); r(code) }))
    proc.once('error', (e) => { this.stderr += `spawn error: ${e.message}\n`; this.exitCode = null; this.wake() })
  }

  private wake() { for (const w of this.waiters.splice(0)) w() }

  /** Resolves with the first stdout line (or event) `match` accepts; rejects when the process exits first or after `timeoutMs`. */
  async waitFor<T>(what: string, match: (line: string, event: WorkerEvent | undefined) => T | undefined, timeoutMs = 10_000): Promise<T> {
    const deadline = Date.now() + timeoutMs
    let seen = 0
    for (;;) {
      for (; seen < this.lines.length; seen++) {
        const line = this.lines[seen]
        let ev: WorkerEvent | undefined
        try { ev = JSON.parse(line) } catch { ev = undefined }
        const hit = match(line, ev)
        if (hit !== undefined) return hit
      }
      if (this.exitCode !== undefined) throw new Error(`${this.name} exited (${this.exitCode}) before ${what}${this.stderr ? `: ${this.stderr.trim().slice(-800)}` : ''}`)
      const left = deadline - Date.now()
      if (left <= 0) throw new Error(`${this.name}: no ${what} within ${timeoutMs} ms${this.stderr ? `: ${this.stderr.trim().slice(-800)}` : ''}`)
      await new Promise<void>((r) => { const t = setTimeout(r, left); this.waiters.push(() => { clearTimeout(t); r() }) })
    }
  }

  event(name: string, pred: (e: WorkerEvent) => boolean = () => true, timeoutMs?: number): Promise<WorkerEvent> {
    return this.waitFor(`a "${name}" event`, (_l, e) => (e?.event === name && pred(e) ? e : undefined), timeoutMs)
  }

  get alive() { return this.exitCode === undefined }

  /** SIGCONT if frozen, SIGTERM, then SIGKILL after `graceMs`. */
  async stop(graceMs = 3000): Promise<void> {
    if (!this.alive) return
    if (this.stopped) { this.proc.kill('SIGCONT'); this.stopped = false }
    this.proc.kill('SIGTERM')
    const t = setTimeout(() => { if (this.alive) this.proc.kill('SIGKILL') }, graceMs)
    await this.exited
    clearTimeout(t)
  }
}

const children: Child[] = []
/** temp folders to delete when a signal ends the run early */
const tempDirs = new Set<string>()

function start(name: string, script: string, args: string[]): Child {
  const proc = spawn(process.execPath, [script, ...args], { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, OTEL_SDK_DISABLED: 'true' } })
  const c = new Child(name, proc)
  children.push(c)
  return c
}

/** Stops every child this module started (in reverse order), frozen ones included. */
export async function stopChildren(): Promise<void> {
  await Promise.all(children.splice(0).reverse().map((c) => c.stop().catch(() => {})))
}

const cli = (args: string[]) => new Promise<{ code: number; stdout: string; stderr: string }>((ok) => {
  execFile(process.execPath, [JS.cli, ...args], { timeout: 15_000, env: { ...process.env, OTEL_SDK_DISABLED: 'true' } }, (err, stdout, stderr) => {
    ok({ code: err ? (typeof (err as { code?: unknown }).code === 'number' ? (err as { code: number }).code : 1) : 0, stdout, stderr })
  })
})

const gatewayConfig = (dir: string, payments: string) => `# written by examples/relay/run.ts
listen: 127.0.0.1:0
admin:
  listen: 127.0.0.1:0
store:
  kind: sqlite
  path: ${join(dir, 'fencegate.db')}
shutdown:
  grace: 2s
leases:
  resources: ["account:*"]
  maxTtl: 1m
${paymentsRoutes(payments)}`

/** Runs the timeline. Never throws: a failure is in `failures` (and `ok` is false). */
export async function runRelay(options: RelayOptions = {}): Promise<RelayResult> {
  const out = options.out === undefined ? process.stdout : options.out
  const say = (text = '') => { out?.write(`${text}\n`) }
  const leaseMs = options.leaseMs ?? 1000
  const run = randomBytes(3).toString('hex')
  const dir = mkdtempSync(join(tmpdir(), 'fencegate-relay-'))
  if (!options.keep) tempDirs.add(dir)
  const configPath = join(dir, 'fencegate.yaml')
  const result: RelayResult = { ok: false, checks: [], failures: [], account: `acct-${run}`, jobId: 'job-9', generations: {}, tokens: {}, charges: {}, exitCodes: {}, dir, configPath }
  const expect = (cond: boolean, what: string) => {
    (cond ? result.checks : result.failures).push(what)
    say(`    ${cond ? 'ok' : 'NOT AS EXPECTED'}: ${what}`)
    return cond
  }
  let n = 0
  const step = (actor: string, action: string) => { say(); say(`[${++n}] ${actor}: ${action}`) }
  const show = (e: WorkerEvent | Reply | undefined) => {
    const body = e && 'text' in e ? e.text : JSON.stringify(e?.body ?? e?.answer)
    if (body) say(`    ${body.length > 400 ? `${body.slice(0, 400)}…` : body}`)
  }

  try {
    for (const [what, path] of Object.entries(JS)) if (!existsSync(path)) throw new Error(`${path} (${what}) is missing: build first (npm run build)`)
    say(`fencegate relay example: real processes, temp folder ${dir}`)

    // the services
    const payments = start('payments', JS.payments, ['0'])
    const paymentsUrl = await payments.waitFor('its URL', (l) => /sample payments service on (\S+)/.exec(l)?.[1])
    writeFileSync(configPath, gatewayConfig(dir, paymentsUrl))
    const gateway = start('fencegate', JS.cli, ['--config', configPath])
    const [gatewayUrl, adminUrl] = await gateway.waitFor('its URL', (l) => {
      const m = /^fencegate \S+ on (\S+) \(admin (\S+?),/.exec(l)
      return m ? [m[1], m[2]] as const : undefined
    }, 15_000)
    const ready = await call('GET', `${adminUrl}/readyz`)
    if (ready.status !== 200) throw new Error(`fencegate /readyz answered ${ready.status}: ${ready.text}`)
    const queue = start('queue', JS.queue, ['--port', '0', '--first-generation', String(options.firstGeneration ?? 33)])
    const queueUrl = (await queue.event('listening')).url as string
    say(`  payments service  ${paymentsUrl}   (pid ${payments.proc.pid}; naive: applies every charge it receives)`)
    say(`  fencegate         ${gatewayUrl}   (pid ${gateway.proc.pid}; admin ${adminUrl}; config ${configPath}, SQLite store)`)
    say(`  queue             ${queueUrl}   (pid ${queue.proc.pid}; leases of ${leaseMs} ms, claim generations from ${options.firstGeneration ?? 33})`)

    const job = { id: result.jobId, payload: { account: result.account, amount: 1250, currency: 'eur' } }
    const enq = await call('POST', `${queueUrl}/jobs`, job)
    if (enq.status !== 201) throw new Error(`enqueue: queue answered ${enq.status} ${enq.text}`)
    step('Queue', `${job.id} enqueued: charge ${result.account} 12.50 eur`)

    const workerArgs = (name: string, extra: string[]) => ['--queue', queueUrl, '--gateway', gatewayUrl, '--name', name, '--lease-ms', String(leaseMs), '--renew-ms', String(Math.max(50, Math.floor(leaseMs / 4))), '--claim-timeout', '10000', ...extra]
    // A takes a short pause (half its lease, renewals go on) between its charge and its ack; this
    // run freezes it with SIGSTOP as soon as it says so, which stops the pause and the renewals alike
    const pauseMs = Math.floor(leaseMs / 2)
    const a = start('worker A', JS.worker, workerArgs('A', ['--pause-before-ack', String(pauseMs), '--charge-again']))
    const aClaim = await a.event('claimed')
    result.generations.a = aClaim.generation
    step('Queue → Worker A', `${aClaim.job}, lease ${aClaim.leaseMs} ms, claim generation ${aClaim.generation}   (worker pid ${a.proc.pid})`)

    const a1 = result.charges.a1 = await a.event('charge', (e) => e.attempt === 1)
    result.tokens.a = a1.token
    step('Worker A → fencegate', `POST /_fencegate/leases/account:${result.account}  → 201, token ${a1.token}   (withLease: renewed every third of its 1 s, released after)`)
    step('Worker A → fencegate → Payments', `POST ${a1.path}  (Fencing-Token: ${a1.token}, Idempotency-Key: ${a1.job})`)
    say(`    → ${a1.status}${a1.replayed ? ', Idempotent-Replayed: true' : ''}`)
    show(a1)
    expect(a1.status === 201 && !a1.replayed && a1.decision?.action === 'done', 'A\'s charge was forwarded and applied (201, not replayed): done')

    await a.event('pausing')
    a.proc.kill('SIGSTOP')
    a.stopped = true
    const frozenAt = Date.now()
    step('Worker A', `takes a ${pauseMs} ms pause before its ack — frozen there with SIGSTOP (pid ${a.proc.pid}): no renewals, no ack`)

    // wait for the queue to see the lease run out
    const t0 = Date.now()
    let view: any
    for (;;) {
      view = (await call('GET', `${queueUrl}/jobs/${job.id}`)).json
      if (view?.claimable) break
      if (view?.state === 'done') throw new Error(`${job.id} was acked by generation ${view.doneBy?.generation} before its lease expired: worker A was not frozen in time (SIGSTOP came after its ${pauseMs} ms pause?)`)
      if (Date.now() - t0 > leaseMs + 10_000) throw new Error(`the lease of ${job.id} did not expire: ${JSON.stringify(view)}`)
      await sleep(50)
    }
    step('Queue', `the lease of generation ${view.generation} (worker ${view.holder}) has expired; ${job.id} is claimable again`)

    const b = start('worker B', JS.worker, workerArgs('B', []))
    const bClaim = await b.event('claimed')
    result.generations.b = bClaim.generation
    step('Queue → Worker B', `${bClaim.job} again, lease ${bClaim.leaseMs} ms, claim generation ${bClaim.generation}   (worker pid ${b.proc.pid})`)
    expect(bClaim.generation === aClaim.generation + 1, `B's generation is A's + 1 (${aClaim.generation} → ${bClaim.generation})`)

    const bc = result.charges.b = await b.event('charge')
    const bChargedAt = Date.now() // B's token was first accepted before this
    result.tokens.b = bc.token
    step('Worker B → fencegate', `POST /_fencegate/leases/account:${result.account}  → 201, token ${bc.token}: A's lease had run out, B took it over`)
    expect(bc.token === a1.token + 1, `B's lease token is A's + 1 (${a1.token} → ${bc.token}): the grant raised the account's high-water mark`)
    step('Worker B → fencegate', `the same charge: POST ${bc.path}  (Fencing-Token: ${bc.token}, Idempotency-Key: ${bc.job})`)
    say(`    → ${bc.status}${bc.replayed ? ', Idempotent-Replayed: true' : ''}`)
    show(bc)
    expect(bc.status === 201 && bc.replayed === true && bc.decision?.case === 'replayed', 'B got the stored response replayed (201, Idempotent-Replayed: true): done; the payments service was not called')
    expect(JSON.stringify(bc.body) === JSON.stringify(a1.body), 'the replayed body is A\'s first response')

    const bDone = await b.waitFor('its ack', (_l, e) => (e?.event === 'acked' || e?.event === 'ack-refused' ? e : undefined))
    step('Worker B → Queue', `ack ${job.id} with generation ${bDone.generation}`)
    expect(bDone.event === 'acked', 'the queue accepted B\'s ack: the job is done')
    result.exitCodes.b = await b.exited

    a.proc.kill('SIGCONT')
    const resumedAt = Date.now()
    a.stopped = false
    step('Worker A', `SIGCONT after ${Date.now() - frozenAt} ms frozen: wakes up, still believing it holds ${job.id} (generation ${aClaim.generation}) and the lease (token ${a1.token})`)
    const resumed = await a.event('resumed')
    say(`    its ${pauseMs} ms pause took ${resumed.pausedMs} ms, past its ${leaseMs} ms lease; it does not notice`)
    const a2 = result.charges.a2 = await a.event('charge', (e) => e.attempt === 2)
    const lost = await a.event('lease', (e) => e.type === 'lost').catch(() => undefined)
    step('Worker A', `its lease: ${lost ? `lost — ${lost.decision?.status} ${lost.decision?.case} on its renewal (PUT /_fencegate/leases/account:${result.account}, Fencing-Token: ${a1.token}) or its write; the client aborts A's requests (lease.signal)` : 'not lost yet'}`)
    step('Worker A → fencegate', `sends its charge again: POST ${a2.path}  (Fencing-Token: ${a2.token}, Idempotency-Key: ${a2.job})`)
    say(`    → ${a2.status === 0 ? 'no answer: cancelled by the client when the renewal was refused' : a2.status}; the client decides ${a2.decision?.action} (${a2.decision?.case})`)
    show(a2)
    expect(a2.decision?.action === 'stop', 'A\'s late write: the client decided stop')
    if (a2.status === 412) {
      expect(a2.body?.type === 'urn:fencegate:problem:stale-fencing-token', 'A\'s late write was refused: 412 stale-fencing-token, not forwarded')
      expect(a2.body?.token === String(a1.token) && a2.body?.highestToken === String(bc.token), `token ${a1.token} refused, highestToken ${bc.token}`)
      const late = a2.body?.supersededForMs
      expect(typeof late === 'number' && late >= resumedAt - bChargedAt, `supersededForMs ${late}: A came ${late} ms after B's token ${bc.token} took over, at least the ${resumedAt - bChargedAt} ms between B's charge and A's SIGCONT`)
    } else {
      expect(a2.status === 0 && lost !== undefined, 'A\'s late write was cancelled by the client once its renewal was refused (412): it never got past A')
    }
    const aEnd = result.aAck = await a.waitFor('its end', (_l, e) => (e && ['acked', 'ack-refused', 'abandoned'].includes(e.event) ? e : undefined))
    step('Worker A', `${aEnd.event === 'abandoned' ? `does not ack ${job.id}: its decision is stop (a newer lease holder has written)` : `${aEnd.event} ${job.id}`}`)
    expect(aEnd.event === 'abandoned', 'A left the job to the queue (no ack after stop)')
    result.exitCodes.a = await a.exited

    result.job = (await call('GET', `${queueUrl}/jobs/${job.id}`)).json
    step('Queue', `${job.id}: ${result.job?.state}, acked by ${result.job?.doneBy?.worker} (generation ${result.job?.doneBy?.generation}); claims ${result.job?.claims?.map((c: any) => `${c.worker}:${c.generation}`).join(', ')}; refused ${result.job?.refusals?.map((r: any) => `${r.op} ${r.worker}:${r.generation}`).join(', ') || 'nothing'}`)
    expect(result.job?.state === 'done' && result.job?.doneBy?.generation === bClaim.generation, 'the job is done, by B\'s generation')

    // the ledger, read from the payments service itself: what got through
    const ledger = await call('GET', `${paymentsUrl}/accounts/${encodeURIComponent(result.account)}/charges`)
    result.ledger = ledger.json?.charges
    step('Payments', `the ledger of ${result.account} (read from the service itself, not through the gateway)`)
    show(ledger)
    const count = Array.isArray(result.ledger) ? result.ledger.length : -1
    expect(count === 1, `exactly one charge in the ledger (found ${count})`)
    if (count >= 1) expect(result.ledger![0].fencingToken === String(a1.token) && result.ledger![0].idempotencyKey === job.id, `the charge is A's: token ${a1.token}, key ${job.id}`)

    // stop the gateway gracefully (writes its queued attempt-log entries), then read the audit from the store
    await gateway.stop(5000)
    const [json, table] = await Promise.all([cli(['audit', '--config', configPath, '--json']), cli(['audit', '--config', configPath])])
    if (json.code !== 0) throw new Error(`fencegate audit --json exited ${json.code}: ${json.stderr}`)
    result.audit = JSON.parse(json.stdout)
    result.auditTable = table.stdout
    const route = result.audit?.routes?.find((r: any) => r.route === 'payments')
    step('fencegate audit', `fencegate audit --config ${configPath}   (gateway stopped; the attempt log is in the store)`)
    // a write the client cancelled after sending it may still have been refused at the door
    const stale = a2.status === 412 ? 1 : route?.stale === 1 ? 1 : 0
    expect(route?.forwarded === 1 && route?.replayed === 1 && route?.stale === stale, `route payments: forwarded ${route?.forwarded}, replayed ${route?.replayed}, stale ${route?.stale} (expected 1, 1, ${a2.status === 412 ? 1 : '0 or 1'})`)
    say()
    say(table.code === 0 ? table.stdout.trimEnd() : `(fencegate audit exited ${table.code}: ${table.stderr.trim()})`)

    // the lease advice from what the gateway saw, with A's lateness
    const [leasesJson, leasesText] = await Promise.all([cli(['leases', '--config', configPath, '--json']), cli(['leases', '--config', configPath, '--route', 'payments'])])
    if (leasesJson.code !== 0) throw new Error(`fencegate leases --json exited ${leasesJson.code}: ${leasesJson.stderr}`)
    result.leases = JSON.parse(leasesJson.stdout)
    result.leasesText = leasesText.stdout
    const lr = result.leases?.routes?.find((r: any) => r.route === 'payments')
    step('fencegate leases', `fencegate leases --config ${configPath} --route payments   (effect durations, generations, stale lateness, advice)`)
    if (a2.status === 412) expect(lr?.stale?.count >= 1 && lr?.stale?.latenessMaxMs === a2.body?.supersededForMs, `A's lateness is in the advice's numbers: stale ${lr?.stale?.count}, latest ${lr?.stale?.latenessMaxMs} ms (the 412 said supersededForMs ${a2.body?.supersededForMs})`)
    expect(lr?.advice?.minimumLeaseMs > 0, `a minimum lease is advised from the observed effects: ${lr?.advice?.minimumLeaseMs} ms, renew every ${lr?.advice?.renewalIntervalMs} ms`)
    say()
    say(leasesText.code === 0 ? leasesText.stdout.trimEnd() : `(fencegate leases exited ${leasesText.code}: ${leasesText.stderr.trim()})`)

    // last: the seed key's timeline, from the attempt log
    const keyArgs = ['audit', '--config', configPath, '--route', 'payments', '--key', job.id]
    const [tlJson, tlText] = await Promise.all([cli([...keyArgs, '--json']), cli(keyArgs)])
    if (tlJson.code !== 0) throw new Error(`fencegate audit --key ${job.id} --json exited ${tlJson.code}: ${tlJson.stderr}`)
    result.timeline = JSON.parse(tlJson.stdout)
    result.timelineText = tlText.stdout
    const seen = (result.timeline?.entries ?? []).map((e: any) => `${e.token} ${e.outcome} ${e.status}`)
    step('fencegate audit --key', `fencegate audit --config ${configPath} --route payments --key ${job.id}   (every attempt on the key, oldest first)`)
    const want = [`${a1.token} forwarded 201`, `${bc.token} replayed 201`, ...(stale ? [`${a1.token} stale 412`] : [])]
    expect(JSON.stringify(seen) === JSON.stringify(want), `the timeline reads ${want.join(', ')} (found: ${seen.join(', ')})`)
    say()
    say(tlText.code === 0 ? tlText.stdout.trimEnd() : `(fencegate audit --key exited ${tlText.code}: ${tlText.stderr.trim()})`)
  } catch (e) {
    result.failures.push((e as Error).message)
    say()
    say(`ERROR: ${(e as Error).message}`)
    for (const c of children) if (c.stderr.trim()) say(`  ${c.name} stderr: ${c.stderr.trim().slice(-600)}`)
  } finally {
    await stopChildren()
    if (!options.keep) { rmSync(dir, { recursive: true, force: true }); tempDirs.delete(dir) }
  }
  result.ok = result.failures.length === 0
  say()
  say(result.ok
    ? `The timeline held with real processes: one charge, B's duplicate replayed, ${result.charges.a2?.status === 412 ? `A's late write refused at the gateway (412, ${result.charges.a2?.body?.supersededForMs} ms after B's token took over)` : 'A\'s late write cancelled by the client once its lease renewal was refused (412)'}, and A left the job to the queue.`
    : `The timeline did NOT hold: ${result.failures.join('; ')}`)
  if (options.keep) say(`Kept ${dir}; run again: node ${JS.cli} audit --config ${configPath}`)
  return result
}

if (isMain(import.meta.url)) {
  // last resort: a frozen or running child must not outlive us
  process.on('exit', () => { for (const c of children) if (c.alive) { try { c.proc.kill('SIGKILL') } catch { /* gone */ } } })
  for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
    process.once(sig, () => {
      stopChildren().finally(() => {
        for (const d of tempDirs) rmSync(d, { recursive: true, force: true })
        process.exit(130)
      })
    })
  }
  const result = await runRelay({ keep: process.argv.includes('--keep') })
  if (process.env.RELAY_RESULT_FILE) writeFileSync(process.env.RELAY_RESULT_FILE, `${JSON.stringify(result, null, 2)}\n`)
  process.exitCode = result.ok ? 0 : 1
}
