/**
 * The body limit (`maxRequestBytes`), one owner for every place a request body is measured: a
 * declared Content-Length (before anything is read: at the front door for `Expect:
 * 100-continue`, on a route before its checks), a body read whole for a claim's fingerprint, a
 * body streamed upstream without a declared length. Over the limit is 413 body-too-large.
 */
import type { IncomingMessage, IncomingHttpHeaders } from 'node:http'
import type { Readable } from 'node:stream'
import { Problem } from './problems.js'

/** A streamed body passed the limit (the upstream call fails with it, or with it as its cause). */
class BodyLimitError extends Error {}

const EMPTY = Buffer.alloc(0)

export class BodyLimit {
  readonly #problem: string

  /** @param bytes the most a body may hold */
  constructor(readonly bytes: number) {
    this.#problem = `The request body is larger than this route accepts (${bytes} bytes).`
  }

  /** 413 body-too-large. */
  tooLarge(): Problem {
    return new Problem('body-too-large', this.#problem)
  }

  /** Whether the declared Content-Length is over the limit. */
  declaredOver(headers: IncomingHttpHeaders): boolean {
    const declared = headers['content-length']
    return declared !== undefined && Number(declared) > this.bytes
  }

  /**
   * Reads the body into memory.
   * @returns the body, or undefined when it is longer than the limit (the rest is drained, so
   *   the connection stays usable for the 413)
   * @throws the stream's error when the client leaves mid-body
   */
  async read(incoming: IncomingMessage): Promise<Buffer | undefined> {
    const declared = Number(incoming.headers['content-length'] ?? -1)
    if (declared > this.bytes) return undefined
    if (declared === 0 || (declared < 0 && incoming.headers['transfer-encoding'] === undefined)) return EMPTY
    const got = await collect(incoming, this.bytes)
    if (got.more) {
      incoming.resume()
      return undefined
    }
    return got.chunks.length === 1 ? got.chunks[0] : Buffer.concat(got.chunks, got.size)
  }

  /**
   * The body to stream upstream: none, the request itself when its length is declared (and
   * within the limit, checked before), or a stream that fails with `exceeded` past the limit.
   */
  stream(incoming: IncomingMessage): IncomingMessage | AsyncGenerator<Buffer> | null {
    const h = incoming.headers
    if (h['content-length'] !== undefined) return incoming
    return h['transfer-encoding'] === undefined ? null : limited(incoming, this.bytes)
  }

  /** Whether an upstream call failed because its streamed body passed the limit. */
  static exceeded(err: unknown): boolean {
    return err instanceof BodyLimitError || (err as { cause?: unknown } | undefined)?.cause instanceof BodyLimitError
  }
}

/** Streams a request body, stopping at `limit` bytes (bodies without a Content-Length). */
async function* limited(incoming: IncomingMessage, limit: number): AsyncGenerator<Buffer> {
  let size = 0
  for await (const chunk of incoming as AsyncIterable<Buffer>) {
    size += chunk.length
    if (size > limit) throw new BodyLimitError()
    yield chunk
  }
}

/**
 * Reads `body` until its end or until more than `limit` bytes came; then it is left paused,
 * with what was read in `chunks`, for the caller to pass on or drain. 'data'/'end' listeners:
 * an async iterator per request costs more than a small body is long.
 */
export function collect(body: Readable, limit: number): Promise<{ chunks: Buffer[]; size: number; more: boolean }> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = []
    let size = 0
    const cleanup = () => { body.off('data', onData); body.off('end', onEnd); body.off('error', onError) }
    const onData = (chunk: Buffer) => {
      size += chunk.length
      chunks.push(chunk)
      if (size > limit) { body.pause(); cleanup(); resolve({ chunks, size, more: true }) }
    }
    const onEnd = () => { cleanup(); resolve({ chunks, size, more: false }) }
    const onError = (e: Error) => { cleanup(); reject(e) }
    body.on('data', onData)
    body.on('end', onEnd)
    body.on('error', onError)
  })
}
