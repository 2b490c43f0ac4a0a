/**
 * The store floor: the floor proxy (./floor-proxy.ts: node:http in front of one undici Pool)
 * plus the work the contract puts on a fenced, keyed request and nothing else — the body read
 * whole, its SHA-256 fingerprint and the key's hash, one `admit` (fence and claim), the forward,
 * one `finish` with the answer kept, and the attempt entry appended in a batch per turn — made
 * through fencegate's own store classes (src/store/), opened from a gateway config. No routing,
 * no request facts, no problems, no metrics, no access log, no store guard (timeouts, give-backs).
 * A retry of a completed key is answered from the record, as a replay.
 *
 * What fencegate costs above this is its request path; what this costs above the floor is the
 * store's client and engine, the hashing and the attempt log, which any gateway keeping the
 * contract's records in that store pays.
 *
 *   node dist/bench/store-floor.js CONFIG.yaml UPSTREAM_URL PORT
 *
 * Answers POST /<anything>/<account>/... with `Idempotency-Key` and `Fencing-Token`; the resource
 * is `account:<second path segment>`, as in the shared benchmark's config. Prints
 * `listening http://127.0.0.1:PORT` once ready.
 */
import http from 'node:http'
import { createHash, randomUUID } from 'node:crypto'
import { Pool } from 'undici'
import { loadConfig } from '../src/config/load.js'
import { openStore, type AuditEntry } from '../src/store/index.js'
import { HOP_BY_HOP, requestHeaders } from './anchor.js'

const [configFile, upstreamUrl, portArg] = process.argv.slice(2)
if (!configFile || !upstreamUrl) {
  process.stderr.write('usage: store-floor CONFIG.yaml UPSTREAM_URL [PORT]\n')
  process.exit(2)
}
const config = loadConfig(configFile)
const store = await openStore(config.store, config.audit)
const upstream = new URL(upstreamUrl)
const pool = new Pool(upstream.origin, { connections: 128, pipelining: 1, keepAliveTimeout: 4_000 })
const sha = (s: string | Buffer) => createHash('sha256').update(s).digest('hex')
const replica = `store-floor-${process.pid}`

let pending: AuditEntry[] = []
const appendSoon = (e: AuditEntry) => {
  if (pending.push(e) > 1) return
  setImmediate(() => {
    const batch = pending
    pending = []
    store.audit.append(batch).catch(() => {})
  })
}

const server = http.createServer(async (req, res) => {
  const started = performance.now()
  try {
    const chunks: Buffer[] = []
    for await (const c of req) chunks.push(c as Buffer)
    const body = Buffer.concat(chunks)
    const key = String(req.headers['idempotency-key'])
    const token = BigInt(String(req.headers['fencing-token']))
    const resource = `account:${(req.url ?? '/').split('/')[2]}`
    const keyHash = sha(`${resource}\n${key}`)
    const fingerprint = sha(body)
    const recordKey = { route: 'payments', scope: '', key }
    const claimId = randomUUID()
    const entry = (status: number, outcome: string, result: string): AuditEntry => ({
      time: Date.now(), kind: 'attempt', replica, route: 'payments', method: 'POST', resource, token: token.toString(), keyHash, fingerprint,
      outcome, result, status, durationMs: performance.now() - started,
    } as AuditEntry)
    const admitted = await store.admit({ resource, token }, recordKey, { fingerprint, claimId, leaseMs: 30_000, ttlMs: 86_400_000, retryUnknown: false }, Date.now())
    const claim = admitted.claim
    if (claim?.kind === 'completed') {
      const r = claim.response
      res.writeHead(r.status, r.headers.flat())
      res.end(r.body)
      appendSoon(entry(r.status, 'replayed', 'replayed'))
      return
    }
    if (claim?.kind !== 'claimed') throw new Error(`not claimed: ${claim?.kind ?? 'stale'}`)
    const up = await pool.request({ path: req.url ?? '/', method: 'POST', headers: requestHeaders(req.rawHeaders, upstream.host), body })
    const answer = Buffer.from(await up.body.arrayBuffer())
    const headers: [string, string][] = []
    for (const [k, v] of Object.entries(up.headers)) if (!HOP_BY_HOP.has(k) && v !== undefined) headers.push([k, String(v)])
    await store.finish(recordKey, claimId, { kind: 'completed', response: { status: up.statusCode, headers, body: answer } }, 86_400_000, Date.now())
    res.writeHead(up.statusCode, headers.flat())
    res.end(answer)
    appendSoon(entry(up.statusCode, 'forwarded', 'stored'))
  } catch (e) {
    // a request not of the benchmark's shape (no token, say) too: this is no gateway
    if (!res.headersSent) res.writeHead(503, { 'content-type': 'text/plain' })
    res.end(`store-floor: ${(e as Error).message}\n`)
  }
})
server.listen(Number(portArg ?? 0), '127.0.0.1', () => {
  const a = server.address()
  process.stdout.write(`listening http://127.0.0.1:${typeof a === 'object' && a ? a.port : portArg}\n`)
})
const stop = () => { server.close(); void store.close().finally(() => process.exit(0)) }
process.on('SIGTERM', stop)
process.on('SIGINT', stop)
