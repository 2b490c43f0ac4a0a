/**
 * Operator resolution of an unknown outcome (issue 5 §2), shared by `fencegate resolve` and
 * admin `POST /resolve`: finds the route's record for a key, settles it in the store
 * atomically, and writes a `resolve` entry to the attempt log so the report can count the
 * unknown outcome as resolved.
 *   --as failed     the effect did not happen: the record is released, a retry is forwarded
 *   --as completed  the effect happened: the key is kept for the route's ttl as completed with
 *                   no stored response; later attempts get 409 response-not-stored
 */
import { hostname, userInfo } from 'node:os'
import type { Config } from '../config/schema.js'
import { Problem } from '../problems.js'
import { parseIdempotencyKey } from '../idempotency/key.js'
import { keyHashOf, recordKeyOf } from '../idempotency/record-key.js'
import type { AuditEntry, LossNote, RecordKey, Resolution, Store, UnknownReason } from '../store/index.js'
import { REPLICA } from './entry.js'
import { formatDuration } from '../config/units.js'

export interface ResolveRequest {
  route: string
  /** the idempotency key as the client sent it (bare or as an sf-string); or give `keyHash` */
  key?: string
  /**
   * instead of `key` and `scope`: the key hash that `fencegate unknown`, the attempt log and the
   * spans show (hex SHA-256 of scope and key). It finds only records in the unknown state.
   */
  keyHash?: string
  /** the filled scope template of the route (e.g. the Authorization value); omit when the route has none */
  scope?: string
  as: Resolution
  /** why, in the operator's words (`--reason`); kept in the attempt log */
  reason?: string
  /** who: `cli:user@host` or `admin-api:<peer address>`; kept in the attempt log */
  by?: string
}

/** Most characters of an operator's reason kept in the attempt log. */
export const REASON_MAX = 500

/** An operator's reason as the attempt log keeps it: one line, at most REASON_MAX characters. @throws Problem 400 */
export function checkReason(reason: unknown): string | undefined {
  if (reason === undefined || reason === null || reason === '') return undefined
  if (typeof reason !== 'string') throw new Problem('bad-request', 'reason must be a string: why the action is taken, in words, kept in the attempt log.')
  const one = reason.replace(/[\u0000-\u001f\u007f]+/g, ' ').trim()
  if (one.length > REASON_MAX) throw new Problem('bad-request', `reason must be at most ${REASON_MAX} characters.`)
  return one || undefined
}

/** Who runs this CLI: `cli:user@host` (the user from the OS, else $USER, else the uid). */
export function cliActor(): string {
  let user: string | undefined
  try { user = userInfo().username } catch { user = process.env.USER ?? process.env.LOGNAME }
  return `cli:${user || `uid ${process.getuid?.() ?? '?'}`}@${hostname()}`
}

export interface LossAccepted {
  /** the store's epoch accepted as it is now */
  epoch: string
  /** the loss note it deleted (what a gateway had seen), when there was one */
  cleared?: LossNote
}

/**
 * `fencegate store accept-loss` and admin `POST /store/accept-loss`: marks the store's current
 * state accepted (every gateway serves again within a second) and writes an `accept-loss` entry
 * with who and why to the attempt log.
 * @throws Problem 400 (bad reason); StoreError when the store cannot answer
 */
export async function acceptStoreLoss(store: Store, who: { reason?: string; by?: string }, now = Date.now()): Promise<LossAccepted> {
  const reason = checkReason(who.reason)
  // the note is read first only to say what was cleared: accept-loss clears it either way
  const cleared = (await store.markers().catch(() => undefined))?.note
  const epoch = await store.acceptLoss()
  const entry: AuditEntry = { time: now, kind: 'accept-loss', replica: REPLICA, route: '*' }
  if (reason) entry.reason = reason
  if (who.by) entry.by = who.by
  await store.audit.append([entry])
  return cleared ? { epoch, cleared } : { epoch }
}

export interface Resolved {
  route: string
  keyHash: string
  resolution: Resolution
  /** why the outcome had been unknown */
  previousReason: UnknownReason
  /** what later attempts with the key get, in words */
  effect: string
}

/**
 * @throws Problem 400 bad-request (unknown route, no idempotency, bad key or scope),
 *   404 record-not-found, 409 not-resolvable; StoreError when the store cannot answer
 */
export async function resolveKey(config: Config, store: Store, r: ResolveRequest, now = Date.now()): Promise<Resolved> {
  const who = { reason: checkReason(r.reason), by: r.by }
  const rc = config.routes.find((x) => x.name === r.route)
  if (!rc) throw new Problem('bad-request', `No route named ${JSON.stringify(r.route)} in the config (routes: ${config.routes.map((x) => x.name).join(', ')}).`)
  const i = rc.idempotency
  if (!i) throw new Problem('bad-request', `Route ${rc.name} has no idempotency block, so it keeps no records to resolve.`)
  if (r.as !== 'completed' && r.as !== 'failed') throw new Problem('bad-request', 'as must be "completed" (the effect happened) or "failed" (it did not).')
  if (r.keyHash !== undefined) {
    if (r.key !== undefined || r.scope !== undefined) throw new Problem('bad-request', 'Give either keyHash, or key (with scope when the route has one), not both.')
    if (typeof r.keyHash !== 'string' || !/^[0-9a-f]{64}$/.test(r.keyHash)) throw new Problem('bad-request', 'keyHash must be 64 lower-case hex digits, as `fencegate unknown` lists it.')
    const found = (await store.unknowns(now, { route: rc.name, limit: 100_000 })).find((u) => keyHashOf(u.key.scope, u.key.key) === r.keyHash)
    if (!found) {
      throw new Problem('record-not-found', `Route ${rc.name} has no record in the unknown state with key hash ${r.keyHash} (already resolved, expired, or its outcome is known): \`fencegate unknown\` lists those that are.`, { keyHash: r.keyHash })
    }
    return settle(rc, store, found.key, r.keyHash, r.as, now, who)
  }
  const key = typeof r.key === 'string' ? parseIdempotencyKey(r.key) : undefined
  if (key === undefined) throw new Problem('bad-request', 'key must be an idempotency key: 1 to 255 visible ASCII characters, bare or as a quoted sf-string.')
  if (i.scope === '') {
    if (r.scope) throw new Problem('bad-request', `Route ${rc.name} does not scope its keys (idempotency.scope is ""); leave the scope out.`)
  } else {
    if (typeof r.scope !== 'string') throw new Problem('bad-request', `Route ${rc.name} scopes its keys by "${i.scope}": give the scope, the value that template had on the request (an empty string when it named nothing).`)
  }
  const { recordKey, keyHash } = recordKeyOf(rc.name, i.scope === '' ? undefined : r.scope, key)
  return settle(rc, store, recordKey, keyHash, r.as, now, who)
}

/** Resolves one record and writes the `resolve` entry. */
async function settle(rc: Config['routes'][number], store: Store, recordKey: RecordKey, keyHash: string, as: Resolution, now: number, who: { reason?: string; by?: string }): Promise<Resolved> {
  const i = rc.idempotency!
  const result = await store.resolve(recordKey, as, i.ttl, now)
  if (result.kind === 'not_found') {
    throw new Problem('record-not-found', `Route ${rc.name} has no record under this key (never used, released, or past its ttl): there is nothing to resolve, and a request with it is forwarded as new.`, { keyHash })
  }
  if (result.kind === 'refused') {
    const why = result.state === 'in_flight' ? 'an attempt with it is still in flight within its lease' : `its outcome is known (${result.state === 'completed' ? 'a stored response is replayed' : 'it completed without a stored response'})`
    throw new Problem('not-resolvable', `The record of this key was left alone: ${why}. Only an unknown outcome can be resolved.`, { keyHash, state: result.state })
  }
  const entry: AuditEntry = { time: now, kind: 'resolve', replica: REPLICA, route: rc.name, keyHash, resolution: as }
  if (who.reason) entry.reason = who.reason
  if (who.by) entry.by = who.by
  await store.audit.append([entry])
  return {
    route: rc.name,
    keyHash,
    resolution: as,
    previousReason: result.reason,
    effect: as === 'failed'
      ? 'released: the next request with this key is forwarded as new'
      : `completed without a stored response: requests with this key get 409 response-not-stored for ${formatDuration(i.ttl)} (idempotency.ttl) and are not forwarded`,
  }
}
