/**
 * The filled probe request of `idempotency.settle` (contract §4a): what a claim on a settle route
 * carries to the store (`ClaimRequest.probe`, opaque text to the store) and what a probe sends.
 * Filled once per request, at claim time, only on settle routes; the record keeps it (it holds
 * the key) until the outcome is settled.
 */
import type { SettleConfig } from '../../config/schema.js'
import type { TemplateSource } from '../../config/template.js'
import { compileProbeTemplate, type ProbeTemplate } from '../../config/probe-template.js'
import { pathParams } from '../../config/template.js'

/** A probe request as the record keeps it (JSON). */
export interface ProbeRequest {
  method: 'GET' | 'HEAD' | 'OPTIONS'
  /** origin-form target: the filled `probe.path` */
  path: string
  /** the filled `probe.headers`, names as configured */
  headers: [string, string][]
  /** the request id of the attempt it settles (sent in the request id header) */
  requestId: string
}

/**
 * Fills a route's probe for one request: the JSON text, or undefined when a template names
 * something the request does not carry (or gives ambiguously): that record then waits for an
 * operator, as without settle.
 */
export type ProbeFiller = (src: TemplateSource, key: string, requestId: string) => string | undefined

/**
 * Compiles the route's probe templates (checked already by src/config/checks.ts).
 * @throws Error for a template that does not compile (a config that skipped the checks)
 */
export function probeFiller(settle: SettleConfig, routePath: string): ProbeFiller {
  const params = pathParams(routePath)
  const method = settle.probe.method
  const path = compileProbeTemplate(settle.probe.path, params, true)
  const headers: [string, ProbeTemplate][] = Object.entries(settle.probe.headers ?? {}).map(([n, t]) => [n, compileProbeTemplate(t, params, false)])
  return (src, key, requestId) => {
    const p = path(src, key)
    if (typeof p !== 'string') return undefined
    const h: [string, string][] = []
    for (const [name, t] of headers) {
      const v = t(src, key)
      if (typeof v !== 'string') return undefined
      h.push([name, v])
    }
    const req: ProbeRequest = { method, path: p, headers: h, requestId }
    return JSON.stringify(req)
  }
}

/** The probe request a record kept, or undefined when the text is not one (another version's, damaged). */
export function parseProbe(text: string): ProbeRequest | undefined {
  try {
    const p = JSON.parse(text) as ProbeRequest
    if (typeof p?.path !== 'string' || !p.path.startsWith('/') || !['GET', 'HEAD', 'OPTIONS'].includes(p.method) || !Array.isArray(p.headers) || typeof p.requestId !== 'string') return undefined
    return p
  } catch {
    return undefined
  }
}
