/**
 * The one writer of the gateway's own answers on the proxy listener. Every refusal — the front
 * door's (./front-door.ts), a route's (./request-path.ts), admission's (./admission/), the
 * gateway's own failure (./gateway.ts) — goes through `refuse`: it records the outcome on the
 * request's facts and writes the problem (./problems.ts). A StoreError is turned into its problem
 * here (contract §4: fail closed), so a store that cannot answer is one refusal among the others.
 * A request nobody is left to answer goes through `unanswered`.
 */
import { randomUUID } from 'node:crypto'
import { ServerResponse, STATUS_CODES } from 'node:http'
import type { Duplex } from 'node:stream'
import type { RequestFacts } from './facts.js'
import type { Outcome } from './outcomes.js'
import { Problem, stateLost, storeUnavailable } from './problems.js'
import { StoreError } from './store/index.js'
import { StoreWentBack } from './store/index.js'
import { timelineLink } from './ui/links.js'

/** How a listener writes its refusals. */
export interface Refusing {
  /** the request id header, lower case */
  readonly idHeader: string
  /** admin.publicUrl: a refusal of a key or a resource names its timeline in the audit view */
  readonly publicUrl?: string
}

/**
 * Who is refused: a request with facts (counted like every request: its outcome recorded, its
 * id the problem's `instance`), or one at the door (no facts: outside the request metrics and
 * the attempt log, answered with a new request id and the connection closed after the answer;
 * `outgoing` is the connection itself for what Node's parser refused).
 */
export type Refused =
  | { readonly outgoing: ServerResponse; readonly facts: RequestFacts }
  | { readonly outgoing: ServerResponse | Duplex; readonly facts?: undefined }

/** The 503 of a store that cannot answer (contract §3, §4): its state lost (it went back in time), else unavailable. */
export const storeProblem = (e: StoreError): Problem => e instanceof StoreWentBack ? stateLost() : storeUnavailable(e)

/**
 * Writes a refusal. When the response has begun already, nothing more can be written: the
 * outcome is recorded and the connection destroyed.
 * @param cause the problem, or the StoreError whose 503 it is
 */
export function refuse(to: Refused, cause: Problem | StoreError, how: Refusing): void {
  const p = cause instanceof StoreError ? storeProblem(cause) : cause
  if (to.facts === undefined) return atDoor(to.outgoing, p, how.idHeader)
  const { outgoing, facts: f } = to
  f.outcome = p.outcome
  if (outgoing.headersSent) {
    outgoing.destroy()
    return
  }
  const timeline = how.publicUrl && timelineLink({ outcome: f.outcome, keyHash: f.keyHash, resource: f.resource }, how.publicUrl)
  p.respond(outgoing, f.requestId, how.idHeader, timeline ? { timeline } : undefined)
}

/**
 * A request nobody is left to answer (the client left): its outcome recorded, counted with 499
 * (nginx's "client closed request"), its connection destroyed.
 */
export function unanswered(to: { readonly outgoing: ServerResponse; readonly facts: RequestFacts }, outcome: Outcome): void {
  to.facts.outcome = outcome
  to.facts.code = 499
  to.outgoing.destroy()
}

/** A problem answered on the listener: a new request id, the connection closed after it. */
function atDoor(outgoing: ServerResponse | Duplex, p: Problem, idHeader: string): void {
  const id = randomUUID()
  const body = p.body(id)
  const head: Record<string, string | number> = { ...p.responseHeaders(id, idHeader), 'content-length': Buffer.byteLength(body), connection: 'close' }
  if (outgoing instanceof ServerResponse) {
    outgoing.writeHead(p.status, head)
    outgoing.end(body)
    return
  }
  // a connection Node's parser refused: no response object, the status line written by hand
  const socket = outgoing
  const lines = Object.entries(head).map(([k, v]) => `${k}: ${v}\r\n`).join('')
  socket.end(`HTTP/1.1 ${p.status} ${STATUS_CODES[p.status] ?? 'Bad Request'}\r\n${lines}\r\n${body}`, () => socket.destroy())
}
