/**
 * The Redis store's writes of an idempotency record once claimed (./admission.ts claims it):
 * finish, renew, release, resolve — each one Lua script on the record's slot, the first, third
 * and fourth waited for by `replicas: N` when they changed something.
 */
import { resolveResult } from '../shared/replies.js'
import type { Completion, RecordKey, ReleaseResult, Resolution, ResolveResult } from '../contract/store.js'
import { SCRIPTS } from './scripts.js'
import { releaseOf, type ReleaseReply } from './replies.js'
import { nowArg, type Admission } from './admission.js'

const noop = (): void => {}

export function finish(ops: Admission, key: RecordKey, claimId: string, done: Completion, ttlMs: number, now: number): Promise<void> {
  const status = done.kind === 'completed' ? String(done.response.status) : done.kind === 'not_stored' ? String(done.status) : ''
  return ops.writer.write<number>('finish', SCRIPTS.fgFinish, ops.keys.recordKeys(key), [claimId, done.kind, nowArg(ops.clock, now), String(Math.max(1, ttlMs)), status,
    done.kind === 'completed' ? JSON.stringify(done.response.headers) : '',
    done.kind === 'completed' ? done.response.body : '',
    done.kind === 'unknown' ? done.reason : ''], false, (n) => Number(n) === 1).then(noop)
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
