/**
 * The sample payments service (contract §1). Deliberately naive: it applies every charge it
 * receives, so whatever duplicate or stale write gets past the gateway shows up in its ledger.
 *
 *   POST /accounts/{account}/charges  {"amount": <integer minor units>, "currency": "eur"}
 *     → 201 {"id", "account", "amount", "currency", "fencingToken", "idempotencyKey"}
 *   GET  /accounts/{account}/charges  → 200 {"charges": [...]} every effect applied, in order
 *   GET  /accounts/{account}/charges?idempotencyKey=K
 *     → 200 the charge applied with Idempotency-Key K (the body its POST answered; the first one
 *       if more than one got through), 404 problem when none: the lookup fencegate's
 *       `idempotency.settle` probe asks (contract §4a)
 *
 * To play an upstream that does the work and never answers in time, a POST may carry
 *   Sample-Hang-After-Apply: <milliseconds, 1..600000>
 * the charge is applied at once, then the answer is held back that long (dropped if the caller
 * has gone by then): behind a gateway whose upstream.timeout is shorter, the client gets 504 and
 * the key an unknown outcome whose charge is in the ledger. A value out of range is a 400 and
 * nothing is applied.
 *
 * Run alone: node dist/examples/payments/server.js [PORT]   (default 9090)
 */
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { isMain } from '../is-main.js'

export interface Charge {
  id: string
  account: string
  amount: number
  currency: string
  fencingToken: string | null
  idempotencyKey: string | null
}

const CHARGES = /^\/accounts\/([^/?]+)\/charges(?:\?(.*))?$/
const HANG_HEADER = 'sample-hang-after-apply'
const MAX_HANG_MS = 600_000

function send(res: http.ServerResponse, status: number, body: unknown, type = 'application/json'): void {
  const text = JSON.stringify(body)
  res.writeHead(status, { 'content-type': type, 'content-length': Buffer.byteLength(text) })
  res.end(text)
}

const problem = (res: http.ServerResponse, status: number, detail: string) =>
  send(res, status, { type: 'about:blank', title: http.STATUS_CODES[status], status, detail }, 'application/problem+json')

/** Starts the service on 127.0.0.1:`port` (0: any free port); resolves with its URL and a stop function. */
export async function startPayments(port = 9090, host = '127.0.0.1'): Promise<{ url: string; server: http.Server; close(): Promise<void> }> {
  const ledger = new Map<string, Charge[]>()
  let seq = 0
  // held-back answers, cleared by close() so a hang never keeps the process up
  const hanging = new Set<NodeJS.Timeout>()
  const server = http.createServer(async (req, res) => {
    const m = CHARGES.exec(req.url ?? '')
    if (!m) return problem(res, 404, 'try /accounts/{account}/charges')
    let account: string
    try {
      account = decodeURIComponent(m[1])
    } catch {
      return problem(res, 400, 'the account in the path is not valid percent-encoding')
    }
    if (req.method === 'GET') {
      const key = new URLSearchParams(m[2] ?? '').get('idempotencyKey')
      if (key === null) return send(res, 200, { charges: ledger.get(account) ?? [] })
      const charge = (ledger.get(account) ?? []).find((c) => c.idempotencyKey === key)
      return charge ? send(res, 200, charge) : problem(res, 404, `no charge on this account has idempotency key ${JSON.stringify(key)}`)
    }
    if (req.method !== 'POST') return problem(res, 405, 'GET or POST')
    const chunks: Buffer[] = []
    for await (const c of req) chunks.push(c as Buffer)
    let input: { amount?: unknown; currency?: unknown }
    try {
      input = JSON.parse(Buffer.concat(chunks).toString('utf8'))
    } catch {
      return problem(res, 400, 'the body must be JSON: {"amount": <integer minor units>, "currency": "eur"}')
    }
    if (!Number.isSafeInteger(input.amount) || (input.amount as number) <= 0) return problem(res, 400, 'amount must be a positive integer (minor units)')
    if (typeof input.currency !== 'string' || !/^[a-z]{3}$/.test(input.currency)) return problem(res, 400, 'currency must be a three-letter lower-case code')
    const header = (name: string) => { const v = req.headers[name]; return v === undefined ? null : String(v) }
    const hang = header(HANG_HEADER)
    const hangMs = hang === null ? 0 : /^\d{1,6}$/.test(hang.trim()) ? Number(hang.trim()) : NaN
    if (!(hangMs >= 0 && hangMs <= MAX_HANG_MS) || (hang !== null && hangMs === 0)) {
      return problem(res, 400, `${HANG_HEADER} must be a whole number of milliseconds from 1 to ${MAX_HANG_MS}`)
    }
    const charge: Charge = {
      id: `ch_${++seq}`,
      account,
      amount: input.amount as number,
      currency: input.currency,
      fencingToken: header('fencing-token'),
      idempotencyKey: header('idempotency-key'),
    }
    if (!ledger.has(account)) ledger.set(account, [])
    ledger.get(account)!.push(charge)
    if (hangMs === 0) return send(res, 201, charge)
    const timer = setTimeout(() => {
      hanging.delete(timer)
      if (!res.destroyed) send(res, 201, charge)
    }, hangMs)
    hanging.add(timer)
  })
  await new Promise<void>((resolve, reject) => { server.once('error', reject); server.listen(port, host, resolve) })
  const a = server.address() as AddressInfo
  return {
    url: `http://${a.address}:${a.port}`,
    server,
    close: () => new Promise((r) => {
      for (const t of hanging) clearTimeout(t)
      hanging.clear()
      server.closeAllConnections()
      server.close(() => r())
    }),
  }
}

if (isMain(import.meta.url)) {
  const { url } = await startPayments(Number(process.argv[2] ?? 9090))
  process.stdout.write(`sample payments service on ${url}\n`)
}
