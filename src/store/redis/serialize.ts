/**
 * `fencing.serialize: store` in Redis: the registrations of a resource's writes in flight
 * (REGISTER, OLDER, UNREGISTER), the scripts index.ts's `register`, `olderRegistered` and
 * `unregister` run, with the answers' instants on this process's clock.
 */
import type { OlderWrites, Registration } from '../contract/store.js'
import { nowArg, type Admission } from './admission.js'
import { callScript } from './connection.js'
import { SCRIPTS } from './scripts.js'

export async function register(a: Admission, resource: string, token: bigint, id: string, deadline: number, now: number): Promise<Registration> {
  const r = await a.writer.write<[number, string, number]>('register', SCRIPTS.fgRegister, [a.keys.mark(resource), a.keys.registrations(resource)],
    [token.toString(), id, String(Math.max(0, Math.round(deadline - now))), nowArg(a.clock, now)], false, (x) => Number(x[0]) === 1)
  if (Number(r[0]) !== 1) return { registered: false, highest: BigInt(String(r[1])) }
  const oldest = String(r[1])
  return oldest === '' ? { registered: true, until: 0 } : { registered: true, oldest: BigInt(oldest), until: a.clock.toLocal(Number(r[2])) }
}

export async function olderRegistered(a: Admission, resource: string, token: bigint, now: number): Promise<OlderWrites> {
  const [oldest, until] = (await callScript<(string | Buffer)[]>(a.redis, SCRIPTS.fgOlder, [a.keys.registrations(resource)], [token.toString(), nowArg(a.clock, now)], false)).map(String)
  return oldest === '' ? { until: 0 } : { oldest: BigInt(oldest), until: a.clock.toLocal(Number(until)) }
}

export async function unregister(a: Admission, resource: string, id: string, until: number): Promise<void> {
  const now = Date.now()
  await a.writer.write<number>('unregister', SCRIPTS.fgUnregister, [a.keys.registrations(resource)], [id, until > 0 ? String(Math.floor(until - now) || 1) : '0', nowArg(a.clock, now)], false,
    (n) => until > 0 && Number(n) === 1)
}
