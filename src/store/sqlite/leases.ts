/**
 * The SQLite store's leases (contract §3a, ../contract/leases.ts): the shared state machine
 * (../shared/lease-state.ts) on fg_leases_v1 and the mark in fg_fences_v1, inside the write
 * transaction the engine opened with BEGIN IMMEDIATE, so the read of both and the writes hold
 * SQLite's write lock together across every process sharing the file. `now` is the caller's: the
 * processes sharing a file share one host's clock.
 */
import type { Database as Db, Statement } from 'better-sqlite3'
import type { Lease, LeaseChange, LeaseGrant } from '../contract/leases.js'
import { decideAcquire, decideRelease, decideRenew, readOf, type LeaseRow } from '../shared/lease-state.js'
import { LEASES } from './sql.js'
import type { Operations } from './operations.js'

interface Row { token: bigint; holder: string; expires_at: bigint; ttl_ms: bigint; released: bigint }

export class SqliteLeases {
  readonly #get: Statement
  readonly #put: Statement

  constructor(db: Db, private readonly ops: Operations) {
    this.#get = db.prepare(LEASES.get).safeIntegers(true)
    this.#put = db.prepare(LEASES.put)
  }

  #row(resource: string): LeaseRow | undefined {
    const r = this.#get.get(resource) as Row | undefined
    return r && { token: r.token, holder: r.holder, expiresAt: Number(r.expires_at), ttlMs: Number(r.ttl_ms), released: r.released !== 0n }
  }

  #write(resource: string, w: LeaseRow): void {
    this.#put.run(resource, w.token, w.holder, w.expiresAt, w.ttlMs, w.released ? 1 : 0)
  }

  /** The grant raises the mark first (a fence of the new token, which is above it), then writes the lease. */
  acquire(resource: string, holder: string, ttlMs: number, now: number): LeaseGrant {
    const { result, write } = decideAcquire(resource, this.#row(resource), this.ops.highest(resource), holder, ttlMs, now)
    if (write) {
      this.ops.fence(resource, write.token, now)
      this.#write(resource, write)
    }
    return result
  }

  renew(resource: string, token: bigint, now: number): LeaseChange {
    const { result, write } = decideRenew(resource, this.#row(resource), this.ops.highest(resource), token, now)
    if (write) this.#write(resource, write)
    return result
  }

  release(resource: string, token: bigint): LeaseChange {
    const { result, write } = decideRelease(resource, this.#row(resource), this.ops.highest(resource), token)
    if (write) this.#write(resource, write)
    return result
  }

  read(resource: string, now: number): Lease | undefined {
    return readOf(resource, this.#row(resource), now)
  }
}
