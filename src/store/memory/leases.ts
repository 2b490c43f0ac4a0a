/**
 * The memory store's leases (contract §3a, ../contract/leases.ts): one row per resource, the
 * shared state machine (../shared/lease-state.ts) run on it inside the store's synchronous
 * section, with the resource's mark read and — for a grant — raised by the store's own fence.
 */
import type { Lease, LeaseChange, LeaseGrant } from '../contract/leases.js'
import { decideAcquire, decideRelease, decideRenew, readOf, type LeaseRow } from '../shared/lease-state.js'

export class MemoryLeases {
  readonly #rows = new Map<string, LeaseRow>()

  /** @param raise sets the mark to the granted token (it throws when the store is full: nothing is granted then) */
  acquire(resource: string, holder: string, ttlMs: number, now: number, highest: bigint | undefined, raise: (token: bigint) => void): LeaseGrant {
    const { result, write } = decideAcquire(resource, this.#rows.get(resource), highest, holder, ttlMs, now)
    if (write) {
      raise(write.token)
      this.#rows.set(resource, write)
    }
    return result
  }

  renew(resource: string, token: bigint, now: number, highest: bigint | undefined): LeaseChange {
    return this.#apply(resource, decideRenew(resource, this.#rows.get(resource), highest, token, now))
  }

  release(resource: string, token: bigint, highest: bigint | undefined): LeaseChange {
    return this.#apply(resource, decideRelease(resource, this.#rows.get(resource), highest, token))
  }

  read(resource: string, now: number): Lease | undefined {
    return readOf(resource, this.#rows.get(resource), now)
  }

  #apply(resource: string, d: { result: LeaseChange; write?: LeaseRow }): LeaseChange {
    if (d.write) this.#rows.set(resource, d.write)
    return d.result
  }
}
