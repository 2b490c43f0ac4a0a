/**
 * Fence, claim and admit in Redis, and a claim given back: the scripts index.ts's `fence`,
 * `claim` and `admit` run (their contracts are there), with the answers' instants on this
 * process's clock.
 *
 * Fence and claim on one server run as one script, ADMIT (two keys, one round trip). On a
 * cluster the mark's key and the record's key sit in two slots, so `admit` runs FENCE and then,
 * when it accepts, CLAIM: two single-slot scripts. The record keeps its own slot rather than its
 * resource's, because a record is named by (route, scope, key) alone (contract §4): were it kept
 * in its resource's slot, the same key sent with another resource (another account in the path,
 * or a resource taken from a header, which the fingerprint does not cover) would find no record
 * there — a second forward instead of a 422 or a replay — and `resolve`, which knows no
 * resource, would have to scan every master to find it. The cost is one more round trip on
 * routes with both fencing and idempotency. A stale token still leaves the key untouched (CLAIM
 * runs only after FENCE accepted), and a newer token fenced between the two is what could
 * happen just after ADMIT too: the request is forwarded either way.
 */
import type { StoreClock } from '../shared/clock.js'
import type { AdmitResult, ClaimRequest, ClaimResult, FenceRequest, FenceResult, RecordKey } from '../contract/store.js'
import { withSince } from '../contract/fences.js'
import type { Conn } from './connection.js'
import type { KeyNames } from './keys.js'
import { ReplicaShortfall, type Writer } from './replicas.js'
import { claimOf, fenceOf, type AdmitReply, type ClaimReply, type FenceReply } from './replies.js'
import { SCRIPTS, claimArgs } from './scripts.js'

/** What the operations run with: the store's connection, key layout, writer and clock. */
export interface Admission {
  readonly redis: Conn
  readonly keys: KeyNames
  readonly writer: Writer
  /** `replicas: N` */
  readonly replicas: number
  readonly cluster: boolean
  readonly clock: StoreClock
}

/** `now` as a script's argument: '' (the server's TIME), or the caller's with `clock: 'caller'`. */
export function nowArg(clock: StoreClock, now: number): string {
  const n = clock.now(now)
  return n === undefined ? '' : String(n)
}

/** A claim's answer with its instants on this process's clock. */
function localClaim(a: Admission, c: ClaimResult): ClaimResult {
  return c.kind === 'in_flight' ? { kind: 'in_flight', leaseUntil: a.clock.toLocal(c.leaseUntil) } : c
}

/** A fence's answer with `since` on this process's clock. */
function localFence(a: Admission, f: FenceResult): FenceResult {
  return f.since === undefined ? f : withSince(f, a.clock.toLocal(f.since))
}

/** FENCE, waited for when it accepted. */
export async function fence(a: Admission, resource: string, token: bigint, now: number): Promise<FenceResult> {
  return localFence(a, fenceOf(await a.writer.write<FenceReply>('fence', SCRIPTS.fgFence, a.keys.fence(resource),
    [token.toString(), a.replicas ? '1' : '0', nowArg(a.clock, now)], false, (x) => Number(x[0]) === 1)))
}

/** CLAIM, waited for when it claimed; a claim the replicas did not acknowledge is given back. */
export async function claim(a: Admission, op: string, key: RecordKey, req: ClaimRequest, now: number): Promise<ClaimResult> {
  try {
    return localClaim(a, claimOf(await a.writer.write<ClaimReply>(op, SCRIPTS.fgClaim, a.keys.recordKeys(key), claimArgs(req, nowArg(a.clock, now)), true, (r) => r[0].toString() === 'claimed')))
  } catch (e) {
    if (e instanceof ReplicaShortfall) await giveBack(a, key, req, claimOf(e.result as ClaimReply))
    throw e
  }
}

/** ADMIT on one server, FENCE then CLAIM on a cluster (index.ts's `admit` says what each leaves when half failed). */
export function admit(a: Admission, fenceReq: FenceRequest, key: RecordKey, req: ClaimRequest, now: number): Promise<AdmitResult> {
  if (a.cluster) return admitOnCluster(a, fenceReq, key, req, now)
  const [fenceKey, sinceKey] = a.keys.fence(fenceReq.resource)
  const args = claimArgs(req, nowArg(a.clock, now))
  args.unshift(fenceReq.token.toString())
  return a.writer.write<AdmitReply>('admit', SCRIPTS.fgAdmit, [fenceKey, a.keys.record(key), sinceKey, a.keys.unsettled!.index], args, true,
    (x) => Number(x[0]) === 1 && x[4].toString() === 'claimed').then((r) => {
    const fenced = localFence(a, fenceOf([r[0], r[1], r[2], r[3]]))
    return fenced.accepted ? { fence: fenced, claim: localClaim(a, claimOf(r.slice(4) as ClaimReply)) } : { fence: fenced }
  }, async (e) => {
    if (e instanceof ReplicaShortfall) {
      const x = e.result as AdmitReply
      if (Number(x[0]) === 1) await giveBack(a, key, req, claimOf(x.slice(4) as ClaimReply))
    }
    throw e
  })
}

/** FENCE, then CLAIM when it accepted (two slots); with replicas the fence's WAIT runs alongside the claim. */
async function admitOnCluster(a: Admission, fenceReq: FenceRequest, key: RecordKey, req: ClaimRequest, now: number): Promise<AdmitResult> {
  const fenceArgs = [fenceReq.token.toString(), a.replicas ? '1' : '0', nowArg(a.clock, now)]
  const sent = a.replicas
    ? await a.writer.send<FenceReply>('admit', SCRIPTS.fgFence, a.keys.fence(fenceReq.resource), fenceArgs, false)
    : { conn: a.redis, result: await a.writer.call<FenceReply>(SCRIPTS.fgFence, a.keys.fence(fenceReq.resource), fenceArgs, false) }
  const fenced = localFence(a, fenceOf(sent.result))
  if (!fenced.accepted) return { fence: fenced }
  const fenceAcked = a.replicas ? a.writer.acked('admit', sent.conn, sent.result) : undefined
  fenceAcked?.catch(() => { /* read below, or moot */ })
  const claimed = await claim(a, 'admit', key, req, now)
  if (fenceAcked && claimed.kind === 'claimed') {
    try {
      await fenceAcked
    } catch (e) {
      await giveBack(a, key, req, claimed)
      throw e
    }
  }
  return { fence: fenced, claim: claimed }
}

/**
 * A claim made but not acknowledged by enough replicas is given back before the StoreError
 * reaches the gateway (which does not forward): RELEASE deletes it, or puts back the unknown
 * outcome it took over, so the key reads as it did.
 */
async function giveBack(a: Admission, key: RecordKey, req: ClaimRequest, claimed: ClaimResult): Promise<void> {
  if (claimed.kind !== 'claimed') return
  await a.writer.call(SCRIPTS.fgRelease, a.keys.recordKeys(key), [req.claimId], false)
    .catch(() => { /* guardStore gives it back again (../runtime/guard.ts), else the lease ends it: an unknown outcome (crash) */ })
}
