/**
 * One upstream exchange on undici's dispatch API with a handler of our own: no request() body
 * stream, no interceptor, no signal listeners. The first `limit` bytes of the answer land in an
 * array (the idempotency record keeps them; 0 streams from the first chunk); past that the rest
 * is written straight to the client, pausing the upstream only while the client's socket is full.
 * The request counts as sent from undici's onRequestStart, when it starts writing it.
 */
import type { IncomingHttpHeaders } from 'undici/types/header.js'
import type { Dispatcher } from 'undici'
import type { ServerResponse } from 'node:http'

interface Waiter<T> { resolve(v: T): void; reject(e: Error): void }

const CLIENT_LEFT = 'client connection closed before the response ended'

export class UpstreamCall implements Dispatcher.DispatchHandler {
  /** true from the moment undici starts writing the request (the effect may happen from here) */
  sent = false
  /** the client left: abort the exchange (a queued request is then never written) */
  aborted = false
  status = 0
  headers: IncomingHttpHeaders = {}
  readonly chunks: Buffer[] = []
  size = 0
  /** more than `limit` bytes came: the captured chunks are a prefix, the rest is streamed */
  overflow = false

  #controller?: Dispatcher.DispatchController
  #start?: Waiter<void>
  #body?: Waiter<boolean>
  #stream?: { out: ServerResponse; fail(e: Error): void }
  #ended = false
  #error?: Error
  /** body bytes still to come per Content-Length; undefined when chunked, -1 when read until close */
  #remaining?: number

  constructor(private readonly limit: number, private readonly onSent: () => void) {}

  /**
   * Dispatches the request; resolves when the response headers are in.
   * @throws undici's error when the request fails before the response headers; `sent` then
   *   tells whether the upstream may have seen it
   */
  start(dispatcher: Dispatcher, opts: Dispatcher.DispatchOptions): Promise<void> {
    return new Promise((resolve, reject) => {
      this.#start = { resolve, reject }
      dispatcher.dispatch(opts, this)
    })
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
      const drain = () => this.#controller?.resume()
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
    this.#controller?.abort(new Error(CLIENT_LEFT))
  }

  // ---------------------------------------------------------------------- undici's handler

  onRequestStart(controller: Dispatcher.DispatchController): void {
    this.#controller = controller
    // a client that left while the request was queued: abort it here, before a byte is written
    if (this.aborted) { controller.abort(new Error(CLIENT_LEFT)); return }
    this.sent = true
    this.onSent()
  }

  onResponseStart(controller: Dispatcher.DispatchController, status: number, headers: IncomingHttpHeaders): void {
    if (status < 200) return // 1xx: informational, the final response follows
    this.status = status
    this.headers = headers
    const length = headers['content-length']
    const chunked = /chunked/i.test(String(headers['transfer-encoding'] ?? ''))
    this.#remaining = chunked ? undefined : length !== undefined ? Number(length) : -1
    const w = this.#start
    this.#start = undefined
    w?.resolve()
  }

  onResponseData(controller: Dispatcher.DispatchController, chunk: Buffer): void {
    if (this.#remaining !== undefined && this.#remaining > 0) this.#remaining -= chunk.length
    const s = this.#stream
    if (s) {
      if (!s.out.write(chunk) && this.#mayPause()) controller.pause()
      return
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

  onResponseEnd(): void {
    this.#ended = true
    const s = this.#stream
    if (s) { s.out.end(); return }
    const w = this.#body
    this.#body = undefined
    w?.resolve(this.overflow)
  }

  onResponseError(controller: Dispatcher.DispatchController, err: Error): void {
    this.#error = err
    this.#start?.reject(err)
    this.#body?.reject(err)
    this.#stream?.fail(err)
    this.#start = undefined
    this.#body = undefined
  }
}
