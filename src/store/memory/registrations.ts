/**
 * The memory store's registrations of `fencing.serialize: store` (`Store.register`): per
 * resource, the registered writes by id. Expired ones go when their resource is next written,
 * and every resource's once a minute (the held ones of resources nobody writes again).
 */
import type { OlderWrites } from '../contract/store.js'
import { olderOf, type Registered } from '../shared/registrations.js'

/** How often every resource's expired registrations are deleted, ms. */
const SWEEP_EVERY_MS = 60_000

export class RegisteredWrites {
  readonly #byResource = new Map<string, Map<string, Registered>>()
  /** when every resource's expired registrations were last deleted */
  #swept = 0

  /** Registers write `id` of `token` until `deadline` (epoch ms); answers the older writes still registered. */
  add(resource: string, token: bigint, id: string, deadline: number, now: number): OlderWrites {
    if (now - this.#swept >= SWEEP_EVERY_MS) {
      this.#swept = now
      for (const [r, ws] of this.#byResource) {
        for (const [k, w] of ws) if (w.deadline <= now) ws.delete(k)
        if (ws.size === 0) this.#byResource.delete(r)
      }
    }
    let writes = this.#byResource.get(resource)
    if (writes === undefined) this.#byResource.set(resource, (writes = new Map()))
    for (const [k, w] of writes) if (w.deadline <= now) writes.delete(k)
    writes.set(id, { token, deadline })
    return olderOf(writes.values(), token, now)
  }

  /** The writes of `resource` registered with a token below `token`, still within their deadline. */
  older(resource: string, token: bigint, now: number): OlderWrites {
    const writes = this.#byResource.get(resource)
    return writes === undefined ? { until: 0 } : olderOf(writes.values(), token, now)
  }

  /** Ends write `id`: deleted, or with `until` > 0 (epoch ms) kept until then. */
  remove(resource: string, id: string, until: number): void {
    const writes = this.#byResource.get(resource)
    const w = writes?.get(id)
    if (!w) return
    if (until > 0) {
      w.deadline = until
      return
    }
    writes!.delete(id)
    if (writes!.size === 0) this.#byResource.delete(resource)
  }
}
