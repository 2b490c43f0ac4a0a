/**
 * bench/run.ts's request streams per scenario: each scenario's route, the stale accounts primed
 * with a high token, and the replayed request primed before a replay run.
 */
import autocannon from 'autocannon'
import { BODY, BASE_HEADERS, runTag, nextKey, nextToken, uniqueRequests } from './lib.js'
import { CONNECTIONS, type Scenario } from './run-settings.js'

// ------------------------------------------------------------------------------ scenarios


let staleSeq = 0

/** The first path segment of each scenario's route in the gateway config (startGateway). */
export const ROUTE_PREFIX: Record<Scenario, string> = { unique: 'accounts', replay: 'accounts', stale: 'stale', fencing: 'fenced', idempotency: 'keyed', plain: 'plain' }

/** `unique`, `fencing` and `idempotency`: lib's unique stream on the scenario's route, with only its checks' headers. */
export const scenarioRequests = (scenario: 'unique' | 'fencing' | 'idempotency' | 'plain') =>
  uniqueRequests({ prefix: ROUTE_PREFIX[scenario], key: scenario !== 'fencing' && scenario !== 'plain', token: scenario !== 'idempotency' && scenario !== 'plain' })

/** far above any token the run sends (nextToken), below the largest fencegate accepts (2^63 - 1) */
const STALE_HIGH = '9000000000000000000'

/**
 * Before a stale run: one account per connection, each written once with STALE_HIGH (201), then
 * one lower token must come back 412 stale-fencing-token. New accounts every run. The run then
 * sends `uniqueRequests({ paths })` to them: new keys and the next tokens, all still lower, so
 * fencing answers 412 before the idempotency claim and the upstream (the warm-up reuses them).
 */
export async function primeStale(url: string): Promise<string[]> {
  const batch = ++staleSeq
  const paths = Array.from({ length: CONNECTIONS }, (_, i) => `/${ROUTE_PREFIX.stale}/stale-${runTag}-${batch}-${i}/transfers`)
  await Promise.all(paths.map(async (path) => {
    const r = await fetch(url + path, { method: 'POST', headers: { ...BASE_HEADERS, 'idempotency-key': nextKey(), 'fencing-token': STALE_HIGH }, body: BODY })
    const text = await r.text()
    if (r.status !== 201) throw new Error(`stale: priming ${path} answered ${r.status}: ${text}`)
  }))
  const r = await fetch(url + paths[0], { method: 'POST', headers: { ...BASE_HEADERS, 'idempotency-key': nextKey(), 'fencing-token': nextToken() }, body: BODY })
  const text = await r.text()
  if (r.status !== 412 || !text.includes('stale-fencing-token')) throw new Error(`stale: a lower token answered ${r.status}, expected 412 stale-fencing-token: ${text}`)
  return paths
}

/**
 * `replay`: the same request every time. Rebuilt per request like `unique` (same load-generator
 * cost), but with identical bytes.
 */
export function replayRequests(headers: Record<string, string>, path: string): Pick<autocannon.Options, 'requests'> {
  return {
    requests: [{ method: 'POST', path, body: BODY, setupRequest: (req) => ({ ...req, headers: { ...headers } }) }],
  }
}

/** The first call of a replay run: stored (201), then a second one must come back replayed. */
export async function primeReplay(url: string): Promise<{ headers: Record<string, string>; path: string }> {
  const path = `/accounts/replay-${runTag}/transfers`
  const headers = { ...BASE_HEADERS, 'idempotency-key': nextKey('replay'), 'fencing-token': nextToken() }
  const first = await fetch(url + path, { method: 'POST', headers, body: BODY })
  const firstBody = await first.text()
  if (first.status !== 201) throw new Error(`replay: first call answered ${first.status}: ${firstBody}`)
  const again = await fetch(url + path, { method: 'POST', headers, body: BODY })
  await again.arrayBuffer()
  if (again.status !== 201 || again.headers.get('idempotent-replayed') !== 'true') {
    throw new Error(`replay: second call answered ${again.status}, idempotent-replayed=${again.headers.get('idempotent-replayed')}`)
  }
  return { headers, path }
}
