import type { Context } from 'hono'
import type { GatewayEnv } from './context.js'
import type { TemplateSource } from './config/template.js'

/** Reads template placeholders from a request: path parameters, headers, query parameters. */
export function requestTemplateSource(c: Context<GatewayEnv>): TemplateSource {
  return {
    param: (name) => c.req.param(name),
    header: (name) => {
      const v = c.env.incoming.headers[name]
      return Array.isArray(v) ? v.join(', ') : v
    },
    query: (name) => c.req.query(name),
  }
}
