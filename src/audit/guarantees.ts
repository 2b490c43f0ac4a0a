/**
 * The claim of a route in words (contract §8): what fencegate guarantees on it, under which
 * assumptions, and what it does not guarantee, generated from the route's config and the
 * store's. Plain sentences a reviewer can check against the config; never empty for a route
 * with fencing or idempotency.
 */
import type { Config, RouteConfig } from '../config/schema.js'
import { formatDuration, formatSize } from '../config/units.js'
import type { DoctorReport } from '../store/index.js'
import { human } from './human.js'

export interface Claim {
  guarantees: string[]
  assumptions: string[]
  notGuaranteed: string[]
}

const list = (items: readonly string[], and = 'and'): string =>
  items.length <= 1 ? items.join('') : `${items.slice(0, -1).join(', ')} ${and} ${items[items.length - 1]}`

/** The sentences about the store every fenced or deduplicated route relies on. */
function storeSentences(store: Config['store'], out: Claim): void {
  switch (store.kind) {
    case 'memory':
      out.notGuaranteed.push('The memory store is not durable: a restart of the gateway forgets every highest token and idempotency record, so afterwards a stale token or a repeated key can get through; and it is not shared, so a second gateway process would check against its own state.')
      break
    case 'sqlite':
      out.assumptions.push(`The SQLite store (${store.path}) keeps highest tokens and records across restarts and crashes of the process${store.synchronous === 'full' ? ' and power losses (synchronous: full)' : '; a power loss can lose the last commits (synchronous: normal; set full to survive it)'}.`)
      out.assumptions.push('Every gateway process enforcing this route runs on the one host that holds the SQLite file and uses that file; a gateway on another host would keep state of its own and let stale tokens and repeated keys through.')
      break
    case 'redis':
      out.assumptions.push(`Redis keeps highest tokens and records only as durably as it is configured to: without persistence (AOF) a Redis restart loses them, and replication is asynchronous, so a failover can lose the writes of the last moments. fencegate detects a store that came back empty through its epoch marker, and a partial loss any running gateway had seen: every write advances a write sequence${store.cluster ? ' (one per slot on a Redis Cluster)' : ''}, and a store below the highest a gateway saw refuses the write before changing anything${store.replicas === 0 ? (store.cluster ? '; a replica promoted behind the replication offset its master had counts as a loss too' : '; a replica promoted in place of the primary counts as a loss too (its replication id)') : ''}. Not detected: a loss of writes no running gateway had seen answered.`)
      out.assumptions.push('Every gateway replica enforcing this route uses the same Redis and key prefix.')
      if (store.cluster) out.assumptions.push('The store is a Redis Cluster: a slot whose master is down (until a replica takes over) refuses every request that needs it with 503; a master that comes back without its data is detected through the copies of the epoch marker in every block of slots.')
      if (store.replicas > 0) {
        out.guarantees.push(`A highest token or record the request relies on is acknowledged by ${store.replicas} Redis replica${store.replicas === 1 ? '' : 's'} (WAIT) before the request is forwarded; when fewer acknowledge in time the request is refused with 503.`)
        out.notGuaranteed.push('WAIT is not consensus: Redis may still promote a replica that had not received an acknowledged write (for instance one that was not among those that acknowledged it), so a failover can still, more rarely, lose a highest token or a record.')
      }
      break
    case 'postgres':
      out.assumptions.push(`PostgreSQL has committed each highest token and record before the request is forwarded; a failover to an asynchronous standby can lose the last commits, so only synchronous replication (or no failover) keeps that promise through a failover.${store.replicas > 0 ? ` Commits wait for ${store.replicas} synchronous standby${store.replicas === 1 ? '' : 's'} (store.replicas): while fewer are configured, fenced and idempotent requests are refused with 503.` : ''}`)
      out.assumptions.push(`fencegate detects a partial loss any running gateway had seen: every write advances a write sequence in the same transaction, and a database below the highest a gateway saw refuses the write before changing anything${store.replicas === 0 ? '; a promotion (a new timeline) counts as a loss too, since store.replicas is 0' : ''}; either is state loss (503 store-state-lost on every gateway until accept-loss). Not detected: a loss of commits no running gateway had seen answered${store.replicas > 0 ? ', when a promoted standby was not synchronous after all' : ''}.`)
      out.assumptions.push('Every gateway replica enforcing this route uses the same PostgreSQL database and schema.')
      break
  }
}

/**
 * The claim of one route.
 * @param measured sentences about the store's real settings (`fencegate doctor`'s findings,
 *   `claimSentences` below), added to the assumptions when the report was built
 *   with access to the store
 */
export function claimFor(route: RouteConfig, store: Config['store'], measured: readonly string[] = []): Claim {
  const out: Claim = { guarantees: [], assumptions: [], notGuaranteed: [] }
  const f = route.fencing
  let i = route.idempotency
  if (!f && !i) {
    out.notGuaranteed.push('Neither fencing nor idempotency is configured on this route: every request is forwarded as it arrives, so retries can apply an effect twice and stale lease holders are not stopped.')
    return out
  }
  const methods = route.match.methods ? `${list(route.match.methods)} requests` : 'requests'

  if (f) {
    const header = f.tokenHeader
    out.guarantees.push(`Fencing is on: of the ${methods} matching ${route.match.path}, one whose ${header} is lower than the highest token already accepted for its resource ("${f.resource}") is refused with 412 before anything is forwarded; an equal or higher token is accepted and becomes the highest, atomically with the check.`)
    if (f.required) out.guarantees.push(`A request without a ${header} header is refused with 428 (fencing.required: true).`)
    else out.notGuaranteed.push(`A request without a ${header} header is forwarded unfenced (fencing.required: false): nothing stops a stale writer that leaves the header out.`)
    out.guarantees.push('Tokens are compared as exact integers; no clock is involved in fencing.')
    out.guarantees.push(`The token is forwarded unchanged in ${header}, so the upstream can check it too.`)
    const serialize = (f as { serialize?: boolean | 'store' }).serialize
    if (serialize === 'store') {
      out.guarantees.push('Across every gateway sharing the store, a newer-token request for a resource is held until no older token of it is registered in the store (fencing.serialize: store): each forwarded request is registered after its fence and before it is sent, and one that a newer token overtook in between is refused with 412, so no older-token request reaches the upstream after a newer one through any of these gateways; one whose outcome is unknown stays registered until its lease ends (or one more upstream timeout).')
      out.assumptions.push('A gateway that stops (crash, kill -9, a partition from the store) leaves its registrations until their deadlines — the request\'s own bound: its wait, one upstream timeout and the hold of an unknown outcome — and the upstream applies any write it received before then, or never. Deadlines are kept and compared on the store\'s clock (SQLite: the one host\'s), so the gateways\' clocks need not agree. Every route that writes the resource uses fencing.serialize: store.')
    } else if (serialize) {
      out.guarantees.push('Within one gateway process, a newer-token request for a resource is held until the older ones sent for it have ended (fencing.serialize: true), so no older-token request reaches the upstream after a newer one from this process; one whose outcome is unknown holds the resource until its lease ends.')
      out.assumptions.push('Across several gateway replicas, fencing.serialize cannot order requests for one resource: either route each resource to one replica (sticky routing) or have the upstream check the forwarded token.')
    } else {
      out.notGuaranteed.push('The check-to-apply window: a request accepted with token N can still be on its way when token N+1 is accepted and applied, and then reach the upstream after it. The gateway detects it (overtaken) but does not prevent it (fencing.serialize: false).')
    }
    out.assumptions.push(`The upstream closes the check-to-apply window itself by refusing a write whose forwarded ${header} is lower than the highest it has applied for the resource; otherwise an older write that was in flight can land after a newer one.`)
    out.assumptions.push(`Every writer of the resource goes through this gateway: a write that reaches the upstream by another path is not fenced.`)
  }

  if (i) {
    const header = i.keyHeader
    // the methods that are both routed here and deduplicated
    const methodsHere = route.match.methods ? i.methods.filter((m) => route.match.methods!.includes(m)) : i.methods
    if (!methodsHere.length) {
      out.notGuaranteed.push(`No request of this route is deduplicated: idempotency.methods (${i.methods.join(', ')}) names none of the route's methods (${route.match.methods!.join(', ')}).`)
      storeSentences(store, out)
      out.assumptions.push(...measured)
      return out
    }
    i = { ...i, methods: methodsHere }
    const keyed = `${list(i.methods)} requests with an ${header}`
    const evicting = store.kind === 'memory' && store.acceptRisks.includes('maxRecords')
    const kept = evicting
      ? `for ${formatDuration(i.ttl)} (idempotency.ttl) or the newest ${store.maxRecords} records (store.maxRecords), whichever is shorter`
      : `for ${formatDuration(i.ttl)} after it completed (idempotency.ttl)`
    out.guarantees.push(`Idempotency is on: for ${keyed}, at most one attempt per key${i.scope ? ` and scope ("${i.scope}")` : ''} is forwarded at a time, and a completed response is stored and replayed byte for byte, without calling the upstream, ${kept}.`)
    if (evicting) out.notGuaranteed.push(`When the memory store holds ${store.maxRecords} records (store.maxRecords), the oldest completed one is dropped before its ttl (store.acceptRisks: maxRecords): a retry of its key is forwarded again, a second effect, counted in fencegate_idempotency_evicted_total.`)
    else if (store.kind === 'memory') out.guarantees.push(`No record is forgotten before its ttl to make room: when the memory store holds ${store.maxRecords} unexpired records (store.maxRecords), a request with a new key is refused with 503 and not forwarded (counted in fencegate_store_full_total).`)
    out.guarantees.push(`The same key with a different method, path, query, content type or body is refused with 422 and not forwarded.`)
    out.guarantees.push(i.inFlight === 'wait'
      ? 'A repeat while the first attempt is in flight waits for it and gets its response (inFlight: wait).'
      : 'A repeat while the first attempt is in flight is refused with 409 and Retry-After (inFlight: reject).')
    if (i.required) out.guarantees.push(`A ${list(i.methods, 'or')} request without an ${header} is refused with 400 (idempotency.required: true).`)
    else out.notGuaranteed.push(`A ${list(i.methods, 'or')} request without an ${header} is forwarded every time it arrives (idempotency.required: false): its retries are not deduplicated.`)
    out.guarantees.push(`Responses larger than ${formatSize(i.maxResponseBytes)} (idempotency.maxResponseBytes) are not stored: a repeat gets 409 response-not-stored, never a second forward.`)
    if (i.unknownOutcome === 'reject') {
      out.guarantees.push(`At most once per key: when an attempt was sent and no complete response came back (timeout, reset, client gone, gateway crash), the key answers 409 outcome-unknown and is not forwarded again until an operator runs fencegate resolve or ${formatDuration(i.ttl)} pass (unknownOutcome: reject).`)
      out.notGuaranteed.push('At least once: an attempt whose outcome is unknown may never have taken effect; it is not retried by the gateway, and someone has to check the upstream and resolve the key (see unknownOutcomes.unresolved).')
    } else {
      out.guarantees.push('At least once per key: after an attempt whose outcome is unknown, the next attempt with the key is forwarded again with the same key (unknownOutcome: retry).')
      out.notGuaranteed.push(`Exactly once: a key forwarded again after an unknown outcome may take effect twice unless the upstream deduplicates by the forwarded ${header}; each such forward is counted in duplicateForwards.`)
    }
    if (i.settle) settleSentences(i.settle, i.ttl, out)
    out.assumptions.push(`An attempt that has not finished within ${formatDuration(i.lease)} (idempotency.lease) is taken as abandoned and its outcome as unknown; the upstream should not still apply a request that old. Leases are measured on ${store.kind === 'redis' || store.kind === 'postgres' ? 'the store\'s clock (Redis TIME, PostgreSQL clock_timestamp(), read inside the script or function that decides), so replicas sharing the store need not agree on the time; the store\'s own clock must not jump' : store.kind === 'sqlite' ? 'the clock of the one host every gateway sharing the file runs on' : 'this process\'s clock'}.`)
    out.notGuaranteed.push(`After ${formatDuration(i.ttl)} (idempotency.ttl) a key is forgotten: a retry later than that is forwarded as a new request.`)
    const deduplicated: readonly string[] = i.methods
    const others = ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS'].filter((m) => !deduplicated.includes(m) && (!route.match.methods || route.match.methods.includes(m as never)))
    if (others.length) out.notGuaranteed.push(`${list(others)} requests are not deduplicated (idempotency.methods: ${route.idempotency!.methods.join(', ')}).`)
  }
  storeSentences(store, out)
  out.assumptions.push(...measured)
  return out
}

/** The sentences of `idempotency.settle` (contract §4a): the probe, and the assumption its answers rest on. */
function settleSentences(st: NonNullable<NonNullable<RouteConfig['idempotency']>['settle']>, ttl: number, out: Claim): void {
  const after = formatDuration(st.after)
  out.guarantees.push(`Unknown outcomes are settled by asking the resource (idempotency.settle): ${after} after an outcome became unknown, and then backing off up to every ${formatDuration(st.every)} for ${formatDuration(st.for ?? ttl)}, one gateway sharing the store sends ${st.probe.method} ${st.probe.path}; ${list(st.probe.applied.map(String), 'or')} settles it as applied (the probe's answer is stored and replayed with Fencegate-Settled: probe)${st.probe.notApplied.length ? `, ${list(st.probe.notApplied.map(String), 'or')} as not applied (the key's next attempt is forwarded as a first attempt)` : ''}; any other answer leaves it unknown. A retry once ${after} passed probes at once.`)
  out.assumptions.push(`The resource applies nothing of an abandoned attempt later than ${human(st.after)} after the gateway gave up (idempotency.settle.after: ${after}), and its lookup answers truthfully from what it applied: a probe that says "not applied" before a late write lands would let the key's next attempt apply it a second time.`)
  out.notGuaranteed.push(`An unknown outcome the probes do not settle within ${formatDuration(st.for ?? ttl)} (idempotency.settle.for), or whose lookup keeps giving other answers, waits for an operator (fencegate resolve).`)
}

/** The claim's sentences from the store's settings (`fencegate doctor`'s findings): its `measured` assumptions. */
export function claimSentences(r: DoctorReport): string[] {
  return r.findings.map((f) => `Measured on the live ${r.store} store (${f.status}: ${f.setting}${f.nodes && f.nodes.length > 1 ? `, on ${f.nodes.length} masters` : ''}): ${f.consequence}`)
}
