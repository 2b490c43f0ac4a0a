/**
 * The Redis store's leases (contract §3a, ../contract/leases.ts): the scripts of ./lua-leases.ts
 * on the resource's slot, their instants on the server's clock and answered on this process's.
 * A grant and a release are waited for by `replicas: N` (a grant lost in a failover could let a
 * token be issued twice); a renewal is not, as a claim's renewal is not: one lost only ends the
 * lease sooner.
 */
import type { Lease, LeaseChange, LeaseGrant } from '../contract/leases.js'
import { callScript } from './connection.js'
import { nowArg, type Admission } from './admission.js'
import { SCRIPTS } from './scripts.js'

type Reply = (string | Buffer)[]

const leaseOf = (a: Admission, resource: string, r: string[], at: number): Lease =>
  ({ resource, token: BigInt(r[at]), holder: r[at + 1], expiresAt: a.clock.toLocal(Number(r[at + 2])), ttlMs: Number(r[at + 3]) })

export async function acquireLease(a: Admission, resource: string, holder: string, ttlMs: number, now: number): Promise<LeaseGrant> {
  const r = (await a.writer.write<Reply>('lease_acquire', SCRIPTS.fgLeaseAcquire, a.keys.lease(resource), [holder, String(Math.round(ttlMs)), nowArg(a.clock, now)], false,
    (x) => x[0].toString() === 'granted')).map(String)
  if (r[0] === 'held') return { granted: false, held: leaseOf(a, resource, r, 1) }
  const out: LeaseGrant = { granted: true, lease: leaseOf(a, resource, r, 1) }
  if (r[5] !== '') out.previous = { token: BigInt(r[5]), holder: r[6], expiresAt: a.clock.toLocal(Number(r[8])), expired: r[7] === '1' }
  return out
}

/** Renew or release by token. */
export async function changeLease(a: Admission, resource: string, token: bigint, now: number, how: 'renew' | 'release'): Promise<LeaseChange> {
  const [mark, , lease] = a.keys.lease(resource)
  const args = [token.toString(), nowArg(a.clock, now), how]
  const r = (how === 'release'
    ? await a.writer.write<Reply>('lease_release', SCRIPTS.fgLeaseChange, [mark, lease], args, false, (x) => x[0].toString() === 'done')
    : await a.writer.call<Reply>(SCRIPTS.fgLeaseChange, [mark, lease], args, false, 'lease_renew')).map(String)
  if (r[0] === 'done') return { done: true, lease: leaseOf(a, resource, r, 1) }
  return r[1] === '' ? { done: false } : { done: false, highest: BigInt(r[1]) }
}

export async function readLease(a: Admission, resource: string, now: number): Promise<Lease | undefined> {
  const r = (await callScript<Reply>(a.redis, SCRIPTS.fgLeaseRead, [a.keys.lease(resource)[2]], [nowArg(a.clock, now)], false)).map(String)
  return r.length ? leaseOf(a, resource, r, 0) : undefined
}
