/**
 * The sample payments service (contract §1). Deliberately naive: it applies every charge it
 * receives, so whatever duplicate or stale write gets past the gateway shows up in its ledger.
 *
 *   POST /accounts/{account}/charges  {"amount": <integer minor units>, "currency": "eur"}
 *     → 201 {"id", "account", "amount", "currency", "fencingToken", "idempotencyKey"}
 *   GET  /accounts/{account}/charges  → 200 {"charges": [...]} every effect applied, in order
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

const CHARGES = /^\/accounts\/([^/?]+)\/charges(?:\?.*)?$/

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
  const server = http.createServer(async (req, res) => {
    const m = CHARGES.exec(req.url ?? '')
    if (!m) return problem(res, 404, 'try /accounts/{account}/charges')
    let account: string
    try {
      account = decodeURIComponent(m[1])
    } catch {
      return problem(res, 400, 'the account in the path is not valid percent-encoding')
    }
    if (req.method === 'GET') return send(res, 200, { charges: ledger.get(account) ?? [] })
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
    send(res, 201, charge)
  })
  await new Promise<void>((resolve, reject) => { server.once('error', reject); server.listen(port, host, resolve) })
  const a = server.address() as AddressInfo
  return {
    url: `http://${a.address}:${a.port}`,
    server,
    close: () => new Promise((r) => { server.closeAllConnections(); server.close(() => r()) }),
  }
}

if (isMain(import.meta.url)) {
  const { url } = await startPayments(Number(process.argv[2] ?? 9090))
  process.stdout.write(`sample payments service on ${url}\n`)
}
