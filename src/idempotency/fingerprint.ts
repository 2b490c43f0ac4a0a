import { createHash } from 'node:crypto'
import { sha256hex } from './record-key.js'

// below this body size one Buffer and a one-shot hash beat a Hash object fed in parts
const ONE_SHOT_BYTES = 16 * 1024

/**
 * The request fingerprint (contract §4): hex SHA-256 of method, path and query, content type
 * and body bytes, each length-prefixed so no two different requests hash the same input.
 */
export function fingerprint(method: string, pathAndQuery: string, contentType: string | undefined, body: Buffer): string {
  const ct = contentType ?? ''
  const head = `${Buffer.byteLength(method)}:${method}\n${Buffer.byteLength(pathAndQuery)}:${pathAndQuery}\n${Buffer.byteLength(ct)}:${ct}\n${body.length}:`
  if (body.length <= ONE_SHOT_BYTES) return sha256hex(body.length ? Buffer.concat([Buffer.from(head), body]) : head)
  return createHash('sha256').update(head).update(body).digest('hex')
}
