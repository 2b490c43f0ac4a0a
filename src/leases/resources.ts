/**
 * Which resources the lease service grants leases on (`leases.resources`, contract §3a), and which
 * routes fence a resource (what `defaultTtl: advice` sizes the lease from).
 */
import type { Config } from '../config/schema.js'

/** Longest resource name a lease is taken on, in characters. */
const MAX_RESOURCE = 512

/**
 * The resource of a lease call's path, percent-decoded.
 * @param rest the path after `{leases.path}/`, without the query
 * @returns the resource, or a sentence saying why it is malformed
 */
export function resourceOf(rest: string): string | { malformed: string } {
  if (rest === '') return { malformed: 'The path names no resource: a lease call is {leases.path}/{resource}, the resource percent-encoded.' }
  let r: string
  try { r = decodeURIComponent(rest) } catch { return { malformed: 'The resource is not valid percent-encoding (UTF-8).' } }
  if (r.length > MAX_RESOURCE) return { malformed: `The resource is longer than ${MAX_RESOURCE} characters.` }
  // eslint-disable-next-line no-control-regex
  if (/[\u0000-\u001f\u007f]/.test(r)) return { malformed: 'The resource holds a control character.' }
  return r
}

/** `leases.resources` as a test: an exact name, or a prefix ending in `*` (any suffix, none included). */
export function resourceMatcher(patterns: readonly string[]): (resource: string) => boolean {
  const exact = new Set(patterns.filter((p) => !p.endsWith('*')))
  const prefixes = patterns.filter((p) => p.endsWith('*')).map((p) => p.slice(0, -1))
  return (r) => exact.has(r) || prefixes.some((p) => r.startsWith(p))
}

/**
 * The routes whose `fencing.resource` template can fill to a resource: each `{…}` of the template
 * stands for one or more characters, the rest for itself. The templates are compiled here, once
 * per config generation.
 * @returns a function from a resource to the names of the routes fencing it, in config order
 */
export function routesFencing(config: Config): (resource: string) => string[] {
  const fenced = config.routes.flatMap((r) => (r.fencing
    ? [{ name: r.name, re: new RegExp(`^${r.fencing.resource.split(/\{[^}]*\}/).map((s) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')).join('.+')}$`, 's') }]
    : []))
  return (resource) => fenced.filter((f) => f.re.test(resource)).map((f) => f.name)
}
