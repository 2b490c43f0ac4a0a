/**
 * What the request path's middleware share through Hono's context (`c.var`): the request's
 * facts (src/facts.ts), and what admission hands to `forward()`. The order of the chain is
 * route → admission (fencing, idempotency) → forward, see src/gateway.ts.
 */
import type { HttpBindings } from '@hono/node-server'
import type { RequestFacts } from './facts.js'
import type { UnknownReason } from './outcomes.js'
import type { CompiledRoute } from './route.js'

/** What the upstream answered, as the idempotency layer sees it before the client does. */
export interface UpstreamResponse {
  status: number
  /** end-to-end header lines, lower-case names */
  headers: [string, string][]
  /** the whole body, or undefined when it was larger than `Exchange.captureBytes` */
  body: Buffer | undefined
}

/**
 * Hooks the idempotency record hands to `forward()` so the record is written before the
 * client sees the response (a retry racing the response's end then finds it completed).
 */
export interface Exchange {
  /** buffer the upstream body up to this many bytes to store it */
  captureBytes: number
  /** called once response headers (and the captured body) are in, before anything is sent */
  onResponse(res: UpstreamResponse): Promise<void>
  /** called when no complete response came: `sent` false means nothing reached the upstream */
  onFailure(failure: { sent: false } | { sent: true; reason: UnknownReason }): Promise<void>
}

/** The part of the fencing window tracker `forward()` uses (src/fencing/window-tracker.ts). */
export interface FenceWindow {
  /** the request with `token` is being sent upstream */
  markSent(token: bigint): void
}

export type GatewayEnv = {
  Bindings: HttpBindings
  Variables: {
    /** set first, by observe; filled along the path */
    facts: RequestFacts
    route: CompiledRoute
    /** the request body when admission read it (idempotency fingerprints it) */
    body: Buffer
    /** set by admission for a claimed key */
    exchange: Exchange
    /** set by admission for a fenced request: its resource's entry in the window tracker */
    flights: FenceWindow
  }
}
