/**
 * In-process store. Not shared between processes and lost on exit: for development, tests and
 * single-process deployments that accept losing high-water marks on restart.
 * High-water marks are never evicted: past `maxResources` a new resource is refused with a
 * StoreError (503 and a log line), never a silent forget. Completed records live in an LRU with
 * a per-record ttl; in-flight and unknown-outcome records are never evicted (forgetting one
 * would let the key be forwarded again), so past `maxRecords` of them new claims are refused.
 */
import { LRUCache } from 'lru-cache'
import { randomUUID } from 'node:crypto'
import { decideClaim, decideFinish, decideResolve, mayRelease, parseRecordId, recordId, type IdemRecord } from './record-state.js'
import { storeCall } from './call.js'
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

  /** @throws StoreError naming `op` when a new in-flight or unknown record would pass maxRecords */
  #put(id: string, r: IdemRecord, now: number, op: string): void {
    if (r.state === 'in_flight' || r.state === 'unknown') {
      if (!this.#held.has(id) && this.#held.size >= this.#maxRecords) {
        for (const [k, v] of this.#held) if (v.expiresAt <= now) this.#held.delete(k)
        if (this.#held.size >= this.#maxRecords) {
          throw new StoreError(`memory store holds ${this.#maxRecords} in-flight or unknown records (store.maxRecords); refusing a new claim rather than forgetting one`, op)
        }
      }
      this.#records.delete(id)
      this.#held.set(id, r)
    } else {
      this.#held.delete(id)
      this.#records.set(id, r, { ttl: Math.max(1, r.expiresAt - now) })
    }
  }

  /**
   * Runs one call in a synchronous section (nothing else runs inside it).
   * @throws StoreError after `close()`, or when the section threw (capacity, or a bug)
   */
  #call<T>(op: string, fn: () => T): Promise<T> {
    return storeCall('memory', op, this.#closed, async () => fn())
  }

  fence(resource: string, token: bigint, now = Date.now()): Promise<FenceResult> {
    return this.#call('fence', () => this.#fence(resource, token, now, 'fence'))
  }

  /** @throws StoreError naming `op` when a new resource would pass maxResources */
  #fence(resource: string, token: bigint, now: number, op: string): FenceResult {
    const highest = this.#fences.get(resource)
    if (highest === undefined) {
      if (this.#fences.size >= this.#maxResources) {
        throw new StoreError(`memory store holds ${this.#maxResources} resources (store.maxResources); refusing a new one rather than forgetting a high-water mark`, op)
      }
    } else if (token <= highest) {
      const since = this.#since.get(resource)
      return token < highest ? { accepted: false, highest, since } : { accepted: true, highest, since }
    }
    this.#fences.set(resource, token)
    this.#since.set(resource, now)
    return { accepted: true, highest: token, since: now, raised: true }
  }

  /**
   * Fence and claim in one synchronous section: nothing else runs between them. When the claim
   * step fails (store.maxRecords reached), admit rejects with StoreError and the fence's decision
   * stands: a raised mark stays raised, as a lone `fence` would have left it (src/store/types.ts).
   */
  admit(fence: FenceRequest, key: RecordKey, req: ClaimRequest, now: number): Promise<AdmitResult> {
    return this.#call('admit', () => {
      const result = this.#fence(fence.resource, fence.token, now, 'admit')
      if (!result.accepted) return { fence: result }
      return { fence: result, claim: this.#claim(key, req, now, 'admit') }
    })
  }

  highest(resource: string): Promise<bigint | undefined> {
    return this.#call('highest', () => this.#fences.get(resource))
  }

  mark(resource: string): Promise<FenceMark | undefined> {
    return this.#call('mark', () => {
      const highest = this.#fences.get(resource)
      return highest === undefined ? undefined : { highest, since: this.#since.get(resource) }
    })
  }

  claim(key: RecordKey, req: ClaimRequest, now: number): Promise<ClaimResult> {
    return this.#call('claim', () => this.#claim(key, req, now, 'claim'))
  }

  #claim(key: RecordKey, req: ClaimRequest, now: number, op: string): ClaimResult {
    const id = recordId(key)
    const { result, write } = decideClaim(this.#get(id), req, now)
    if (write) this.#put(id, write, now, op)
    return result
  }

  finish(key: RecordKey, claimId: string, done: Completion, ttlMs: number, now: number): Promise<void> {
    return this.#call('finish', () => {
      const id = recordId(key)
      const next = decideFinish(this.#get(id), claimId, done, ttlMs, now)
      if (next) this.#put(id, next, now, 'finish')
    })
  }

  renew(key: RecordKey, claimId: string, leaseMs: number, now: number): Promise<boolean> {
    return this.#call('renew', () => {
      const r = this.#get(recordId(key))
      if (!mayRelease(r, claimId)) return false
      r!.leaseUntil = now + leaseMs
      return true
    })
  }

  release(key: RecordKey, claimId: string): Promise<void> {
    return this.#call('release', () => {
      const id = recordId(key)
      if (mayRelease(this.#get(id), claimId)) this.#held.delete(id)
    })
  }

  resolve(key: RecordKey, as: Resolution, ttlMs: number, now: number): Promise<ResolveResult> {
    return this.#call('resolve', () => {
      const id = recordId(key)
      const { result, write } = decideResolve(this.#get(id), as, ttlMs, now)
      if (write === null) this.#held.delete(id)
      else if (write) this.#put(id, write, now, 'resolve')
      return result
    })
  }

  unknowns(now: number, options: { route?: string; limit?: number } = {}): Promise<UnknownRecord[]> {
    return this.#call('unknowns', () => {
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
    })
  }

  /** `fencing.serialize: store`: per resource, the registered writes by id; expired ones go when their resource is next written */
  readonly #registrations = new Map<string, Map<string, Registered>>()
  /** when every resource's expired registrations were last deleted (held ones of resources nobody writes again) */
  #swept = 0

  /** One synchronous section: nothing runs between reading the mark and registering. */
  register(resource: string, token: bigint, id: string, deadline: number, now: number): Promise<Registration> {
    return this.#call('register', (): Registration => {
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
    })
  }

  olderRegistered(resource: string, token: bigint, now: number): Promise<OlderWrites> {
    return this.#call('older_registered', () => {
      const writes = this.#registrations.get(resource)
      return writes === undefined ? { until: 0 } : olderOf(writes.values(), token, now)
    })
  }

  unregister(resource: string, id: string, until = 0): Promise<void> {
    return this.#call('unregister', () => {
      const writes = this.#registrations.get(resource)
      const w = writes?.get(id)
      if (!w) return
      if (until > 0) {
        w.deadline = until
        return
      }
      writes!.delete(id)
      if (writes!.size === 0) this.#registrations.delete(resource)
    })
  }

  readonly #epoch = randomUUID()

  /** A process's memory cannot lose data behind its back: the epoch never changes. */
  markers(): Promise<StateMarkers> {
    return this.#call('markers', () => ({ epoch: this.#epoch, accepted: this.#epoch }))
  }

  acceptLoss(): Promise<string> {
    return this.#call('accept_loss', () => this.#epoch)
  }

  ping(): Promise<void> {
    return this.#call('ping', () => {})
  }

  /** Every later call, of the store and of its attempt log, rejects with StoreError. */
  async close(): Promise<void> {
    this.#closed = true
    this.audit.close()
  }
}
