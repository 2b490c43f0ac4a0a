/**
 * `Store.unknowns` in Redis: SCAN the prefix's record keys (COUNT 1000 a step) on every master
 * and read each one's state (pipelined), each master's records against that master's clock.
 * O(records) on the servers, so the gauge reads it at most every 15 s.
 */
import type { Cluster, Redis } from 'ioredis'
import { asReason } from '../replies.js'
import type { UnknownRecord } from '../types.js'
import { masters, type Conn } from './connection.js'
import type { KeyNames } from './keys.js'

/**
 * The records in the unknown state, at most `limit`, only `route`'s when given.
 * @param nowOf the instant a master's records are read against, epoch ms on its clock
 */
export async function scanUnknowns(r: Conn, cluster: boolean, keys: KeyNames, nowOf: (node: Redis | Cluster) => Promise<number>, route: string | undefined, limit: number): Promise<UnknownRecord[]> {
  const match = keys.records(route)
  const out: UnknownRecord[] = []
  const seen = new Set<string>()
  const read = async (names: string[], now: number) => {
    const fresh = names.filter((k) => !seen.has(k))
    for (const k of fresh) seen.add(k)
    if (!fresh.length) return
    const replies = await Promise.all(fresh.map((k) => r.hmget(k, 'state', 'lease', 'exp', 'reason')))
    for (let i = 0; i < fresh.length && out.length < limit; i++) {
      const [state, lease, exp, reason] = replies[i]
      const leaseUntil = Number(lease ?? 0), expiresAt = Number(exp ?? 0)
      if (expiresAt <= now) continue
      const crashed = state === 'in_flight' && leaseUntil <= now
      if (state !== 'unknown' && !crashed) continue
      out.push({ key: keys.recordOf(fresh[i]), reason: crashed ? 'crash' : asReason(reason), leaseUntil, expiresAt })
    }
  }
  for (const node of masters(r, cluster)) {
    const nodeNow = await nowOf(node)
    let cursor = '0'
    do {
      const [next, names] = await node.scan(cursor, 'MATCH', match, 'COUNT', 1000)
      cursor = next
      await read(names, nodeNow)
    } while (cursor !== '0' && out.length < limit)
    if (out.length >= limit) break
  }
  return out
}
