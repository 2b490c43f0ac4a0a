/**
 * One upstream exchange on undici's dispatch API with a handler of our own: no request() body
 * stream, no interceptor, no signal listeners. The first `limit` bytes of the answer land in an
 * array (the idempotency record keeps them; 0 streams from the first chunk); past that the rest
 * is written straight to the client, pausing the upstream only while the client's socket is full.
 * The request counts as sent from undici's onConnect, when it starts writing it.
 *
 * The handler speaks the interface undici's core calls (onConnect, onHeaders with the raw header
 * lines, onData returning false to pause), marked deprecated in its types in favour of the
 * controller API: a controller handler is wrapped per request in undici's UnwrapHandler, which
 * also parses the headers into an object before we see them (the cost is in
 * docs/performance.md). The wrapper is the whole of the difference, so moving to it is local.
 *
 * Timeouts are this handler's own, on Node's millisecond timers: undici's `headersTimeout` and
 * `bodyTimeout` run on its shared coarse clock (about 0.5 s resolution), too coarse for a
 * timeout of a few hundred ms. One Timeout object per exchange, re-armed with `refresh()`:
 * `timeoutMs` from dispatch to the response headers (queueing and connecting included, so the
 * client's wait is bounded), then `timeoutMs` of silence between body chunks (not counted while
 * the client's socket is full and the upstream is paused for it).
 */
import { errors as undiciErrors, type Dispatcher } from 'undici'
import type { ServerResponse } from 'node:http'
import type { UnknownReason } from '../outcomes.js'

interface Waiter<T> { resolve(v: T): void; reject(e: Error): void }

const CLIENT_LEFT = 'client connection closed before the response ended'

/** An answer that declares at most this many bytes is captured whole even where it could stream. */
export const SMALL_ANSWER = 16 * 1024

/** No response headers within the timeout; `sent` false: the request never left the queue. */
export class HeadersTimeout extends undiciErrors.HeadersTimeoutError {
  constructor(readonly timeoutMs: number) {
    super(`no response headers within ${timeoutMs} ms`)
  }
}

/** The upstream went silent mid-body for longer than the timeout. */
export class BodyTimeout extends undiciErrors.BodyTimeoutError {
  constructor(readonly timeoutMs: number) {
    super(`no response body data for ${timeoutMs} ms`)
  }
}

export class UpstreamCall implements Dispatcher.DispatchHandler {
  /** true from the moment undici starts writing the request (the effect may happen from here) */
  sent = false
  /** the client left: abort the exchange (a queued request is then never written) */
  aborted = false
  status = 0
  /** the response's header lines as they came, [name, value, ...], names lower-cased */
  lines: string[] = []
  readonly chunks: Buffer[] = []
  size = 0
  /** more than `limit` bytes came: the captured chunks are a prefix, the rest is streamed */
  overflow = false
  /**
   * the answer is captured whole before the client sees it: for the record (limit > 0), or
   * because it declared a small Content-Length (nginx's proxy_buffering for small answers: one
   * write to the client, none of the streaming machinery)
   */
  captured = false
  /** the headers or body timeout fired (the exchange was aborted for it) */
  timedOut = false

  /** undici's abort for this request; set once it is dispatched on a connection */
  #abortCall?: (err: Error) => void
  /** undici's resume after onData returned false */
  #resume?: () => void
  #start?: Waiter<void>
  #body?: Waiter<boolean>
  #stream?: { out: ServerResponse; fail(e: Error): void }
  #ended = false
  #error?: Error
  /** body bytes still to come per Content-Length; undefined when chunked, -1 when read until close */
  #remaining?: number
  #timer?: NodeJS.Timeout
  #paused = false

  /**
   * @param limit bytes of the answer to capture before streaming the rest (0: stream at once)
   * @param timeoutMs the route's `upstream.timeout`: to the headers, then between body chunks, ms
   * @param sending told once (`markSent`), when undici starts writing the request
   */
  constructor(private limit: number, private readonly timeoutMs: number, private readonly sending: { markSent(): void }) {
    this.captured = limit > 0
  }

  /** Why an exchange that broke off after it was sent has an unknown outcome. */
  get unknownReason(): UnknownReason {
    return this.timedOut ? 'timeout' : this.aborted ? 'client_abort' : 'reset'
  }

  /**
   * Dispatches the request; resolves when the response headers are in.
   * @throws undici's error when the request fails before the response headers; `sent` then
   *   tells whether the upstream may have seen it
   */
  start(dispatcher: Dispatcher, opts: Dispatcher.DispatchOptions): Promise<void> {
    return new Promise((resolve, reject) => {
      this.#start = { resolve, reject }
      this.#timer = setTimeout(() => this.#onTimeout(), this.timeoutMs)
      dispatcher.dispatch(opts, this)
    })
  }

  #onTimeout(): void {
    if (this.#paused) return // the client is slow, not the upstream: re-armed on resume
    this.timedOut = true
    const err = this.#start ? new HeadersTimeout(this.timeoutMs) : new BodyTimeout(this.timeoutMs)
    // rejected here, not left to undici's onError: a request still queued (never
    // written) gets no handler callback when aborted before onConnect
    this.onError(err)
    this.aborted = true
    this.#abortCall?.(err)
  }

  #stopTimer(): void {
    if (this.#timer) { clearTimeout(this.#timer); this.#timer = undefined }
  }

  /** Resolves with true when the body is larger than `limit` (then call `streamRest`), else false once it is whole. */
  body(): Promise<boolean> {
    if (this.#error) return Promise.reject(this.#error)
    if (this.overflow || this.#ended) return Promise.resolve(this.overflow)
    return new Promise((resolve, reject) => { this.#body = { resolve, reject } })
  }

  /**
   * After an overflow: writes the rest of the body to `out` as it comes, pausing the upstream
   * while `out` is full; resolves once `out` finished, rejects when the exchange fails or the
   * client leaves first (the exchange is then aborted).
   */
  streamRest(out: ServerResponse): Promise<void> {
    return new Promise((resolve, reject) => {
      if (out.destroyed) { this.abort(); reject(new Error(CLIENT_LEFT)); return }
      const cleanup = () => { out.off('drain', drain); out.off('finish', finish); out.off('close', close) }
      const drain = () => {
        if (!this.#paused) return
        this.#paused = false
        this.#timer?.refresh()
        this.#resume?.()
      }
      const finish = () => { cleanup(); resolve() }
      const close = () => {
        cleanup()
        if (out.writableFinished) return resolve()
        this.abort()
        reject(new Error(CLIENT_LEFT))
      }
      out.on('drain', drain)
      out.once('finish', finish)
      out.once('close', close)
      this.#stream = { out, fail: (e) => { cleanup(); reject(e) } }
      if (this.#error) return this.#stream.fail(this.#error)
      if (this.#ended) out.end()
    })
  }

  abort(): void {
    if (this.aborted) return
    this.aborted = true
    this.#stopTimer()
    if (this.#abortCall) { this.#abortCall(new Error(CLIENT_LEFT)); return }
    // still queued for a connection: undici calls nothing of ours until it dequeues the request
    // (onConnect then aborts it unsent), so the caller must not wait for that
    this.onError(new Error(CLIENT_LEFT))
  }

  // ---------------------------------------------------------------------- undici's handler

  onConnect(abort: (err?: Error) => void): void {
    this.#abortCall = abort
    // a client that left while the request was queued: abort it here, before a byte is written
    if (this.aborted) { abort(this.timedOut ? new HeadersTimeout(this.timeoutMs) : new Error(CLIENT_LEFT)); return }
    this.sent = true
    this.sending.markSent()
  }

  /** @returns false to pause the upstream (never here: see onData) */
  onHeaders(status: number, raw: Buffer[], resume: () => void): boolean {
    if (status < 200) return true // 1xx: informational, the final response follows
    this.status = status
    this.#resume = resume
    const lines: string[] = new Array(raw.length)
    let length: string | undefined
    let chunked = false
    for (let i = 0; i < raw.length; i += 2) {
      const name = lines[i] = raw[i].toString('latin1').toLowerCase()
      const value = lines[i + 1] = raw[i + 1].toString('latin1')
      if (name === 'content-length') length = value
      else if (name === 'transfer-encoding' && /chunked/i.test(value)) chunked = true
    }
    this.lines = lines
    this.#remaining = chunked ? undefined : length !== undefined ? Number(length) : -1
    if (this.limit === 0 && this.#remaining !== undefined && this.#remaining >= 0 && this.#remaining <= SMALL_ANSWER) {
      this.limit = this.#remaining
      this.captured = true
    }
    this.#timer?.refresh() // from here: the body's idle timeout
    const w = this.#start
    this.#start = undefined
    w?.resolve()
    return true
  }

  /** @returns false to pause the upstream while the client's socket is full */
  onData(chunk: Buffer): boolean {
    if (this.#remaining !== undefined && this.#remaining > 0) this.#remaining -= chunk.length
    this.#timer?.refresh()
    const s = this.#stream
    if (s) {
      if (!s.out.write(chunk) && this.#mayPause()) { this.#paused = true; return false }
      return true
    }
    // Kept until streamRest() takes over (the caller attaches it without waiting on anything
    // else). Never paused here: undici 7 crashes the process when the upstream closes the
    // connection while its parser is paused (nodejs/undici#5360).
    this.chunks.push(chunk)
    this.size += chunk.length
    if (this.size > this.limit && !this.overflow) {
      this.overflow = true
      const w = this.#body
      this.#body = undefined
      w?.resolve(true)
    }
    return true
  }

  /**
   * undici 7 crashes the process when the upstream closes the connection while its parser is
   * paused with nothing left to parse (nodejs/undici#5360): after the last byte of a
   * Content-Length body, or anywhere in a body that ends with the connection. There the client's
   * backpressure is not passed on: the rest is buffered for it instead.
   */
  #mayPause(): boolean {
    return this.#remaining === undefined || this.#remaining > 0
  }

  onComplete(): void {
    this.#stopTimer()
    this.#ended = true
    const s = this.#stream
    if (s) { s.out.end(); return }
    const w = this.#body
    this.#body = undefined
    w?.resolve(this.overflow)
  }

  onError(err: Error): void {
    this.#stopTimer()
    if (this.#error) return // already failed (our timeout), undici reports the abort after
    this.#error = err
    this.#start?.reject(err)
    this.#body?.reject(err)
    this.#stream?.fail(err)
    this.#start = undefined
    this.#body = undefined
  }
}
