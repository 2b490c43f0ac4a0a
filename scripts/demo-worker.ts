/**
 * One worker of `npm run demo`'s lease story (./demo.ts), run as its own process so that it can
 * be frozen with SIGSTOP: it takes the account's lease from the gateway with fencegate/client's
 * `withLease`, charges the account under it, and prints one JSON line per answer it got with the
 * client's decision (`decide`): `{"event":"answer","call":"acquire"|"renew"|"release"|"charge",
 * "method","path","token","status","replayed","decision":{action,case,problem,retryAfterMs},"body"}`,
 * plus `ready`, `waiting`, the lease's events (`lease`) and `done`.
 *
 * Environment:
 *   DEMO_GATEWAY       the gateway, e.g. http://127.0.0.1:8080
 *   DEMO_LEASE_TOKEN   leases.token, when the gateway has one
 *   DEMO_ACCOUNT       the account to charge (the lease is on account:<it>)
 *   DEMO_KEY           the job's Idempotency-Key
 *   DEMO_HOLDER        the lease's holder, e.g. worker-a
 *   DEMO_TTL           the lease's ttl, e.g. 5s
 *   DEMO_START_ON      a signal to wait for before asking for the lease (unset: at once)
 *   DEMO_RETRY_ON      a signal to wait for after the charge, then send it again (the late retry)
 */
import { decide, withLease, type Decision, type FetchLike, type Sent } from '../src/client/index.js'

const env = (name: string): string => {
  const v = process.env[name]
  if (!v) { process.stderr.write(`demo-worker: ${name} is not set\n`); process.exit(2) }
  return v
}
const gateway = env('DEMO_GATEWAY')
const account = env('DEMO_ACCOUNT')
const key = env('DEMO_KEY')
const holder = env('DEMO_HOLDER')
const ttl = env('DEMO_TTL')
const startOn = process.env.DEMO_START_ON as NodeJS.Signals | undefined
const retryOn = process.env.DEMO_RETRY_ON as NodeJS.Signals | undefined
const resource = `account:${account}`
const chargesPath = `/accounts/${encodeURIComponent(account)}/charges`
const CHARGE = JSON.stringify({ amount: 1250, currency: 'eur' })

const print = (e: Record<string, unknown>) => process.stdout.write(`${JSON.stringify({ ...e, at: Date.now() })}\n`)
const shown = (d: Decision) => ({ action: d.action, case: d.case, problem: d.problem, retryAfterMs: d.retryAfterMs })
const CALLS: Record<string, string> = { POST: 'acquire', PUT: 'renew', DELETE: 'release', GET: 'read' }

// Every lease call's answer as it arrives, before withLease acts on it; writes are printed from
// lease.send's result, which also covers a write the client cancelled.
const logged: FetchLike = async (input, init = {}) => {
  const url = new URL(String(input))
  const lease = url.pathname.startsWith('/_fencegate/leases/')
  const r = await fetch(input, init)
  if (lease) {
    const text = await r.clone().text()
    let body: unknown = text
    try { body = JSON.parse(text) } catch { /* not JSON */ }
    print({
      event: 'answer', call: CALLS[init.method ?? 'GET'] ?? init.method, method: init.method ?? 'GET', path: url.pathname,
      token: new Headers(init.headers).get('fencing-token') ?? r.headers.get('fencing-token') ?? undefined,
      status: r.status, replayed: false, decision: shown(decide({ status: r.status, headers: r.headers, body })), body: text,
    })
  }
  return r
}

const charge = async (send: (input: string, init: RequestInit) => Promise<Sent>, token: string, call: string) => {
  const s = await send(chargesPath, { method: 'POST', headers: { 'content-type': 'application/json' }, body: CHARGE })
  print({
    event: 'answer', call, method: 'POST', path: chargesPath, token, key, status: s.status, replayed: s.replayed,
    decision: shown(s.decision), body: typeof s.body === 'string' ? s.body : JSON.stringify(s.body),
    ...(s.error !== undefined && { error: (s.error as Error)?.name ?? String(s.error) }),
  })
  return s
}

// a signal listener does not keep the process up by itself: a timer does while it waits
const signal = (name: NodeJS.Signals) => new Promise<void>((resolve) => {
  const up = setInterval(() => {}, 60_000)
  process.once(name, () => { clearInterval(up); resolve() })
})

async function main(): Promise<number> {
  const started = startOn && signal(startOn)
  print({ event: 'ready', holder, pid: process.pid })
  if (started) await started
  await withLease(resource, async (lease) => {
    print({ event: 'working', token: lease.token, ttlMs: lease.ttlMs, renewEveryMs: lease.renewEveryMs })
    await charge(lease.send, lease.token, 'charge')
    if (!retryOn) return
    const retry = signal(retryOn)
    print({ event: 'waiting', for: retryOn })
    await retry
    await charge(lease.send, lease.token, 'late charge')
  }, {
    gateway, holder, ttl, key, authToken: process.env.DEMO_LEASE_TOKEN || undefined, fetch: logged, waitMs: 60_000,
    onEvent: (e) => print({ ...e, event: 'lease', lease: e.event, decision: e.decision && shown(e.decision) }),
  }).then(
    () => print({ event: 'done' }),
    (e: Error) => print({ event: 'done', error: e.name, message: e.message }),
  )
  return 0
}

process.exitCode = await main()
