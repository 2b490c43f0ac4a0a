/**
 * What the SQLite store's calls do to the file, inside a transaction the engine (./index.ts) has
 * opened with BEGIN IMMEDIATE — so each read and the write that depends on it hold SQLite's write
 * lock together, across every process sharing the file: the fence check-and-set, the record
 * state machine (../shared/record-state.ts) on fg_records_v1, and the registrations of
 * `fencing.serialize: store`.
 *
 * No savepoint per operation (they cost more than the operations): each writes with one
 * statement, and a statement that fails is undone by SQLite alone, so the other operations of a
 * group commit still commit. `admit` writes with two (fence, then claim): see there.
 */
import type { Database as Db, Statement } from 'better-sqlite3'
import { decideClaim, decideFinish, decideRelease, decideResolve, decideSettle, decideTakeProbe, parseRecordId, type IdemRecord } from '../shared/record-state.js'
import { unknownAt, unknownOf } from '../shared/unknown-record.js'
import type { AdmitResult, ClaimRequest, ClaimResult, Completion, FenceMark, FenceRequest, FenceResult, OlderWrites, ProbeTake, Registration, ReleaseResult, Resolution, ResolveResult, RecordKey, Settlement, SettleResult, UnknownRecord } from '../contract/store.js'
import { FENCES, RECORDS, REGISTRATIONS } from './sql.js'

interface RecordRow {
  state: IdemRecord['state']
  fingerprint: string
  claim_id: string
  lease_until: number
  expires_at: number
  status: number | null
  headers: string | null
  body: Buffer | null
  reason: IdemRecord['reason'] | null
  after_reason: IdemRecord['after'] | null
  probe: string | null
  probes: number | null
  next_probe: number | null
  after_probe: string | null
  after_probes: number | null
  after_next: number | null
}

/** an optional field of the record from a nullable column (a file from before the column reads it null) */
const opt = <T>(v: T | null | undefined): T | undefined => v ?? undefined

const toRecord = (r: RecordRow | undefined): IdemRecord | undefined => r && {
  state: r.state,
  fingerprint: r.fingerprint,
  claimId: r.claim_id,
  leaseUntil: r.lease_until,
  expiresAt: r.expires_at,
  status: r.status ?? undefined,
  reason: r.reason ?? undefined,
  after: r.after_reason ?? undefined,
  probe: opt(r.probe),
  probes: opt(r.probes),
  nextProbe: opt(r.next_probe),
  afterProbe: opt(r.after_probe),
  afterProbes: opt(r.after_probes),
  afterNext: opt(r.after_next),
  response: r.state === 'completed' ? { status: r.status!, headers: JSON.parse(r.headers ?? '[]'), body: r.body ?? Buffer.alloc(0) } : undefined,
}

const toRow = (id: string, r: IdemRecord) => ({
  id,
  state: r.state,
  fingerprint: r.fingerprint,
  claim_id: r.claimId,
  lease_until: r.leaseUntil,
  expires_at: r.expiresAt,
  status: r.response?.status ?? r.status ?? null,
  headers: r.response ? JSON.stringify(r.response.headers) : null,
  body: r.response?.body ?? null,
  reason: r.reason ?? null,
  after_reason: r.after ?? null,
  probe: r.probe ?? null,
  probes: r.probes ?? null,
  next_probe: r.nextProbe ?? null,
  after_probe: r.afterProbe ?? null,
  after_probes: r.afterProbes ?? null,
  after_next: r.afterNext ?? null,
})

/** The operations on one connection; `id` is a `recordId`. Each throws what SQLite threw, unwrapped. */
export class Operations {
  readonly #markGet: Statement
  readonly #highestGet: Statement
  readonly #raise: Statement
  readonly #recGet: Statement
  readonly #recPut: Statement
  readonly #recDel: Statement
  readonly #renew: Statement
  readonly #unknowns: Statement
  readonly #reap: Statement
  readonly #db: Db

  constructor(db: Db) {
    this.#db = db
    this.#markGet = db.prepare(FENCES.mark).safeIntegers(true)
    this.#highestGet = db.prepare(FENCES.highest).pluck().safeIntegers(true)
    this.#raise = db.prepare(FENCES.raise)
    this.#recGet = db.prepare(RECORDS.get)
    this.#recPut = db.prepare(RECORDS.put)
    this.#recDel = db.prepare(RECORDS.delete)
    this.#renew = db.prepare(RECORDS.renew)
    this.#unknowns = db.prepare(RECORDS.unknowns)
    this.#reap = db.prepare(RECORDS.reap)
  }

  #get(id: string): IdemRecord | undefined {
    return toRecord(this.#recGet.get(id) as RecordRow | undefined)
  }

  highest(resource: string): bigint | undefined {
    return this.#highestGet.get(resource) as bigint | undefined
  }

  mark(resource: string): FenceMark | undefined {
    const row = this.#markGet.get(resource) as { highest: bigint; since: bigint | null } | undefined
    return row && { highest: row.highest, since: row.since === null ? undefined : Number(row.since) }
  }

  /** The fence check-and-set; an equal token is accepted without a write: the mark and its since stay. */
  fence(resource: string, token: bigint, now: number): FenceResult {
    const row = this.mark(resource)
    if (row && token <= row.highest) return { accepted: token === row.highest, highest: row.highest, since: row.since }
    this.#raise.run(resource, token, now)
    return { accepted: true, highest: token, since: now, raised: true }
  }

  claim(id: string, req: ClaimRequest, now: number): ClaimResult {
    const { result, write } = decideClaim(this.#get(id), req, now)
    if (write) this.#recPut.run(toRow(id, write))
    return result
  }

  /**
   * Fence, then claim when the fence accepts: two statements of one transaction. A failing claim
   * statement is undone alone and throws; the fence's write stays and commits with the batch —
   * the half-failed admit of src/store/contract/store.ts: the mark is left as a lone `fence` would have
   * left it, no claim is held, and the caller gets StoreError.
   */
  admit(fence: FenceRequest, id: string, req: ClaimRequest, now: number): AdmitResult {
    const result = this.fence(fence.resource, fence.token, now)
    return result.accepted ? { fence: result, claim: this.claim(id, req, now) } : { fence: result }
  }

  finish(id: string, claimId: string, done: Completion, ttlMs: number, now: number): void {
    const next = decideFinish(this.#get(id), claimId, done, ttlMs, now)
    if (next) this.#recPut.run(toRow(id, next))
  }

  renew(id: string, claimId: string, leaseUntil: number): boolean {
    return this.#renew.run(leaseUntil, id, claimId).changes > 0
  }

  release(id: string, claimId: string): ReleaseResult {
    const { result, write } = decideRelease(this.#get(id), claimId)
    if (write === null) this.#recDel.run(id)
    else if (write) this.#recPut.run(toRow(id, write))
    return result
  }

  takeProbe(id: string, p: { seen: number; afterMs: number; nextInMs: number }, now: number): ProbeTake {
    const { result, write } = decideTakeProbe(this.#get(id), p, now)
    if (write) this.#recPut.run(toRow(id, write))
    return result
  }

  settle(id: string, probes: number, as: Settlement, ttlMs: number, now: number): SettleResult {
    const { result, write } = decideSettle(this.#get(id), probes, as, ttlMs, now)
    if (write === null) this.#recDel.run(id)
    else if (write) this.#recPut.run(toRow(id, write))
    return result
  }

  /** Reads and writes: run it in a transaction of its own (`transaction`). */
  resolve(id: string, as: Resolution, ttlMs: number, now: number): ResolveResult {
    const { result, write } = decideResolve(this.#get(id), as, ttlMs, now)
    if (write === null) this.#recDel.run(id)
    else if (write) this.#recPut.run(toRow(id, write))
    return result
  }

  unknownRecord(id: string, key: RecordKey, now: number): UnknownRecord | undefined {
    return unknownAt(key, this.#get(id), now)
  }

  unknowns(now: number, route: string | undefined, limit: number): UnknownRecord[] {
    const rows = this.#unknowns.all({ now, route: route ?? null, limit }) as (RecordRow & { id: string })[]
    return rows.map((r) => unknownOf(parseRecordId(r.id), toRecord(r)!, r.state === 'in_flight'))
  }

  /** Deletes up to 1000 expired records and 1000 expired registrations; returns how many. */
  reap(now: number): number {
    return this.#reap.run(now).changes + this.#registrations.reap.run(now).changes
  }

  /**
   * Reads the resource's mark and registers with no fence in between (the caller's transaction
   * holds the write lock), unless the token is below the mark.
   */
  register(resource: string, token: bigint, id: string, deadline: number, now: number): Registration {
    const st = this.#registrations
    const highest = this.highest(resource)
    if (highest !== undefined && token < highest) return { registered: false, highest }
    st.dropExpired.run(resource, now)
    st.put.run(resource, id, token, deadline)
    return { registered: true, ...this.olderRegistered(resource, token, now) }
  }

  olderRegistered(resource: string, token: bigint, now: number): OlderWrites {
    const r = this.#registrations.older.get(resource, token, now) as { oldest: bigint | null; until: bigint | null }
    return r.oldest === null ? { until: 0 } : { oldest: r.oldest, until: Number(r.until) }
  }

  unregister(resource: string, id: string, until: number): void {
    const st = this.#registrations
    if (until > 0) st.hold.run(until, resource, id)
    else st.drop.run(resource, id)
  }

  /** `fencing.serialize: store`: its statements, prepared on first use */
  #registrationStatements?: RegistrationStatements
  get #registrations(): RegistrationStatements {
    return (this.#registrationStatements ??= registrationStatements(this.#db))
  }
}

type RegistrationStatements = ReturnType<typeof registrationStatements>

function registrationStatements(db: Db) {
  return {
    older: db.prepare(REGISTRATIONS.older).safeIntegers(true),
    dropExpired: db.prepare(REGISTRATIONS.dropExpired),
    put: db.prepare(REGISTRATIONS.put),
    hold: db.prepare(REGISTRATIONS.hold),
    drop: db.prepare(REGISTRATIONS.drop),
    reap: db.prepare(REGISTRATIONS.reap),
  }
}
