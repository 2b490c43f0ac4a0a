/**
 * Idempotency's reader: what a claim needs from a request (contract §4,
 * draft-ietf-httpapi-idempotency-key-header §2): the record key, the body and its fingerprint, and
 * the key hash the attempt log, spans and logs carry — or the client's mistake as data. It
 * changes nothing; the admission step (src/admission/) makes the store call.
 */
import type { IncomingMessage } from 'node:http'
import type { CompiledRoute } from '../route.js'
import type { TemplateSource } from '../config/template.js'
import type { RecordKey } from '../store/index.js'
import { Problem } from '../problems.js'
import { BodyLimit } from '../body.js'
import { parseIdempotencyKey } from './key.js'
import { fingerprint } from './fingerprint.js'
import { recordKeyOf } from './record-key.js'

/** A claim to make: the record's key, the body read, its fingerprint and the key hash. */
export interface ClaimInput {
  recordKey: RecordKey
  body: Buffer
  fingerprint: string
  /** hex SHA-256 of the scope hash and the key (the attempt log's `keyHash`) */
  keyHash: string
}

/** A request whose key, scope or body is the client's mistake (400, 413). */
export interface ClaimRefusal { refused: Problem }

/**
 * @returns undefined when the request makes no claim (a method the route does not record, or
 *   no key where none is required); else the claim or the refusal: 400 idempotency-key-required,
 *   400 idempotency-key-malformed (a bad key, or a scope the request does not carry or gives
 *   ambiguously), 413 body-too-large
 */
export function claimReader(route: CompiledRoute): (incoming: IncomingMessage, src: () => TemplateSource) => Promise<ClaimInput | ClaimRefusal | undefined> {
  const i = route.idempotency
  if (!i) return async () => undefined
  const cfg = route.config.idempotency!
  const limit = new BodyLimit(route.config.maxRequestBytes)
  const required: ClaimRefusal = { refused: new Problem('idempotency-key-required', `This route requires an ${cfg.keyHeader} header naming the operation, so a retry cannot apply it twice.`) }
  const malformed: ClaimRefusal = { refused: new Problem('idempotency-key-malformed', `${cfg.keyHeader} must be one value of 1 to 255 visible ASCII characters, bare or as a quoted sf-string.`) }
  return async function readClaim(incoming, src) {
    if (!i.methods.has(incoming.method!)) return undefined
    const raw = incoming.headers[i.keyHeader]
    if (raw === undefined) return i.required ? required : undefined
    const key = parseIdempotencyKey(Array.isArray(raw) ? raw.join(', ') : raw)
    if (key === undefined) return malformed
    let scope: string | undefined // the filled scope template; undefined: the route has none
    if (!i.scopeIsRoute) {
      const filled = i.scope(src())
      // missing: hashing "" would put every such request in one shared key space; ambiguous:
      // the upstream could take the request for another owner's. Refused before the body is read.
      if (typeof filled !== 'string') {
        return { refused: new Problem('idempotency-key-malformed', filled.unfilled === 'missing'
          ? `This route scopes idempotency keys by "${cfg.scope}", which this request does not carry: ${filled.detail}.`
          : `This route scopes idempotency keys by "${cfg.scope}", which this request gives ambiguously: ${filled.detail}. Nothing was forwarded.`) }
      }
      scope = filled
    }
    // a client that leaves mid-body throws: handled where the request's end is
    const body = await limit.read(incoming)
    if (body === undefined) return { refused: limit.tooLarge() }
    const { recordKey, keyHash } = recordKeyOf(route.name, scope, key)
    return {
      recordKey,
      body,
      fingerprint: fingerprint(incoming.method!, incoming.url!, incoming.headers['content-type'], body),
      keyHash,
    }
  }
}
