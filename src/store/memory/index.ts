/**
 * In-process store. Not shared between processes and lost on exit: for development, tests and
 * single-process deployments that accept losing high-water marks on restart.
 * Nothing is forgotten before its time to make room (contract §2): past `maxResources` a new
 * resource is refused (StoreFull: 503, counted, logged), never a mark forgotten; past
 * `maxRecords` unexpired idempotency records a new key is refused the same way — forgetting a
 * completed record would let a retry of its key be forwarded again, a second effect — unless
 * the operator accepted eviction of completed records (`store.acceptRisks: [maxRecords]`), each
 * one counted (./records.ts).
 */
import { randomUUID } from 'node:crypto'
import { decideClaim, decideFinish, decideRelease, decideResolve, decideSettle, decideTakeProbe, mayRenew, parseRecordId } from '../shared/record-state.js'
import { unknownAt } from '../shared/unknown-record.js'
import { recordId } from '../shared/record-state.js'
import { closedError, storeError } from '../shared/call.js'
import { StoreFull, type AdmitResult, type FenceMark, type FenceRequest, type StateMarkers, type ClaimRequest, type ClaimResult, type Completion, type FenceResult, type RecordKey, type ReleaseResult, type ProbeTake, type Resolution, type Settlement, type SettleResult, type ResolveResult, type Store, type UnknownRecord } from '../contract/store.js'
import { MemoryAuditLog } from './attempt-log.js'
import type { OlderWrites, Registration } from '../contract/store.js'
import { RecordTable } from './records.js'
import { RegisteredWrites } from './registrations.js'
import type { MemoryCapacity, MemoryStoreOptions } from './options.js'
import { WriteSequence } from '../state-loss/sequence.js'
import { MemoryLeases } from './leases.js'
import type { Lease, LeaseChange, LeaseGrant } from '../contract/leases.js'
import type { LossNote } from '../state-loss/note.js'

export type { MemoryCapacity, MemoryStoreOptions } from './options.js'

export class MemoryStore implements Store {
  readonly kind = 'memory' as const
  readonly inProcess = true
  readonly #fences = new Map<string, bigint>()
  /** when each resource's mark was first accepted (FenceResult.since), epoch ms */
  readonly #since = new Map<string, number>()
  readonly #records: RecordTable
  readonly #maxRecords: number
  readonly #maxResources: number
  readonly #evictRecords: boolean
  readonly #made = Date.now()
  #longestTtl = 0
  #evictionListener?: (route: string) => void
  readonly audit: MemoryAuditLog
  #closed = false

  constructor(options: MemoryStoreOptions = {}) {
    const { maxResources = 1_000_000, maxRecords = 100_000 } = options
    if (!Number.isInteger(maxResources) || maxResources < 1) throw new TypeError('options.maxResources must be a positive integer')
    if (!Number.isInteger(maxRecords) || maxRecords < 1) throw new TypeError('options.maxRecords must be a positive integer')
    this.#maxResources = maxResources
    this.#maxRecords = maxRecords
    this.#evictRecords = options.evictRecords ?? false
    this.#records = new RecordTable({ max: maxRecords, evict: this.#evictRecords, onEvict: (id) => this.#evictionListener?.(parseRecordId(id).route) })
    this.audit = new MemoryAuditLog({ capacity: options.auditCapacity, retentionMs: options.auditRetentionMs, evict: options.evictAttempts })
    this.sequence = options.sequence ?? new WriteSequence()
  }

  /**
   * Calls `record` with the route of every completed record dropped before its ttl, and `attempt`
   * for every attempt log entry dropped within the retention (guardStore counts them).
   */
  watchEvictions(record: (route: string) => void, attempt?: () => void): void {
    this.#evictionListener = record
    this.audit.onEvict = attempt
  }

  /** How full the store is and how fast it filled since it was made. */
  capacity(now = Date.now()): MemoryCapacity {
    return {
      records: this.#records.size, maxRecords: this.#maxRecords, evictRecords: this.#evictRecords,
      resources: this.#fences.size, maxResources: this.#maxResources,
      added: this.#records.added, overMs: now - this.#made, longestTtlMs: this.#longestTtl, evicted: this.#records.evicted,
    }
  }

  /**
   * Runs one call in a synchronous section (nothing else runs inside it).
   * @throws StoreError after `close()`, or when the section threw (capacity, or a bug)
   */
  #call<T>(op: string, fn: () => T): Promise<T> {
    if (this.#closed) return Promise.reject(closedError(op))
    try {
      return Promise.resolve(fn())
    } catch (e) {
      return Promise.reject(storeError('memory', op, e))
    }
  }

  /** This process's write sequence (../state-loss/sequence.ts); a process's memory never goes back, but the suite holds every store to the refusal. */
  readonly sequence: WriteSequence
  #seq = 0n

  /** `#call` for a write: refused before it changes anything when the sequence is below what was seen, else advances it. */
  #write<T>(op: string, fn: () => T): Promise<T> {
    return this.#call(op, () => {
      if (this.#seq < this.sequence.seen) throw this.sequence.wentBack(op, `sequence ${this.#seq} after ${this.sequence.seen} was seen`, { signal: 'sequence', now: String(this.#seq), was: String(this.sequence.seen) })
      const out = fn()
      this.sequence.saw(++this.#seq)
      return out
    })
  }

  fence(resource: string, token: bigint, now = Date.now()): Promise<FenceResult> {
    return this.#write('fence', () => this.#fence(resource, token, now, 'fence'))
  }

  /** @throws StoreError naming `op` when a new resource would pass maxResources */
  #fence(resource: string, token: bigint, now: number, op: string): FenceResult {
    const highest = this.#fences.get(resource)
    if (highest === undefined) {
      if (this.#fences.size >= this.#maxResources) {
        throw new StoreFull(`the memory store holds ${this.#maxResources} high-water marks (store.maxResources) and forgets none, so a new resource cannot be fenced`, op, 'max_resources', this.#maxResources)
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
   * stands: a raised mark stays raised, as a lone `fence` would have left it (src/store/contract/store.ts).
   */
  admit(fence: FenceRequest, key: RecordKey, req: ClaimRequest, now: number): Promise<AdmitResult> {
    return this.#write('admit', () => {
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
    return this.#write('claim', () => this.#claim(key, req, now, 'claim'))
  }

  #claim(key: RecordKey, req: ClaimRequest, now: number, op: string): ClaimResult {
    const id = recordId(key)
    if (req.ttlMs > this.#longestTtl) this.#longestTtl = req.ttlMs
    const { result, write } = decideClaim(this.#records.get(id), req, now)
    if (write) this.#records.put(id, write, now, op)
    return result
  }

  finish(key: RecordKey, claimId: string, done: Completion, ttlMs: number, now: number): Promise<void> {
    return this.#write('finish', () => {
      const id = recordId(key)
      const next = decideFinish(this.#records.heldRecord(id), claimId, done, ttlMs, now)
      if (next) this.#records.put(id, next, now, 'finish')
    })
  }

  renew(key: RecordKey, claimId: string, leaseMs: number, now: number): Promise<boolean> {
    return this.#call('renew', () => {
      const r = this.#records.heldRecord(recordId(key))
      if (!mayRenew(r, claimId)) return false
      r!.leaseUntil = now + leaseMs
      return true
    })
  }

  release(key: RecordKey, claimId: string): Promise<ReleaseResult> {
    return this.#write('release', () => {
      const id = recordId(key)
      const { result, write } = decideRelease(this.#records.heldRecord(id), claimId)
      if (write === null) this.#records.delete(id)
      // a held record replaced by a held one: no room to make, no ttl group, so `now` is not read
      else if (write) this.#records.put(id, write, 0, 'release')
      return result
    })
  }

  takeProbe(key: RecordKey, p: { seen: number; afterMs: number; nextInMs: number }, now: number): Promise<ProbeTake> {
    return this.#write('take_probe', () => {
      const id = recordId(key)
      const { result, write } = decideTakeProbe(this.#records.heldRecord(id), p, now)
      // a held record replaced by a held one: no room to make
      if (write) this.#records.put(id, write, now, 'take_probe')
      return result
    })
  }

  settle(key: RecordKey, probes: number, as: Settlement, ttlMs: number, now: number): Promise<SettleResult> {
    return this.#write('settle', () => {
      const id = recordId(key)
      const { result, write } = decideSettle(this.#records.heldRecord(id), probes, as, ttlMs, now)
      if (write === null) this.#records.delete(id)
      else if (write) this.#records.put(id, write, now, 'settle')
      return result
    })
  }

  resolve(key: RecordKey, as: Resolution, ttlMs: number, now: number): Promise<ResolveResult> {
    return this.#write('resolve', () => {
      const id = recordId(key)
      const { result, write } = decideResolve(this.#records.get(id), as, ttlMs, now)
      if (write === null) this.#records.delete(id)
      else if (write) this.#records.put(id, write, now, 'resolve')
      return result
    })
  }

  unknowns(now: number, options: { route?: string; limit?: number } = {}): Promise<UnknownRecord[]> {
    return this.#call('unknowns', () => {
      const { route, limit = 1000 } = options
      const out: UnknownRecord[] = []
      for (const [id, r] of this.#records.held) {
        if (out.length >= limit) break
        const u = unknownAt(() => parseRecordId(id), r, now)
        if (u && (route === undefined || u.key.route === route)) out.push(u)
      }
      return out
    })
  }

  unknownRecord(key: RecordKey, now: number): Promise<UnknownRecord | undefined> {
    return this.#call('unknown_record', () => unknownAt(key, this.#records.get(recordId(key)), now))
  }

  /** contract §3a: each resource's lease, beside its mark; the grant raises the mark in the same section */
  readonly #leases = new MemoryLeases()
  acquireLease(resource: string, holder: string, ttlMs: number, now: number): Promise<LeaseGrant> { return this.#write('lease_acquire', () => this.#leases.acquire(resource, holder, ttlMs, now, this.#fences.get(resource), (t) => this.#fence(resource, t, now, 'lease_acquire'))) }
  renewLease(resource: string, token: bigint, now: number): Promise<LeaseChange> { return this.#write('lease_renew', () => this.#leases.renew(resource, token, now, this.#fences.get(resource))) }
  releaseLease(resource: string, token: bigint): Promise<LeaseChange> { return this.#write('lease_release', () => this.#leases.release(resource, token, this.#fences.get(resource))) }
  readLease(resource: string, now: number): Promise<Lease | undefined> { return this.#call('lease_read', () => this.#leases.read(resource, now)) }

  /** `fencing.serialize: store` */
  readonly #registrations = new RegisteredWrites()

  /** One synchronous section: nothing runs between reading the mark and registering. */
  register(resource: string, token: bigint, id: string, deadline: number, now: number): Promise<Registration> {
    return this.#write('register', (): Registration => {
      const highest = this.#fences.get(resource)
      if (highest !== undefined && token < highest) return { registered: false, highest }
      return { registered: true, ...this.#registrations.add(resource, token, id, deadline, now) }
    })
  }

  olderRegistered(resource: string, token: bigint, now: number): Promise<OlderWrites> {
    return this.#call('older_registered', () => this.#registrations.older(resource, token, now))
  }

  unregister(resource: string, id: string, until = 0): Promise<void> {
    return this.#write('unregister', () => this.#registrations.remove(resource, id, until))
  }

  #epoch = randomUUID()
  #accepted = this.#epoch
  #note?: LossNote

  /** A process's memory cannot lose data behind its back: the epoch changes only when retired. */
  markers(): Promise<StateMarkers> {
    return this.#call('markers', () => ({ epoch: this.#epoch, accepted: this.#accepted, note: this.#note }))
  }

  acceptLoss(): Promise<string> {
    return this.#call('accept_loss', () => { this.#note = undefined; return this.#accepted = this.#epoch })
  }

  retireEpoch(note: LossNote): Promise<void> {
    return this.#call('retire_epoch', () => { this.#note = note; this.#epoch = randomUUID() })
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
