/**
 * In-process store. Not shared between processes and lost on exit: for development, tests and
 * single-process deployments that accept losing high-water marks on restart.
 * High-water marks are never evicted: past `maxResources` a new resource is refused with a
 * StoreError (503 and a log line), never a silent forget. Completed records live in an LRU with
 * a per-record ttl; in-flight and unknown-outcome records are never evicted (forgetting one
 * would let the key be forwarded again), so past `maxRecords` of them new claims are refused.
 */
import { LRUCache } from 'lru-cache'
import { decideClaim, decideFinish, decideResolve, mayRelease, type IdemRecord } from './record-state.js'
import { randomUUID } from 'node:crypto'
import { StoreError, type AdmitResult, type FenceMark, type FenceRequest, type StateMarkers, type ClaimRequest, type ClaimResult, type Completion, type FenceResult, type RecordKey, type Resolution, type ResolveResult, type Store, type UnknownRecord } from './types.js'
import { MemoryAuditLog } from './attempt-log/memory.js'
import type { OlderWrites, Registration } from './types.js'
import { olderOf, type Registered } from './registrations.js'

export interface MemoryStoreOptions {
  /** most resources with a high-water mark; default 1,000,000 */
  maxResources?: number
  /** most idempotency records kept; the least recently used completed ones go first; default 100,000 */
  maxRecords?: number
  /** attempt log entries older than this are not reported, ms; default 7 days */
  auditRetentionMs?: number
  /** most attempt log entries kept; default 10,000 */
  auditCapacity?: number
}

export const recordId = (k: RecordKey): string => `${k.route}\n${k.scope}\n${k.key}`

/** The key of a `recordId` (a key has no newline; a scope is hex or empty). */
export function parseRecordId(id: string): RecordKey {
  const k = id.lastIndexOf('\n')
  const s = id.lastIndexOf('\n', k - 1)
  return { route: id.slice(0, s), scope: id.slice(s + 1, k), key: id.slice(k + 1) }
}

export class MemoryStore implements Store {
  readonly kind = 'memory' as const
  readonly inProcess = true
  readonly #fences = new Map<string, bigint>()
  /** when each resource's mark was first accepted (FenceResult.since), epoch ms */
  readonly #since = new Map<string, number>()
  /** completed and not_stored records: evicting one costs a replay, never a second effect */
  readonly #records: LRUCache<string, IdemRecord>
  /** in_flight and unknown records, kept until they expire or change state */
  readonly #held = new Map<string, IdemRecord>()
  readonly #maxRecords: number
  readonly #maxResources: number
  readonly audit: MemoryAuditLog
  #closed = false

  constructor(options: MemoryStoreOptions = {}) {
    const { maxResources = 1_000_000, maxRecords = 100_000 } = options
    if (!Number.isInteger(maxResources) || maxResources < 1) throw new TypeError('options.maxResources must be a positive integer')
    if (!Number.isInteger(maxRecords) || maxRecords < 1) throw new TypeError('options.maxRecords must be a positive integer')
    this.#maxResources = maxResources
    this.#records = new LRUCache({ max: maxRecords })
    this.#maxRecords = maxRecords
    this.audit = new MemoryAuditLog({ capacity: options.auditCapacity, retentionMs: options.auditRetentionMs })
  }

  #get(id: string): IdemRecord | undefined {
    return this.#held.get(id) ?? this.#records.get(id)
  }

  #put(id: string, r: IdemRecord, now: number): void {
    if (r.state === 'in_flight' || r.state === 'unknown') {
      if (!this.#held.has(id) && this.#held.size >= this.#maxRecords) {
        for (const [k, v] of this.#held) if (v.expiresAt <= now) this.#held.delete(k)
        if (this.#held.size >= this.#maxRecords) {
          throw new StoreError(`memory store holds ${this.#maxRecords} in-flight or unknown records (store.maxRecords); refusing a new claim rather than forgetting one`, 'claim')
        }
      }
      this.#records.delete(id)
      this.#held.set(id, r)
    } else {
      this.#held.delete(id)
      this.#records.set(id, r, { ttl: Math.max(1, r.expiresAt - now) })
    }
  }

  #open(op: string): void {
    if (this.#closed) throw new StoreError('store is closed', op)
  }

  async fence(resource: string, token: bigint, now = Date.now()): Promise<FenceResult> {
    this.#open('fence')
    return this.#fence(resource, token, now)
  }

  #fence(resource: string, token: bigint, now: number): FenceResult {
    const highest = this.#fences.get(resource)
    if (highest === undefined) {
      if (this.#fences.size >= this.#maxResources) {
        throw new StoreError(`memory store holds ${this.#maxResources} resources (store.maxResources); refusing a new one rather than forgetting a high-water mark`, 'fence')
      }
    } else if (token <= highest) {
      const since = this.#since.get(resource)
      return token < highest ? { accepted: false, highest, since } : { accepted: true, highest, since }
    }
    this.#fences.set(resource, token)
    this.#since.set(resource, now)
    return { accepted: true, highest: token, since: now, raised: true }
  }

  /** fence and claim in one synchronous section: nothing else runs between them */
  async admit(fence: FenceRequest, key: RecordKey, req: ClaimRequest, now: number): Promise<AdmitResult> {
    this.#open('admit')
    const result = this.#fence(fence.resource, fence.token, now)
    if (!result.accepted) return { fence: result }
    return { fence: result, claim: this.#claim(key, req, now) }
  }

  async highest(resource: string): Promise<bigint | undefined> {
    this.#open('highest')
    return this.#fences.get(resource)
  }

  async mark(resource: string): Promise<FenceMark | undefined> {
    this.#open('mark')
    const highest = this.#fences.get(resource)
    return highest === undefined ? undefined : { highest, since: this.#since.get(resource) }
  }

  async claim(key: RecordKey, req: ClaimRequest, now: number): Promise<ClaimResult> {
    this.#open('claim')
    return this.#claim(key, req, now)
  }

  #claim(key: RecordKey, req: ClaimRequest, now: number): ClaimResult {
    const id = recordId(key)
    const { result, write } = decideClaim(this.#get(id), req, now)
    if (write) this.#put(id, write, now)
    return result
  }

  async finish(key: RecordKey, claimId: string, done: Completion, ttlMs: number, now: number): Promise<void> {
    this.#open('finish')
    const id = recordId(key)
    const next = decideFinish(this.#get(id), claimId, done, ttlMs, now)
    if (next) this.#put(id, next, now)
  }

  async renew(key: RecordKey, claimId: string, leaseMs: number, now: number): Promise<boolean> {
    this.#open('renew')
    const r = this.#get(recordId(key))
    if (!mayRelease(r, claimId)) return false
    r!.leaseUntil = now + leaseMs
    return true
  }

  async release(key: RecordKey, claimId: string): Promise<void> {
    this.#open('release')
    const id = recordId(key)
    if (mayRelease(this.#get(id), claimId)) this.#held.delete(id)
  }

  async resolve(key: RecordKey, as: Resolution, ttlMs: number, now: number): Promise<ResolveResult> {
    this.#open('resolve')
    const id = recordId(key)
    const { result, write } = decideResolve(this.#get(id), as, ttlMs, now)
    if (write === null) this.#held.delete(id)
    else if (write) this.#put(id, write, now)
    return result
  }

  async unknowns(now: number, options: { route?: string; limit?: number } = {}): Promise<UnknownRecord[]> {
    this.#open('unknowns')
    const { route, limit = 1000 } = options
    const out: UnknownRecord[] = []
    for (const [id, r] of this.#held) {
      if (out.length >= limit) break
      if (r.expiresAt <= now) continue
      const crashed = r.state === 'in_flight' && r.leaseUntil <= now
      if (r.state !== 'unknown' && !crashed) continue
      const key = parseRecordId(id)
      if (route !== undefined && key.route !== route) continue
      out.push({ key, reason: crashed ? 'crash' : r.reason ?? 'crash', leaseUntil: r.leaseUntil, expiresAt: r.expiresAt })
    }
    return out
  }

  /** `fencing.serialize: store`: per resource, the registered writes by id; expired ones go when their resource is next written */
  readonly #registrations = new Map<string, Map<string, Registered>>()
  /** when every resource's expired registrations were last deleted (held ones of resources nobody writes again) */
  #swept = 0

  /** One synchronous section: nothing runs between reading the mark and registering. */
  async register(resource: string, token: bigint, id: string, deadline: number, now: number): Promise<Registration> {
    this.#open('register')
    const highest = this.#fences.get(resource)
    if (highest !== undefined && token < highest) return { registered: false, highest }
    if (now - this.#swept >= 60_000) {
      this.#swept = now
      for (const [r, ws] of this.#registrations) {
        for (const [k, w] of ws) if (w.deadline <= now) ws.delete(k)
        if (ws.size === 0) this.#registrations.delete(r)
      }
    }
    let writes = this.#registrations.get(resource)
    if (writes === undefined) this.#registrations.set(resource, (writes = new Map()))
    for (const [k, w] of writes) if (w.deadline <= now) writes.delete(k)
    writes.set(id, { token, deadline })
    return { registered: true, ...olderOf(writes.values(), token, now) }
  }

  async olderRegistered(resource: string, token: bigint, now: number): Promise<OlderWrites> {
    this.#open('older_registered')
    const writes = this.#registrations.get(resource)
    return writes === undefined ? { until: 0 } : olderOf(writes.values(), token, now)
  }

  async unregister(resource: string, id: string, until = 0): Promise<void> {
    this.#open('unregister')
    const writes = this.#registrations.get(resource)
    const w = writes?.get(id)
    if (!w) return
    if (until > 0) {
      w.deadline = until
      return
    }
    writes!.delete(id)
    if (writes!.size === 0) this.#registrations.delete(resource)
  }

  readonly #epoch = randomUUID()

  /** A process's memory cannot lose data behind its back: the epoch never changes. */
  async markers(): Promise<StateMarkers> {
    this.#open('markers')
    return { epoch: this.#epoch, accepted: this.#epoch }
  }

  async acceptLoss(): Promise<string> {
    return this.#epoch
  }

  async ping(): Promise<void> {
    this.#open('ping')
  }

  async close(): Promise<void> {
    this.#closed = true
  }
}
