/**
 * What the request path's middleware share through Hono's context (`c.var`), in the order
 * they set it: route → fencing → idempotency → forward.
 */
import type { HttpBindings } from '@hono/node-server'
import type { CompiledRoute } from './route.js'
import type { Outcome } from './problems.js'
import type { FenceRequest, FenceResult, RecordKey, UnknownReason } from './store/types.js'

/** What the upstream answered, as the idempotency layer sees it before the client does. */
export interface UpstreamResponse {
  status: number
  /** end-to-end header lines, lower-case names */
  headers: [string, string][]
  /** the whole body, or undefined when it was larger than `Exchange.captureBytes` */
  body: Buffer | undefined
}

/**
 * Hooks the idempotency middleware hands to `forward()` so the record is written before the
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

/** What fencing accepted for a request (`c.var.fence`). */
export interface Fence {
  resource: string
  token: bigint
  highest: bigint
  /** the resource's in-flight entry in this process; `forward()` tells it when the request is sent */
  flights?: FenceFlights
  /** set by `flights.markSent` when `forward()` sends the request upstream */
  sent?: boolean
  /** set by fencing when the request ended after a newer token of its resource was sent upstream */
  overtaken?: boolean
}

/**
 * A fencing check that `fencing()` hands to `idempotency()`, so the store can answer it with the
 * claim in one call (`Store.admit`). Whoever makes it calls `settle` with the store's answer;
 * `forward()` refuses to send a request whose check is still pending.
 */
export interface PendingFence extends FenceRequest {
  settled: boolean
  /** records the answer on the request (`c.var.fence`); throws the 412 problem when stale */
  settle(result: FenceResult): void
}

/** The part of the fencing in-flight tracker `forward()` uses (src/fencing/inflight.ts). */
export interface FenceFlights {
  markSent(fence: Fence): void
}

export type GatewayEnv = {
  Bindings: HttpBindings
  Variables: {
    route: CompiledRoute
    /** set first, by observe: the client's request id when sane, else a new one */
    requestId: string
    outcome: Outcome
    /** the request body when a middleware had to read it (idempotency fingerprints it) */
    body: Buffer
    exchange: Exchange
    /** filled by fencing: for logs and traces */
    fence: Fence
    /** set by fencing on routes with idempotency: the check idempotency makes with its claim */
    pendingFence: PendingFence
    /** the status to count when none was sent: 499 for a client that left (nginx's convention) */
    code: number
    /** filled by idempotency */
    idempotencyResult: string
    /** filled by idempotency: the record's key (traces carry only its hash, never the key) */
    idempotencyRecord: RecordKey
    /** filled by idempotency: the request's fingerprint, for the attempt log */
    fingerprint: string
    /** filled by idempotency: this attempt found an earlier one abandoned past its lease (reason crash) */
    abandoned: boolean
    /** filled by idempotency: the key is forwarded again after an unknown outcome (unknownOutcome: retry) */
    duplicateForward: boolean
    /** filled by forward: why this request's outcome is unknown, when it is */
    unknownReason: UnknownReason
    /** filled by forward: the status the upstream answered */
    upstreamStatus: number
  }
}
