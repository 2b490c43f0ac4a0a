/**
 * The memory store's idempotency records, bounded by `store.maxRecords` without ever forgetting
 * one silently (contract §2):
 * - in-flight and unknown-outcome records are never dropped before they expire: forgetting one
 *   lets its key be forwarded again;
 * - completed records are kept for their ttl; when `maxRecords` unexpired records are held, a new
 *   key is refused (StoreFull: 503), unless the operator accepted eviction (`store.acceptRisks:
 *   [maxRecords]`), in which case the oldest completed record goes and the eviction is reported
 *   (`onEvict`: `fencegate_idempotency_evicted_total`) — a retry of that key is then forwarded
 *   again, a second effect.
 *
 * A completed record costs what its bytes cost: its response is packed into one one-byte string
 * (status, header lines, body), no object per header and no Buffer view holding on to the socket
 * chunk the body came in. Expiry is checked as records are added, oldest first within each ttl:
 * O(1) per new record, so the cost of a request does not grow as the store fills.
 */
import { StoreFull, type StoredResponse } from '../contract/store.js'
import type { IdemRecord } from '../shared/record-state.js'

/** A completed or not_stored record as kept: `packed` is the response (completed) or its status (not_stored). */
interface Kept {
  fingerprint: string
  expiresAt: number
  packed: string | number
}

/**
 * The response in one string: `status \n (name \r value \n)* \n body`, latin1 (one byte a char).
 * Header names and values never hold CR or LF (node:http refuses them), so the separators are safe.
 */
export function packResponse(r: StoredResponse): string {
  let head = `${r.status}\n`
  for (const [name, value] of r.headers) head += `${name}\r${value}\n`
  head += '\n'
  // one flat one-byte string, copied once: concatenating would keep a rope of the pieces
  const buf = Buffer.allocUnsafe(head.length + r.body.length)
  r.body.copy(buf, buf.write(head, 0, 'latin1'))
  return buf.toString('latin1')
}

export function unpackResponse(s: string): StoredResponse {
  let i = s.indexOf('\n')
  const status = Number(s.slice(0, i))
  const headers: [string, string][] = []
  for (i++; s.charCodeAt(i) !== 10; ) {
    const cr = s.indexOf('\r', i)
    const lf = s.indexOf('\n', cr)
    headers.push([s.slice(i, cr), s.slice(cr + 1, lf)])
    i = lf + 1
  }
  return { status, headers, body: Buffer.from(s.slice(i + 1), 'latin1') }
}

export interface RecordTableOptions {
  max: number
  /** `store.acceptRisks: [maxRecords]`: drop the oldest completed record instead of refusing */
  evict: boolean
  /** called for each completed record dropped before its ttl, with its id */
  onEvict?: (id: string) => void
}

export class RecordTable {
  readonly #max: number
  readonly #evict: boolean
  readonly #onEvict?: (id: string) => void
  /** in_flight and unknown records, kept until they expire or change state */
  readonly #held = new Map<string, IdemRecord>()
  /** completed and not_stored records by their ttl, each map in the order they completed (= expiry order) */
  readonly #kept = new Map<number, Map<string, Kept>>()
  #keptSize = 0
  /** no held record expires before this, epoch ms: a full table need not look through them again */
  #heldNext = 0
  /** records added under a new id since start (the observed rate `fencegate doctor` reports) */
  added = 0
  evicted = 0

  constructor(options: RecordTableOptions) {
    this.#max = options.max
    this.#evict = options.evict
    this.#onEvict = options.onEvict
  }

  get size(): number {
    return this.#held.size + this.#keptSize
  }

  get held(): ReadonlyMap<string, IdemRecord> {
    return this.#held
  }

  get(id: string): IdemRecord | undefined {
    const h = this.#held.get(id)
    if (h !== undefined) return h
    for (const group of this.#kept.values()) {
      const k = group.get(id)
      if (k === undefined) continue
      return typeof k.packed === 'string'
        ? { state: 'completed', fingerprint: k.fingerprint, claimId: '', leaseUntil: 0, expiresAt: k.expiresAt, response: unpackResponse(k.packed) }
        : { state: 'not_stored', fingerprint: k.fingerprint, claimId: '', leaseUntil: 0, expiresAt: k.expiresAt, status: k.packed }
    }
    return undefined
  }

  /** The held (in_flight or unknown) record itself, for `renew` to extend in place. */
  heldRecord(id: string): IdemRecord | undefined {
    return this.#held.get(id)
  }

  #deleteKept(id: string): boolean {
    for (const group of this.#kept.values()) {
      if (group.delete(id)) { this.#keptSize--; return true }
    }
    return false
  }

  delete(id: string): void {
    if (!this.#held.delete(id)) this.#deleteKept(id)
  }

  /**
   * Stores `r` under `id`, replacing what was there.
   * @throws StoreFull naming `op` when `id` is new and `max` unexpired records are held (and no
   *   completed one may be evicted)
   */
  put(id: string, r: IdemRecord, now: number, op: string): void {
    const existed = this.#held.delete(id) || this.#deleteKept(id)
    if (!existed) {
      this.#makeRoom(now, op)
      this.added++
    }
    if (r.state === 'in_flight' || r.state === 'unknown') {
      this.#held.set(id, r)
      if (r.expiresAt < this.#heldNext) this.#heldNext = r.expiresAt
      return
    }
    const ttl = r.expiresAt - now
    let group = this.#kept.get(ttl)
    if (group === undefined) this.#kept.set(ttl, (group = new Map()))
    group.set(id, { fingerprint: r.fingerprint, expiresAt: r.expiresAt, packed: r.state === 'completed' ? packResponse(r.response!) : r.status ?? 0 })
    this.#keptSize++
  }

  /** Drops expired records; when the table is still full, evicts the oldest completed record or throws. */
  #makeRoom(now: number, op: string): void {
    // the oldest of each ttl expire first: O(1) a new record, amortised; most calls look at one
    // head and stop, so the head is read without an iterator of entries
    for (const group of this.#kept.values()) {
      while (group.size > 0) {
        const id = group.keys().next().value as string
        if (group.get(id)!.expiresAt > now) break
        group.delete(id)
        this.#keptSize--
      }
    }
    if (this.size < this.#max) return
    if (this.#held.size > 0 && now >= this.#heldNext) {
      let next = Infinity
      for (const [id, h] of this.#held) {
        if (h.expiresAt <= now) this.#held.delete(id)
        else if (h.expiresAt < next) next = h.expiresAt
      }
      this.#heldNext = next
      if (this.size < this.#max) return
    }
    let oldest: { group: Map<string, Kept>; id: string; done: number } | undefined
    for (const [ttl, group] of this.#kept) {
      const first = group.entries().next()
      if (first.done) continue
      const done = first.value[1].expiresAt - ttl
      if (!oldest || done < oldest.done) oldest = { group, id: first.value[0], done }
    }
    if (this.#evict && oldest) {
      oldest.group.delete(oldest.id)
      this.#keptSize--
      this.evicted++
      this.#onEvict?.(oldest.id)
      return
    }
    let until = this.#held.size ? this.#heldNext : Infinity
    for (const group of this.#kept.values()) {
      const first = group.values().next()
      if (!first.done && first.value.expiresAt < until) until = first.value.expiresAt
    }
    throw new StoreFull(
      `the memory store holds ${this.#max} unexpired idempotency records (store.maxRecords) and forgets none before its ttl, so a new key cannot be recorded`,
      op, 'max_records', this.#max, Number.isFinite(until) ? until : undefined,
    )
  }
}
