/**
 * The audit view's page shells (contract §5a), server-rendered with Hono's JSX: navigation, the
 * token field, headings and empty containers. A shell holds no data and needs no token; the
 * page's script (./client/main.ts) reads the admin JSON endpoints with the operator's token and
 * fills the containers.
 */
import type { Child } from 'hono/jsx'

export type ViewName = 'overview' | 'routes' | 'unknown' | 'timeline' | 'leases'

interface ViewText {
  title: string
  lead: string
  /** the nav entry's address below the page's root */
  path: string
}

export const VIEWS: Record<ViewName, ViewText> = {
  overview: { title: 'Overview', path: '', lead: 'The keys and resources with the newest attempts, and the timeline of the latest one.' },
  routes: { title: 'Routes', path: 'ui/routes', lead: 'Each route\'s claim in words, the store\'s real settings, and what the gateway decided in the last 24 hours.' },
  unknown: { title: 'Unknown outcomes', path: 'ui/unknown', lead: 'Attempts sent upstream without a complete answer: nobody knows whether they took effect. Settle each once you know.' },
  timeline: { title: 'Timeline', path: 'ui/timeline', lead: 'Every attempt on one idempotency key or one fencing resource, on a real time scale, one lane per actor.' },
  leases: { title: 'Leases', path: 'ui/leases', lead: 'How long the upstream takes to apply fenced writes, against the configured lease, and how late stale writers came.' },
}

export interface ShellOptions {
  view: ViewName
  /** the path from this page to the admin listener's root: '' at `/`, '../' under `/ui/` */
  root: string
  /** the start-up warning of an admin listener beyond loopback without admin.token */
  exposed?: string
}

function Nav({ view, root }: { view: ViewName; root: string }) {
  return (
    <nav aria-label="Views">
      <ul>
        {(Object.keys(VIEWS) as ViewName[]).map((v) => (
          <li><a href={`${root}${VIEWS[v].path}` || './'} aria-current={v === view ? 'page' : undefined}>{VIEWS[v].title}</a></li>
        ))}
      </ul>
    </nav>
  )
}

function TokenForm() {
  return (
    <form id="token-form" class="token" autocomplete="off">
      <label for="token">Admin token</label>
      <input id="token" name="token" type="password" spellcheck={false} aria-describedby="token-help" />
      <button type="submit">Use token</button>
      <button type="button" id="token-forget">Forget</button>
      <span id="token-help" class="help">admin.token, kept in this tab only (sessionStorage) and sent as Authorization: Bearer</span>
    </form>
  )
}

/** The parts of a view's main element that its script fills. */
function Body({ view }: { view: ViewName }): Child {
  switch (view) {
    case 'overview':
      return (
        <>
          <section aria-labelledby="recent-h"><h2 id="recent-h">Latest keys and resources</h2><div id="recent" /></section>
          <section aria-labelledby="latest-h"><h2 id="latest-h">Timeline of the latest</h2><div id="timeline" /></section>
        </>
      )
    case 'timeline':
      return (
        <>
          <form id="timeline-form" class="follow">
            <label for="f-keyHash">Key hash</label>
            <input id="f-keyHash" name="keyHash" pattern="[0-9a-f]{64}" size={30} spellcheck={false} />
            <label for="f-resource">or resource</label>
            <input id="f-resource" name="resource" size={20} spellcheck={false} />
            <label for="f-route">Route (optional)</label>
            <input id="f-route" name="route" size={10} spellcheck={false} />
            <button type="submit">Show</button>
          </form>
          <div id="timeline" />
        </>
      )
    case 'unknown':
      return (
        <>
          <p class="help" id="unknown-live">The list refreshes every 5 seconds.</p>
          <div id="unknown" />
          <dialog id="settle" aria-labelledby="settle-h">
            <form id="settle-form" method="dialog">
              <h2 id="settle-h">Settle an unknown outcome</h2>
              <p id="settle-what" />
              <fieldset>
                <legend>What happened upstream</legend>
                <label><input type="radio" name="as" value="failed" required /> failed: the effect did not happen; the key is released and the next request is forwarded</label>
                <label><input type="radio" name="as" value="completed" /> completed: it happened; the key is never forwarded again (409 response-not-stored)</label>
              </fieldset>
              <label for="settle-reason">Reason (kept in the attempt log)</label>
              <textarea id="settle-reason" name="reason" required maxlength={500} rows={2} />
              <label for="settle-token">Write token (admin.writeToken, not kept)</label>
              <input id="settle-token" name="writeToken" type="password" required autocomplete="off" />
              <p id="settle-error" class="error" role="alert" />
              <div class="actions">
                <button type="submit" value="settle">Settle</button>
                <button type="button" id="settle-cancel">Cancel</button>
              </div>
            </form>
          </dialog>
        </>
      )
    case 'routes':
      return <><section aria-labelledby="store-h"><h2 id="store-h">Store</h2><div id="store" /></section><div id="routes" /></>
    case 'leases':
      return <div id="leases" />
  }
}

/** One view's page. */
export function Shell({ view, root, exposed }: ShellOptions) {
  const t = VIEWS[view]
  return (
    <html lang="en">
      <head>
        <meta charset="utf-8" />
        <meta name="viewport" content="width=device-width, initial-scale=1" />
        <title>{`${t.title} · fencegate audit`}</title>
        <link rel="stylesheet" href={`${root}ui/assets/view.css`} />
        <script type="module" src={`${root}ui/assets/main.js`} />
      </head>
      <body data-view={view} data-root={root}>
        <a class="skip" href="#main">Skip to the view</a>
        <header>
          <a class="brand" href={root || './'}>fencegate audit</a>
          <Nav view={view} root={root} />
          <TokenForm />
        </header>
        {exposed ? <p class="banner" role="alert"><strong>Warning:</strong> {exposed}</p> : null}
        <main id="main" tabindex={-1}>
          <h1>{t.title}</h1>
          <p class="lead">{t.lead}</p>
          <div id="status" role="status" aria-live="polite" />
          <noscript><p class="error">The views read the gateway's admin endpoints with a script of this page: turn JavaScript on for this address.</p></noscript>
          <Body view={view} />
        </main>
      </body>
    </html>
  )
}
