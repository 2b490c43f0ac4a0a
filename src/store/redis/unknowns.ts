/**
 * `Store.unknowns` in Redis.
 *
 * One server: from the index of unsettled records (`{…:unsettled}`, ./keys.ts), which the scripts
 * that change a record's state keep in the same script (./scripts.ts): the members past their
 * expiry are trimmed, the rest ZSCANned (COUNT 1000 a step) and each one's state read
 * (pipelined). O(records in flight or unknown), however many completed records the store holds.
 *
 * The index is built from a SCAN of every record (what each call cost before it) when the store
 * was never indexed (written by an older version), and again whenever a gateway that keeps no
 * index (an older version, during a rolling upgrade) has written since the last build: every
 * script advances the write sequence, only the index-keeping ones the index's write count, so
 * sequence − count grows only with such writes, and each build records the value it started at.
 * Records an older gateway wrote before a build are found by it; any it wrote after, by the next.
 *
 * Cluster: the index cannot share a record's slot (every record is its own hash tag), so the
 * record keys are SCANned on every master (COUNT 1000 a step), each master's records read against
 * that master's clock: O(records), which is why the gauge reads it at most every 15 s.
 */
import type { Cluster, Redis } from 'ioredis'
import { asReason } from '../shared/replies.js'
import type { RecordKey, UnknownRecord } from '../contract/store.js'
import { callScript, masters, type Conn } from './connection.js'
import type { KeyNames } from './keys.js'
import { REINDEX_SCRIPT } from './scripts.js'

/** The instant a master's records are read against, epoch ms on its clock. */
export type NowOf = (node: Redis | Cluster) => Promise<number>

/**
 * The records in the unknown state, at most `limit`, only `route`'s when given: from the index on
 * one server (built first when it must be), from a SCAN of every master on a cluster.
 */
export function unknownRecords(r: Conn, cluster: boolean, keys: KeyNames, nowOf: NowOf, route: string | undefined, limit: number): Promise<UnknownRecord[]> {
  return cluster || !keys.unsettled ? scanUnknowns(r, cluster, keys, nowOf, route, limit) : indexUnknowns(r as Redis, keys, nowOf, route, limit)
}

/** Collects the unknown records among names read once each; in flight past its lease is a crash, past its expiry gone. */
class Collector {
  readonly out: UnknownRecord[] = []
  readonly #seen = new Set<string>()
  constructor(private readonly r: Redis | Cluster, private readonly keys: KeyNames, private readonly limit: number) {}

  get full(): boolean {
    return this.out.length >= this.limit
  }

  async read(names: string[], now: number): Promise<void> {
    const fresh = names.filter((k) => !this.#seen.has(k))
    for (const k of fresh) this.#seen.add(k)
    if (!fresh.length) return
    const replies = await Promise.all(fresh.map((k) => this.r.hmget(k, 'state', 'lease', 'exp', 'reason', 'probe', 'probes', 'np')))
    for (let i = 0; i < fresh.length && !this.full; i++) {
      const [state, lease, exp, reason, probe, probes, np] = replies[i]
      const leaseUntil = Number(lease ?? 0), expiresAt = Number(exp ?? 0)
      if (expiresAt <= now) continue
      const crashed = state === 'in_flight' && leaseUntil <= now
      if (state !== 'unknown' && !crashed) continue
      const u: UnknownRecord = { key: this.keys.recordOf(fresh[i]), reason: crashed ? 'crash' : asReason(reason), leaseUntil, expiresAt }
      // idempotency.settle's fields, only where the record holds them
      if (probe !== null) u.probe = probe
      if (probes !== null) u.probes = Number(probes)
      if (np !== null) u.nextProbe = Number(np)
      this.out.push(u)
    }
  }
}

/**
 * The record of `key` when it is in the unknown state: one HMGET. On a cluster `nowOf` asks the
 * node a keyless command reaches, not necessarily the record's master: the answer only picks
 * what to try next, and the script that acts on it (TAKE_PROBE) reads the record's own clock.
 */
export async function unknownRecord(r: Conn, keys: KeyNames, nowOf: NowOf, key: RecordKey): Promise<UnknownRecord | undefined> {
  const c = new Collector(r, keys, 1)
  await c.read([keys.record(key)], await nowOf(r))
  return c.out[0]
}

/** One server: the index's members, built first when it must be (see above). */
async function indexUnknowns(r: Redis, keys: KeyNames, nowOf: NowOf, route: string | undefined, limit: number): Promise<UnknownRecord[]> {
  const ix = keys.unsettled!
  const [seq, writes, built] = await r.mget(keys.seq, ix.writes, ix.built)
  const others = BigInt(seq ?? '0') - BigInt(writes ?? '0')
  if (built === null || BigInt(built) !== others) await reindex(r, keys, others)
  const now = await nowOf(r)
  // past its expiry a record reads as gone, and a new claim of its key indexes it again
  await r.zremrangebyscore(ix.index, '-inf', now)
  const c = new Collector(r, keys, limit)
  let cursor = '0'
  do {
    // ZSCAN returns every member present from start to end of the walk (pairs: member, score)
    const [next, pairs] = await r.zscan(ix.index, cursor, 'MATCH', keys.records(route), 'COUNT', 1000)
    cursor = next
    await c.read(pairs.filter((_, i) => i % 2 === 0), now)
  } while (cursor !== '0' && !c.full)
  return c.out
}

/**
 * Puts every record in flight or unknown into the index (REINDEX, one script per SCAN step), then
 * records `others` — the writes of non-indexing gateways counted before the SCAN began — as built.
 */
async function reindex(r: Redis, keys: KeyNames, others: bigint): Promise<void> {
  const ix = keys.unsettled!
  let cursor = '0'
  do {
    const [next, names] = await r.scan(cursor, 'MATCH', keys.records(), 'COUNT', 1000)
    cursor = next
    if (!names.length) continue
    await callScript(r, REINDEX_SCRIPT, [ix.index, ...names], [], false)
  } while (cursor !== '0')
  await r.set(ix.built, others.toString())
}

/** SCAN of the record keys on every master (a cluster, or a store without the index's names). */
async function scanUnknowns(r: Conn, cluster: boolean, keys: KeyNames, nowOf: NowOf, route: string | undefined, limit: number): Promise<UnknownRecord[]> {
  const match = keys.records(route)
  const c = new Collector(r, keys, limit)
  for (const node of masters(r, cluster)) {
    const nodeNow = await nowOf(node)
    let cursor = '0'
    do {
      const [next, names] = await node.scan(cursor, 'MATCH', match, 'COUNT', 1000)
      cursor = next
      await c.read(names, nodeNow)
    } while (cursor !== '0' && !c.full)
    if (c.full) break
  }
  return c.out
}
