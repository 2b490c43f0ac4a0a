import type { IncomingMessage } from 'node:http'
import { Problem } from './problems.js'

/**
 * Reads a request body into memory, at most `limit` bytes.
 * @throws Problem 413 body-too-large when it is longer (the rest is not read)
 */
export async function readBody(incoming: IncomingMessage, limit: number): Promise<Buffer> {
  const declared = Number(incoming.headers['content-length'] ?? -1)
  if (declared > limit) throw tooLarge(limit)
  const chunks: Buffer[] = []
  let size = 0
  for await (const chunk of incoming as AsyncIterable<Buffer>) {
    size += chunk.length
    if (size > limit) throw tooLarge(limit)
    chunks.push(chunk)
  }
  return chunks.length === 1 ? chunks[0] : Buffer.concat(chunks, size)
}

export const tooLarge = (limit: number) =>
  new Problem('body-too-large', `The request body is larger than this route accepts (${limit} bytes).`)
