/**
 * `idempotency()`: deduplicates requests by idempotency key (contract §4,
 * draft-ietf-httpapi-idempotency-key-header §2, Stripe's semantics where it is silent).
 * The first request claims the key atomically (in-flight, with a lease), is forwarded, and its
 * response is stored before the client sees it; repeats with the same fingerprint get that
 * response replayed byte for byte and the upstream is not called.
 */
import { randomUUID } from 'node:crypto'
import { setTimeout as sleep } from 'node:timers/promises'
import type { Context, MiddlewareHandler } from 'hono'
import { RESPONSE_ALREADY_SENT } from '@hono/node-server/utils/response'
import type { Exchange, GatewayEnv } from '../context.js'
import { sha256hex, type CompiledRoute } from '../route.js'
import type { Metrics } from '../telemetry/metrics.js'
import type { Logger } from '../log.js'
import type { ClaimRequest, ClaimResult, RecordKey, Store, StoredResponse } from '../store/types.js'
import { settleFence } from '../fencing/index.js'
import { Problem } from '../problems.js'
import { storeProblem } from '../store/problem.js'
import { readBody } from '../body.js'
import { requestTemplateSource } from '../template-source.js'
import { flat, VIA } from '../forward/headers.js'
import { parseIdempotencyKey } from './key.js'
import { fingerprint } from './fingerprint.js'
import { LeaseKeeper, type KeptLease } from './lease.js'
import { auditKeyHash } from '../audit/entry.js'

/** Upstream statuses that mean "not done, try again": the claim is released, not stored. */
export const RELEASE_STATUSES: ReadonlySet<number> = new Set([429, 502, 503, 504])

/** A scope that cannot be filled: refused before fencing's handed-over check is made. */
class ScopeRefused extends Problem {}

/**
 * @example
 * app.post('/accounts/:account/*', fencing(...), idempotency(route, store, metrics, log), forward(...))
 * @throws Problem 400 idempotency-key-required / -malformed, 413 body-too-large,
 *   422 idempotency-key-reused, 409 request-in-flight (with Retry-After) / outcome-unknown /
 *   response-not-stored, 503 store-unavailable
 */
export function idempotency(route: CompiledRoute, store: Store, metrics: Metrics, log: Logger): MiddlewareHandler<GatewayEnv> {
  const i = route.idempotency
  if (!i) return async function idempotencyOff(_c, next) { await next() }
  const label = { route: route.name }
  const maxBody = route.config.maxRequestBytes
  const waitMs = route.config.upstream.timeout
  const count = (result: string) => metrics.idempotency.inc({ route: route.name, result })
  const leases = new LeaseKeeper(store, i.lease, log, route.name)

  // `count` counts a result and notes it on the request (c.var idempotencyResult, for traces)
  const exchange = (key: RecordKey, claimId: string, lease: KeptLease, requestId: string, count: (result: string) => void): Exchange => ({
    captureBytes: i.maxResponseBytes,
    async onResponse(res) {
      lease.stop() // the record leaves in_flight now
      try {
        if (RELEASE_STATUSES.has(res.status)) {
          count('released')
          await store.release(key, claimId)
        } else if (res.body === undefined) {
          count('not_stored')
          await store.finish(key, claimId, { kind: 'not_stored', status: res.status }, i.ttl, Date.now())
        } else {
          count('stored')
          await store.finish(key, claimId, { kind: 'completed', response: { status: res.status, headers: res.headers, body: res.body } }, i.ttl, Date.now())
        }
      } catch (e) {
        // The effect happened; the client still gets its response. The record stays in flight
        // until its lease ends and then counts as an unknown outcome (reason crash).
        log.error('idempotency record not written after the upstream answered', { route: route.name, requestId, keyHash: auditKeyHash(key.scope, key.key), error: (e as Error).message })
      }
    },
    async onFailure(failure) {
      lease.stop()
      try {
        if (!failure.sent) {
          count('released')
          await store.release(key, claimId)
        } else {
          await store.finish(key, claimId, { kind: 'unknown', reason: failure.reason }, i.ttl, Date.now())
        }
      } catch (e) {
        log.error('idempotency record not updated after an upstream failure', { route: route.name, requestId, keyHash: auditKeyHash(key.scope, key.key), error: (e as Error).message })
      }
    },
  })

  /**
   * Reads what the claim needs from the request: its record key and fingerprint (the body is
   * read, up to maxRequestBytes), or undefined when this request makes no claim.
   * @throws Problem 400 (key missing, malformed or unscoped), 413
   */
  const prepare = async (c: Context<GatewayEnv>): Promise<{ recordKey: RecordKey; fp: string } | undefined> => {
    const incoming = c.env.incoming
    if (!i.methods.has(incoming.method!)) return undefined
    const raw = incoming.headers[i.keyHeader]
    if (raw === undefined) {
      if (!i.required) return undefined
      throw new Problem('idempotency-key-required', `This route requires an ${route.config.idempotency!.keyHeader} header naming the operation, so a retry cannot apply it twice.`)
    }
    const key = parseIdempotencyKey(Array.isArray(raw) ? raw.join(', ') : raw)
    if (key === undefined) {
      throw new Problem('idempotency-key-malformed', `${route.config.idempotency!.keyHeader} must be one value of 1 to 255 visible ASCII characters, bare or as a quoted sf-string.`)
    }
    let scope = ''
    if (!i.scopeIsRoute) {
      const filled = i.scope(requestTemplateSource(c))
      // missing: hashing "" would put every such request in one shared key space; ambiguous: the
      // upstream could take the request for another owner's. Refused before the body is read
      // and before fencing's check is made (ScopeRefused): nothing changes for this request.
      if (typeof filled !== 'string') {
        throw new ScopeRefused('idempotency-key-malformed', filled.unfilled === 'missing'
          ? `This route scopes idempotency keys by "${route.config.idempotency!.scope}", which this request does not carry: ${filled.detail}.`
          : `This route scopes idempotency keys by "${route.config.idempotency!.scope}", which this request gives ambiguously: ${filled.detail}. Nothing was forwarded.`)
      }
      scope = sha256hex(filled)
    }
    const body = await readBody(incoming, maxBody)
    c.set('body', body)
    const fp = fingerprint(incoming.method!, incoming.url!, incoming.headers['content-type'], body)
    return { recordKey: { route: route.name, scope, key }, fp }
  }

  return async function idempotency(c, next) {
    // fencing's check, left for this middleware to make with the claim (one store call); made
    // on its own first whenever there is no claim, so a stale token is still refused before
    // any idempotency error (fencing comes first)
    const check = c.get('pendingFence')
    let prepared
    try {
      prepared = await prepare(c)
    } catch (e) {
      if (!(e instanceof ScopeRefused)) await settleFence(check, store)
      throw e
    }
    if (!prepared) { await settleFence(check, store); return next() }
    const { recordKey, fp } = prepared
    c.set('idempotencyRecord', recordKey)
    c.set('fingerprint', fp)
    const claimId = randomUUID()
    const claimRequest: ClaimRequest = { fingerprint: fp, claimId, leaseMs: i.lease, ttlMs: i.ttl, retryUnknown: i.unknownOutcome === 'retry' }
    const deadline = Date.now() + waitMs
    for (let pause = 10; ; pause = Math.min(pause * 2, 250)) {
      let result: ClaimResult
      if (check && !check.settled) {
        let admitted
        try {
          admitted = await store.admit(check, recordKey, claimRequest, Date.now())
        } catch (e) {
          throw storeProblem(e)
        }
        check.settle(admitted.fence) // 412 when stale: the key was left untouched
        result = admitted.claim!
      } else {
        try {
          result = await store.claim(recordKey, claimRequest, Date.now())
        } catch (e) {
          throw storeProblem(e)
        }
      }
      if ('abandoned' in result && result.abandoned) {
        metrics.unknownOutcomes.inc({ route: route.name, reason: 'crash' })
        c.set('abandoned', true)
        log.warn('found an in-flight record past its lease: its holder crashed or hung, the outcome is unknown', { route: route.name, requestId: c.get('requestId'), keyHash: auditKeyHash(recordKey.scope, recordKey.key) })
      }
      switch (result.kind) {
        case 'claimed':
          if (result.after) {
            metrics.duplicateForwards.inc(label)
            c.set('duplicateForward', true)
            log.warn('key forwarded again after an unknown outcome: the effect may happen twice', { route: route.name, after: result.after, requestId: c.get('requestId'), keyHash: auditKeyHash(recordKey.scope, recordKey.key) })
          }
          // the lease is renewed while the exchange lives, whichever way it ends (./lease.ts)
          const kept = leases.keep(recordKey, claimId, Date.now())
          c.set('exchange', exchange(recordKey, claimId, kept, c.get('requestId'), (r) => { count(r); c.set('idempotencyResult', r) }))
          try {
            await next()
          } finally {
            kept.stop()
          }
          return
        case 'completed':
          count('replayed')
          c.set('idempotencyResult', 'replayed')
          c.set('outcome', 'replayed')
          return replay(c.env.outgoing, result.response, route.requestIdHeader, c.get('requestId'))
        case 'not_stored':
          // status 0: an operator declared the unknown outcome completed (`fencegate resolve --as completed`)
          if (result.status === 0) throw new Problem('response-not-stored', 'An operator recorded that the first request with this key took effect (fencegate resolve --as completed) after its outcome was unknown; there is no response to replay, and it is not applied again.', { resolvedBy: 'operator' })
          throw new Problem('response-not-stored', `The first request with this key completed with status ${result.status}, but its response was larger than this route stores (idempotency.maxResponseBytes); it was not applied again.`, { originalStatus: result.status })
        case 'mismatch':
          count('key_reused')
          throw new Problem('idempotency-key-reused', 'This idempotency key was already used with a different request (method, path, content type or body).')
        case 'unknown':
          throw new Problem('outcome-unknown', `The first request with this key was sent upstream and no complete response came back (${result.reason}); it may or may not have taken effect. It is not sent again (unknownOutcome: reject) until an operator resolves it or the key expires.`, { reason: result.reason })
        case 'in_flight':
          if (i.inFlight === 'wait' && Date.now() + pause < deadline) { await sleep(pause); continue }
          count('in_flight')
          throw new Problem('request-in-flight', 'A request with this idempotency key is being processed; retry after it completes.', {}, { 'retry-after': '1' })
      }
    }
  }
}

/** Writes a stored response byte for byte; the request id is this request's, not the first one's. */
function replay(outgoing: GatewayEnv['Bindings']['outgoing'], res: StoredResponse, idHeader: string, requestId: string): Response {
  outgoing.writeHead(res.status, flat(res.headers, ['via', VIA, 'idempotent-replayed', 'true', idHeader, requestId], idHeader))
  outgoing.end(res.body)
  return RESPONSE_ALREADY_SENT
}
