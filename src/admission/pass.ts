/**
 * What admission (./index.ts) hands the request path: whether the request goes upstream, and
 * what admission opened for it, which the pass closes. One owner for the check-to-apply window:
 * entered in `Admission.admit`, told the request is going upstream through the pass
 * (`markSent`, called by the send step: src/forward/send.ts `Sending`), ended by the pass's
 * `end()` — with the claim's lease — once the request is over, however it ended.
 */
import type { RequestFacts } from '../facts.js'
import type { RequestWindow } from '../fencing/request-window.js'
import type { Claim } from '../idempotency/index.js'
import type { Sending } from '../forward/send.js'

export interface PassParts {
  /** true: forward it; false: admission answered it (a refusal or a replay) */
  admitted: boolean
  /** the request's facts, for the window's end (undefined only when nothing was opened) */
  facts?: RequestFacts
  /** the fenced request's window, entered before its store check */
  window?: RequestWindow
  /** the claimed key, to record what came of the request */
  claim?: Claim
  /** the body, read for the claim's fingerprint */
  body?: Buffer
}

export class Pass implements Sending {
  readonly admitted: boolean
  readonly claim: Claim | undefined
  readonly body: Buffer | undefined
  /** bytes of the answer to capture for the claim's record; 0 streams */
  readonly captureBytes: number
  readonly #window: RequestWindow | undefined
  readonly #facts: RequestFacts | undefined

  constructor(p: PassParts) {
    this.admitted = p.admitted
    this.claim = p.claim
    this.body = p.body
    this.captureBytes = p.claim?.captureBytes ?? 0
    this.#window = p.window
    this.#facts = p.facts
  }

  /** The request is going upstream (from undici's first write): the window is told. */
  markSent(): void {
    this.#window?.markSent()
  }

  /** The request is over: the claim's lease stops being renewed, the window ends. */
  async end(): Promise<void> {
    this.claim?.end()
    if (this.#window !== undefined) await this.#window.end(this.#facts!)
  }
}

/** A request admission answered, with nothing opened. */
export const ANSWERED = new Pass({ admitted: false })

/** A request of a route with neither check: forwarded, nothing opened. */
export const UNGUARDED = new Pass({ admitted: true })
