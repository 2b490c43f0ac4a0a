/**
 * The Redis store's writes of an idempotency record once claimed (./admission.ts claims it):
 * finish, renew, release, resolve — each one Lua script on the record's slot, the first, third
 * and fourth waited for by `replicas: N` when they changed something.
 */
import { probeTakeResult, resolveResult, settleResult } from '../shared/replies.js'
import type { Completion, ProbeTake, RecordKey, ReleaseResult, Resolution, ResolveResult, Settlement, SettleResult } from '../contract/store.js'
import { SCRIPTS } from './scripts.js'
import { releaseOf, type ReleaseReply } from './replies.js'
import { nowArg, type Admission } from './admission.js'

const noop = (): void => {}

export function finish(ops: Admission, key: RecordKey, claimId: string, done: Completion, ttlMs: number, now: number): Promise<void> {
  const status = done.kind === 'completed' ? String(done.response.status) : done.kind === 'not_stored' ? String(done.status) : ''
  return ops.writer.write<number>('finish', SCRIPTS.fgFinish, ops.keys.recordKeys(key), [claimId, done.kind, nowArg(ops.clock, now), String(Math.max(1, ttlMs)), status,
    done.kind === 'completed' ? JSON.stringify(done.response.headers) : '',
    done.kind === 'completed' ? done.response.body : '',
    done.kind === 'unknown' ? done.reason : '',
    done.kind === 'unknown' && done.probeInMs !== undefined ? String(Math.max(0, Math.round(done.probeInMs))) : ''], false, (n) => Number(n) === 1).then(noop)
}

/** No WAIT: a renewal lost in a failover only ends the lease sooner (an unknown outcome, reason crash). */
export async function renew(ops: Admission, key: RecordKey, claimId: string, leaseMs: number, now: number): Promise<boolean> {
  return Number(await ops.writer.call<number>(SCRIPTS.fgRenew, [ops.keys.record(key)], [claimId, String(Math.max(0, Math.round(leaseMs))), nowArg(ops.clock, now)], false, 'renew')) === 1
}

export async function release(ops: Admission, key: RecordKey, claimId: string): Promise<ReleaseResult> {
  return releaseOf(await ops.writer.write<ReleaseReply>('release', SCRIPTS.fgRelease, ops.keys.recordKeys(key), [claimId], false, (r) => String(r[0]) !== 'not_held'))
}

export async function resolve(ops: Admission, key: RecordKey, as: Resolution, ttlMs: number, now: number): Promise<ResolveResult> {
  const [kind, detail] = (await ops.writer.write<(string | Buffer)[]>('resolve', SCRIPTS.fgResolve, ops.keys.recordKeys(key), [as, nowArg(ops.clock, now), String(Math.max(1, ttlMs))], false,
    (x) => x[0].toString() === 'resolved')).map(String)
  return resolveResult(kind, detail)
}

const ms = (x: number): string => String(Math.max(0, Math.round(x)))

/** TAKE_PROBE (`idempotency.settle`), waited for by `replicas: N` when it took the probe: one gateway per probe, also across a failover. */
export async function takeProbe(ops: Admission, key: RecordKey, p: { seen: number; afterMs: number; nextInMs: number }, now: number): Promise<ProbeTake> {
  const r = await ops.writer.write<(string | Buffer)[]>('take_probe', SCRIPTS.fgTakeProbe, ops.keys.recordKeys(key),
    [String(p.seen), ms(p.afterMs), ms(p.nextInMs), nowArg(ops.clock, now)], false, (x) => x[0].toString() === 'taken')
  const [kind, probe, probes, reason, abandoned] = r.map(String)
  return probeTakeResult(kind, probe, probes, reason, abandoned === '1')
}

/** SETTLE (`idempotency.settle`), waited for by `replicas: N` when it settled. */
export async function settle(ops: Admission, key: RecordKey, probes: number, as: Settlement, ttlMs: number, now: number): Promise<SettleResult> {
  const applied = as.kind === 'applied'
  const [kind, reason] = (await ops.writer.write<(string | Buffer)[]>('settle', SCRIPTS.fgSettle, ops.keys.recordKeys(key), [String(probes), as.kind, nowArg(ops.clock, now), String(Math.max(1, ttlMs)),
    applied ? String(as.response.status) : '', applied ? JSON.stringify(as.response.headers) : '', applied ? as.response.body : ''], false,
  (x) => x[0].toString() === 'settled')).map(String)
  return settleResult(kind, reason)
}
