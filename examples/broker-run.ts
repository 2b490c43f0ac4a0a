/**
 * What the broker examples' runs (examples/jetstream/run.ts, examples/rabbitmq/run.ts) share:
 * the narration and its checks, the sample payments service and fencegate as child processes
 * (SQLite store in a temp folder, the payments routes fenced per job), and the end of the run —
 * `fencegate audit`, `fencegate leases` and last the seed key's timeline from the attempt log,
 * read with the CLI from the store once the gateway has stopped.
 */
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { call } from './relay/http.js'
import { paymentsRoutes } from './payments/routes.js'
import { brokerGatewayConfig, type ChargeReply } from './charge.js'
import { distPath, fencegateCli, startChild, type Child, type ChildEvent } from './children.js'

export interface BrokerRunResult {
  ok: boolean
  checks: string[]
  failures: string[]
  account: string
  jobId: string
  /** the claim generations (Fencing-Token) worker A and worker B were given */
  tokens: { a?: number; b?: number }
  /** A's first charge, B's, A's late one */
  charges: { a1?: ChargeReply & ChildEvent; b?: ChargeReply & ChildEvent; a2?: ChargeReply & ChildEvent }
  /** what the broker says of the message at the end */
  broker: Record<string, unknown>
  /** the payments service's own ledger for the account */
  ledger?: any[]
  audit?: any
  auditTable?: string
  leases?: any
  leasesText?: string
  /** the seed key's timeline (`fencegate audit --route payments --key job-<id> --json`) */
  timeline?: any
  timelineText?: string
  dir: string
  configPath: string
}

export type Out = { write(text: string): unknown } | null

/** The narration: numbered steps, indented details, and checks that collect failures in `r`. */
export function narrator(out: Out, r: BrokerRunResult) {
  let n = 0
  const say = (text = '') => { out?.write(`${text}\n`) }
  return {
    say,
    step: (actor: string, action: string) => { say(); say(`[${++n}] ${actor}: ${action}`) },
    expect: (cond: boolean, what: string) => {
      (cond ? r.checks : r.failures).push(what)
      say(`    ${cond ? 'ok' : 'NOT AS EXPECTED'}: ${what}`)
      return cond
    },
    show: (body: unknown) => {
      const text = typeof body === 'string' ? body : JSON.stringify(body)
      if (text) say(`    ${text.length > 400 ? `${text.slice(0, 400)}…` : text}`)
    },
  }
}

export interface Services {
  paymentsUrl: string
  gatewayUrl: string
  adminUrl: string
  gateway: Child
}

/** Starts the payments service and fencegate (config written to `r.configPath`), and waits until they answer. */
export async function startServices(r: BrokerRunResult): Promise<Services> {
  const payments = startChild('payments', distPath('examples/payments/server.js'), ['0'])
  const paymentsUrl = await payments.waitFor('its URL', (l) => /sample payments service on (\S+)/.exec(l)?.[1])
  writeFileSync(r.configPath, brokerGatewayConfig(r.dir, paymentsUrl, paymentsRoutes))
  const gateway = startChild('fencegate', distPath('src/cli.js'), ['--config', r.configPath])
  const [gatewayUrl, adminUrl] = await gateway.waitFor('its URL', (l) => {
    const m = /^fencegate \S+ on (\S+) \(admin (\S+?),/.exec(l)
    return m ? [m[1], m[2]] as const : undefined
  }, 15_000)
  const ready = await call('GET', `${adminUrl}/readyz`)
  if (ready.status !== 200) throw new Error(`fencegate /readyz answered ${ready.status}: ${ready.text}`)
  return { paymentsUrl, gatewayUrl, adminUrl, gateway }
}

/** Reads the account's ledger from the payments service itself and checks it holds one charge, A's. */
export async function checkLedger(s: Services, r: BrokerRunResult, n: ReturnType<typeof narrator>): Promise<void> {
  const ledger = await call('GET', `${s.paymentsUrl}/accounts/${encodeURIComponent(r.account)}/charges`)
  r.ledger = ledger.json?.charges
  n.step('Payments', `the ledger of ${r.account} (read from the service itself, not through the gateway)`)
  n.show(ledger.text)
  const count = Array.isArray(r.ledger) ? r.ledger.length : -1
  n.expect(count === 1, `exactly one charge in the ledger (found ${count})`)
  if (count >= 1) n.expect(r.ledger![0].fencingToken === String(r.tokens.a) && r.ledger![0].idempotencyKey === `job-${r.jobId}`, `the charge is A's: token ${r.tokens.a}, key job-${r.jobId}`)
}

/**
 * Stops the gateway (it writes its queued attempt-log entries), then prints `fencegate audit`,
 * `fencegate leases` (with the broker's settings) and, last, the key's timeline; checks that the
 * timeline reads A forwarded, B replayed, A refused.
 */
export async function readAttemptLog(s: Services, r: BrokerRunResult, n: ReturnType<typeof narrator>): Promise<void> {
  await s.gateway.stop(5000)
  const config = r.configPath
  const [json, table] = await Promise.all([fencegateCli(['audit', '--config', config, '--json']), fencegateCli(['audit', '--config', config])])
  if (json.code !== 0) throw new Error(`fencegate audit --json exited ${json.code}: ${json.stderr}`)
  r.audit = JSON.parse(json.stdout)
  r.auditTable = table.stdout
  const route = r.audit?.routes?.find((x: any) => x.route === 'payments')
  n.step('fencegate audit', `fencegate audit --config ${config}   (gateway stopped; the attempt log is in the store)`)
  n.expect(route?.forwarded === 1 && route?.replayed === 1 && route?.stale === 1, `route payments: forwarded ${route?.forwarded}, replayed ${route?.replayed}, stale ${route?.stale} (expected 1, 1, 1)`)
  n.say()
  n.say(table.code === 0 ? table.stdout.trimEnd() : `(fencegate audit exited ${table.code}: ${table.stderr.trim()})`)

  const [leasesJson, leasesText] = await Promise.all([fencegateCli(['leases', '--config', config, '--json', '--route', 'payments']), fencegateCli(['leases', '--config', config, '--route', 'payments'])])
  if (leasesJson.code !== 0) throw new Error(`fencegate leases --json exited ${leasesJson.code}: ${leasesJson.stderr}`)
  r.leases = JSON.parse(leasesJson.stdout)
  r.leasesText = leasesText.stdout
  const lr = r.leases?.routes?.[0]
  n.step('fencegate leases', `fencegate leases --config ${config} --route payments   (effects, generations, lateness, advice, and the advice in each broker's words)`)
  n.expect(lr?.generations?.total === 2 && lr?.generations?.handovers === 1, `the gateway saw the broker's two generations of job:${r.jobId}, one handover (saw ${lr?.generations?.total}, ${lr?.generations?.handovers})`)
  n.say()
  n.say(leasesText.code === 0 ? leasesText.stdout.trimEnd() : `(fencegate leases exited ${leasesText.code}: ${leasesText.stderr.trim()})`)

  const keyArgs = ['audit', '--config', config, '--route', 'payments', '--key', `job-${r.jobId}`]
  const [tlJson, tlText] = await Promise.all([fencegateCli([...keyArgs, '--json']), fencegateCli(keyArgs)])
  if (tlJson.code !== 0) throw new Error(`fencegate audit --key job-${r.jobId} --json exited ${tlJson.code}: ${tlJson.stderr}`)
  r.timeline = JSON.parse(tlJson.stdout)
  r.timelineText = tlText.stdout
  const seen = (r.timeline?.entries ?? []).map((e: any) => `${e.token} ${e.outcome} ${e.status}`)
  const { a, b } = r.tokens
  n.step('fencegate audit --key', `fencegate audit --config ${config} --route payments --key job-${r.jobId}   (every attempt on the key, oldest first)`)
  n.expect(JSON.stringify(seen) === JSON.stringify([`${a} forwarded 201`, `${b} replayed 201`, `${a} stale 412`]),
    `the timeline reads A ${a} forwarded 201, B ${b} replayed 201, A ${a} refused 412 (found: ${seen.join(', ')})`)
  n.say()
  n.say(tlText.code === 0 ? tlText.stdout.trimEnd() : `(fencegate audit --key exited ${tlText.code}: ${tlText.stderr.trim()})`)
}

/** A fresh result for a run in `dir`. */
export function newResult(dir: string, run: string, jobId: string): BrokerRunResult {
  return { ok: false, checks: [], failures: [], account: `acct-${run}`, jobId, tokens: {}, charges: {}, broker: {}, dir, configPath: join(dir, 'fencegate.yaml') }
}
