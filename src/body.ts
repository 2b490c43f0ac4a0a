import type { IncomingMessage } from 'node:http'
import type { Readable } from 'node:stream'
import { Problem } from './problems.js'

/**
 * Reads a request body into memory, at most `limit` bytes.
 * @throws Problem 413 body-too-large when it is longer (the rest is not read)
 */
export async function readBody(incoming: IncomingMessage, limit: number): Promise<Buffer> {
  const declared = Number(incoming.headers['content-length'] ?? -1)
  if (declared > limit) throw tooLarge(limit)
  if (declared === 0 || (declared < 0 && incoming.headers['transfer-encoding'] === undefined)) return EMPTY
  const got = await collect(incoming, limit)
  if (got.more) {
    incoming.resume() // let the rest drain so the connection stays usable for the 413
    throw tooLarge(limit)
  }
  return got.chunks.length === 1 ? got.chunks[0] : Buffer.concat(got.chunks, got.size)
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

const EMPTY = Buffer.alloc(0)

export const tooLarge = (limit: number) =>
  new Problem('body-too-large', `The request body is larger than this route accepts (${limit} bytes).`)
