import type { IncomingMessage } from 'node:http'
import { Problem } from './problems.js'

/**
 * Reads a request body into memory, at most `limit` bytes.
 * @throws Problem 413 body-too-large when it is longer (the rest is not read)
 */
export function readBody(incoming: IncomingMessage, limit: number): Promise<Buffer> {
  const declared = Number(incoming.headers['content-length'] ?? -1)
  if (declared > limit) return Promise.reject(tooLarge(limit))
  if (declared === 0 || (declared < 0 && incoming.headers['transfer-encoding'] === undefined)) return Promise.resolve(EMPTY)
  // 'data'/'end' listeners: an async iterator per request costs more than the body is long
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = []
    let size = 0
    const onData = (chunk: Buffer) => {
      size += chunk.length
      if (size > limit) { cleanup(); incoming.resume(); reject(tooLarge(limit)); return }
      chunks.push(chunk)
    }
    const onEnd = () => { cleanup(); resolve(chunks.length === 1 ? chunks[0] : Buffer.concat(chunks, size)) }
    const onError = (e: Error) => { cleanup(); reject(e) }
    const cleanup = () => { incoming.off('data', onData); incoming.off('end', onEnd); incoming.off('error', onError) }
    incoming.on('data', onData)
    incoming.on('end', onEnd)
    incoming.on('error', onError)
  })
}

const EMPTY = Buffer.alloc(0)

export const tooLarge = (limit: number) =>
  new Problem('body-too-large', `The request body is larger than this route accepts (${limit} bytes).`)
