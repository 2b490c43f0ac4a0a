import { createHash } from 'node:crypto'

/**
 * The request fingerprint (contract §4): hex SHA-256 of method, path and query, content type
 * and body bytes, each length-prefixed so no two different requests hash the same input.
 */
export function fingerprint(method: string, pathAndQuery: string, contentType: string | undefined, body: Buffer): string {
  const h = createHash('sha256')
  for (const part of [method, pathAndQuery, contentType ?? '']) h.update(`${Buffer.byteLength(part)}:${part}\n`)
  h.update(`${body.length}:`)
  h.update(body)
  return h.digest('hex')
}
