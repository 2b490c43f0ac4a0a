/**
 * Fencing's reader: the token and resource of a request (contract §3), or the client's mistake
 * as data. It changes nothing; the admission step (src/admission/) makes the store call.
 */
import type { CompiledRoute } from '../route.js'
import type { TemplateSource } from '../config/template.js'
import type { FenceRequest } from '../store/index.js'
import type { FencingReason } from '../outcomes.js'
import { Problem } from '../problems.js'
import { parseFencingToken } from './token.js'

/** What fencing read: a check to make, or the request's refusal (`reason` for the metric). */
export type FenceInput = FenceRequest | { refused: Problem; reason: Exclude<FencingReason, 'stale'> }

/**
 * @returns undefined when the route has no fencing, or the request no token and the route does
 *   not require one; else the check or the refusal (428 fencing-token-required, 400
 *   fencing-token-malformed, 400 fencing-resource-missing)
 */
export function fenceReader(route: CompiledRoute): (headers: Record<string, string | string[] | undefined>, src: () => TemplateSource) => FenceInput | undefined {
  const f = route.fencing
  if (!f) return () => undefined
  const { tokenHeader, required, resource } = f
  const headerName = route.config.fencing!.tokenHeader // as configured, for messages
  const missing: FenceInput = { reason: 'missing', refused: new Problem('fencing-token-required', `This route requires a ${headerName} header carrying the lease's fencing token.`) }
  return function readFence(headers, src) {
    const raw = headers[tokenHeader]
    if (raw === undefined) return required ? missing : undefined
    const token = parseFencingToken(Array.isArray(raw) ? raw.join(', ') : raw)
    if (token === undefined) {
      return { reason: 'malformed', refused: new Problem('fencing-token-malformed', `${headerName} must be one canonical decimal integer from 0 to 9223372036854775807.`) }
    }
    const filled = resource(src())
    if (typeof filled !== 'string') {
      return { reason: 'malformed', refused: new Problem('fencing-resource-missing', filled.unfilled === 'missing'
        ? `The fencing resource of this route cannot be determined from the request: ${filled.detail}.`
        : `The fencing resource of this route cannot be determined from the request: ${filled.detail}. The upstream could apply the write to another resource than the one checked; nothing was forwarded.`) }
    }
    // a NUL is no name a store can keep (PostgreSQL text refuses it); the template sources
    // refuse a decoded %00 already, this catches one from anywhere else (a template literal)
    if (filled.includes('\u0000')) {
      return { reason: 'malformed', refused: new Problem('fencing-resource-missing', 'The fencing resource of this route, filled from the request, contains a NUL character (%00), which no resource name may hold.') }
    }
    return { resource: filled, token }
  }
}
