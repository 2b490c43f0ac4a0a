/**
 * The audit view on the admin listener (contract §5a): the page shells at `/` and `/ui/*`, the
 * page's own script modules and stylesheet under `/ui/assets/`, and the security headers of
 * every admin response. The shells and assets need no token (they hold no data); the views read
 * the admin JSON endpoints with the operator's Bearer token.
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import type { Context, Hono, MiddlewareHandler } from 'hono'
import { Shell, type ViewName } from './pages.js'
import { STYLE } from './style.js'

/**
 * Content-Security-Policy of every admin response: nothing from outside the listener, no inline
 * script or style, no framing, no form posting elsewhere (CSP Level 3).
 */
export const CSP = "default-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'; object-src 'none'"

/**
 * The compiled browser modules (./client/*.js next to this file, in dist/), by file name; source
 * maps left out. Run from src/ (the tests), it reads the build's.
 */
function loadScripts(): Map<string, string> {
  const dir = [new URL('./client/', import.meta.url), new URL('../../dist/src/ui/client/', import.meta.url)]
    .map((u) => fileURLToPath(u)).find((d) => existsSync(`${d}main.js`))
  if (!dir) throw new Error('the audit view\'s script is not built: run npm run build')
  const out = new Map<string, string>()
  for (const f of readdirSync(dir)) {
    if (f.endsWith('.js')) out.set(f, readFileSync(dir + f, 'utf8').replace(/\n\/\/# sourceMappingURL=.*\s*$/, '\n'))
  }
  return out
}

let scripts: Map<string, string> | undefined

/**
 * Sets the security headers on every admin response: CSP, nosniff, no referrer, and
 * `Cache-Control: no-store` unless the handler chose (data is never kept by caches).
 */
export const securityHeaders: MiddlewareHandler = async (c, next) => {
  await next()
  const h = c.res.headers
  h.set('content-security-policy', CSP)
  h.set('x-content-type-options', 'nosniff')
  h.set('referrer-policy', 'no-referrer')
  if (!h.has('cache-control')) h.set('cache-control', 'no-store')
}

export interface UiOptions {
  /** the warning of an admin listener beyond loopback without admin.token (shown as a banner) */
  exposed?: string
}

/** Adds the shells and assets to the admin app; call before its token check. */
export function mountUi(app: Hono, { exposed }: UiOptions): void {
  scripts ??= loadScripts()
  const page = (view: ViewName, root: string) => (c: Context) =>
    c.html(`<!doctype html>${String(Shell({ view, root, exposed }))}`, 200, { 'cache-control': 'no-cache' })
  app.get('/', page('overview', ''))
  app.get('/ui', (c) => c.redirect('./ui/routes'))
  app.get('/ui/', page('overview', '../'))
  app.get('/ui/routes', page('routes', '../'))
  app.get('/ui/unknown', page('unknown', '../'))
  app.get('/ui/timeline', page('timeline', '../'))
  app.get('/ui/leases', page('leases', '../'))
  app.get('/ui/assets/view.css', (c) => c.body(STYLE, 200, { 'content-type': 'text/css; charset=utf-8', 'cache-control': 'no-cache' }))
  app.get('/ui/assets/:file{[a-z-]+\\.js}', (c) => {
    const js = scripts!.get(c.req.param('file'))
    if (js === undefined) return c.notFound()
    return c.body(js, 200, { 'content-type': 'text/javascript; charset=utf-8', 'cache-control': 'no-cache' })
  })
}
