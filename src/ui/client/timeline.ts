/**
 * The Timeline view (`/ui/timeline?keyHash=H`, `?resource=R`, or `?key=K&route=R[&scope=S]`) and
 * the Overview (`/`): the drawing, its legend, and the same entries as a table. Pages of 1000
 * entries, newest first; "Older attempts" asks for the page before.
 */
import { drawTimeline, describe, idTail, legend, markKind, MARKS, type Entry } from './draw.js'
import { fill, getJson, h, short, status, time, timelineHref } from './lib.js'

interface Timeline { route?: string; keyHash?: string; resource?: string; since: string; entries: Entry[]; more?: true }

/** The query a timeline is asked with (the view's address, minus paging). */
type Ask = Record<string, string>

function table(entries: readonly Entry[]): HTMLElement {
  const head = ['time', 'actor', 'decision', 'token', 'upstream', 'request id', 'trace id', 'replica']
  return h('div', { class: 'scroll' }, h('table', { class: 'entries' },
    h('caption', { class: 'help' }, 'The same entries, oldest first'),
    h('thead', {}, h('tr', {}, ...head.map((c) => h('th', { scope: 'col' }, c)))),
    h('tbody', {}, ...entries.map((e) => h('tr', { 'data-outcome': markKind(e) },
      h('td', {}, time(e.time)),
      h('td', {}, e.kind === 'attempt' ? `${e.method ?? ''} ${e.route}` : e.by === 'probe' ? `settle probe, ${e.route}` : e.by ?? e.replica),
      h('td', {}, `${describe(e)}${e.kind === 'attempt' ? ` — ${MARKS[markKind(e)].label}` : ''}`),
      h('td', { class: 'num' }, e.token ?? ''),
      h('td', {}, e.upstreamStatus !== undefined && e.kind !== 'resolve' ? `${e.upstreamStatus} in ${e.upstreamMs ?? '?'} ms` : e.unknown ? `no answer (${e.unknown})` : ''),
      h('td', {}, e.requestId === undefined ? '' : h('code', { title: e.requestId }, idTail(e.requestId))),
      h('td', {}, short(e.traceId)),
      h('td', {}, e.replica))))))
}

/** Fetches and draws one timeline into `target`, with an "Older attempts" button while there are more. */
export async function showTimeline(target: Element, ask: Ask): Promise<void> {
  const named = ask.keyHash ? `key hash ${ask.keyHash.slice(0, 12)}` : ask.resource !== undefined ? `resource ${ask.resource}` : `key ${ask.key}`
  const what = ask.keyHash && ask.keyHash.length > 12 ? `${named}…` : named
  status(`Reading the timeline of ${named}…`) // one ellipsis: the shortened hash's and the wait's are the same three dots
  const pages: Entry[][] = []
  const draw = async (until?: string) => {
    const q = new URLSearchParams(ask)
    if (until) q.set('until', until)
    const t = await getJson<Timeline>(`audit/timeline?${q}`)
    pages.unshift(t.entries)
    const all = pages.flat()
    const older = t.more ? h('button', { type: 'button', onclick: () => { draw(all[0].time).catch(failed) } }, 'Older attempts') : null
    fill(target,
      h('p', {}, `${all.length} entr${all.length === 1 ? 'y' : 'ies'} on ${t.resource !== undefined ? `resource ${t.resource}` : `key hash ${t.keyHash}`}${t.route ? ` (route ${t.route})` : ''} since `, time(t.since), '.'),
      drawTimeline(all, `Timeline of ${what}`), legend(), older, table(all))
    status('')
  }
  await draw()
}

const failed = (e: unknown) => status((e as Error).message, true)

/** The Timeline view: its form, and the timeline its address asks for. */
export async function timelineView(): Promise<void> {
  const form = document.getElementById('timeline-form') as HTMLFormElement
  const params = new URLSearchParams(location.search)
  const ask: Ask = {}
  for (const k of ['keyHash', 'resource', 'key', 'route', 'scope', 'since', 'limit']) { const v = params.get(k); if (v !== null) ask[k] = v }
  for (const k of ['keyHash', 'resource', 'route']) { const i = form.elements.namedItem(k) as HTMLInputElement; i.value = ask[k] ?? '' }
  form.addEventListener('submit', (ev) => {
    ev.preventDefault()
    const f = new FormData(form)
    const keyHash = String(f.get('keyHash') ?? '').trim(), resource = String(f.get('resource') ?? '').trim(), route = String(f.get('route') ?? '').trim()
    location.assign(timelineHref({ keyHash: keyHash || undefined, resource: keyHash ? undefined : resource, route: route || undefined }))
  })
  if (ask.keyHash === undefined && ask.resource === undefined && ask.key === undefined) {
    status('Give a key hash (as the access log, fencegate unknown and the spans show it) or a fencing resource.')
    return
  }
  await showTimeline(document.getElementById('timeline')!, ask)
}

interface RecentKey { route: string; keyHash?: string; resource?: string; last: string; attempts: number; outcome?: string }

/** The Overview: the latest keys and resources, and the newest one's timeline. */
export async function overviewView(): Promise<void> {
  status('Reading the latest attempts…')
  const { keys } = await getJson<{ keys: RecentKey[] }>('audit/recent')
  if (!keys.length) {
    fill(document.getElementById('recent'), h('p', {}, 'No attempts on fenced or idempotent routes in the last 24 hours.'))
    status('')
    return
  }
  fill(document.getElementById('recent'), h('div', { class: 'scroll' }, h('table', {},
    h('thead', {}, h('tr', {}, ...['last attempt', 'route', 'key hash', 'resource', 'attempts', 'newest decision', ''].map((c) => h('th', { scope: 'col' }, c)))),
    h('tbody', {}, ...keys.map((k) => h('tr', {},
      h('td', {}, time(k.last)), h('td', {}, k.route), h('td', {}, short(k.keyHash)), h('td', {}, k.resource ?? ''),
      h('td', { class: 'num' }, k.attempts), h('td', {}, k.outcome ?? ''),
      h('td', {}, h('a', { href: timelineHref(k) }, 'timeline'))))))))
  const latest = keys[0]
  await showTimeline(document.getElementById('timeline')!, latest.keyHash ? { keyHash: latest.keyHash } : { resource: latest.resource!, route: latest.route })
}
