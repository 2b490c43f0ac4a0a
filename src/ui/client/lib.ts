/**
 * The audit view's browser helpers: the admin token (this tab's sessionStorage only, never a
 * URL, a cookie or a log), the JSON calls with `Authorization: Bearer`, and DOM building. Every
 * value from the gateway enters the page as text (textContent, attribute values), never as HTML.
 */

const TOKEN_KEY = 'fencegate.admin.token'

export const getToken = (): string => sessionStorage.getItem(TOKEN_KEY) ?? ''
export const setToken = (t: string): void => { if (t) sessionStorage.setItem(TOKEN_KEY, t); else sessionStorage.removeItem(TOKEN_KEY) }

/** A refused or failed admin call: its status and the problem's detail (RFC 9457). */
export class ApiError extends Error {
  constructor(readonly status: number, message: string) { super(message) }
}

/** The path from this page to the admin listener's root ('' or '../'), from the shell. */
export const root = (): string => document.body.dataset.root ?? ''

async function call<T>(path: string, init: RequestInit, bearer: string): Promise<T> {
  const headers = new Headers(init.headers)
  if (bearer) headers.set('authorization', `Bearer ${bearer}`)
  let r: Response
  try {
    r = await fetch(root() + path, { ...init, headers, cache: 'no-store', credentials: 'omit' })
  } catch {
    throw new ApiError(0, 'The admin listener did not answer.')
  }
  if (r.ok) return await r.json() as T
  let detail = `${r.status} ${r.statusText}`
  try {
    const p = await r.json() as { detail?: unknown }
    if (typeof p.detail === 'string') detail = p.detail
  } catch { /* not a problem body */ }
  if (r.status === 401 && !init.method) detail = `${getToken() ? 'The token was refused' : 'This gateway needs the admin token'}: paste admin.token in the token field above. (${detail})`
  throw new ApiError(r.status, detail)
}

/** GET an admin JSON endpoint with the tab's token. @throws ApiError */
export const getJson = <T>(path: string): Promise<T> => call<T>(path, {}, getToken())

/** POST JSON to an admin write endpoint with the write token given for this action. @throws ApiError */
export const postJson = <T>(path: string, body: unknown, writeToken: string): Promise<T> =>
  call<T>(path, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) }, writeToken)

type Attrs = Record<string, string | number | boolean | undefined | ((e: Event) => void)>
type Kid = Node | string | number | undefined | null | false

/** An HTML element; string children become text nodes, `on…` attributes listeners. */
export function h<K extends keyof HTMLElementTagNameMap>(tag: K, attrs: Attrs = {}, ...kids: Kid[]): HTMLElementTagNameMap[K] {
  const e = document.createElement(tag)
  set(e, attrs)
  for (const k of kids) if (k !== undefined && k !== null && k !== false) e.append(typeof k === 'object' ? k : String(k))
  return e
}

const SVG = 'http://www.w3.org/2000/svg'

/** An SVG element, as `h`. */
export function s(tag: string, attrs: Attrs = {}, ...kids: Kid[]): SVGElement {
  const e = document.createElementNS(SVG, tag) as SVGElement
  set(e, attrs)
  for (const k of kids) if (k !== undefined && k !== null && k !== false) e.append(typeof k === 'object' ? k : String(k))
  return e
}

function set(e: Element, attrs: Attrs): void {
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === false) continue
    if (typeof v === 'function') e.addEventListener(k.slice(2), v)
    else e.setAttribute(k, v === true ? '' : String(v))
  }
}

/** Puts `kids` in place of what `target` held. */
export const fill = (target: Element | null, ...kids: Kid[]): void => {
  if (!target) return
  target.replaceChildren(...kids.filter((k): k is Node | string | number => k !== undefined && k !== null && k !== false).map((k) => (typeof k === 'object' ? k : String(k))))
}

/** A message in the view's status line; `error` marks it as one. */
export function status(text: string, error = false): void {
  const el = document.getElementById('status')
  if (!el) return
  el.textContent = text
  el.classList.toggle('error', error)
}

/** A time for people: the viewer's zone, to the millisecond, with the UTC time as its title (hover). */
export function time(iso: string): HTMLTimeElement {
  const d = new Date(iso)
  return h('time', { datetime: iso, title: `${d.toISOString()} (UTC)` }, LOCAL.format(d))
}

/** One formatter for every time shown (making one per call costs more than the drawing). */
const LOCAL = new Intl.DateTimeFormat(undefined, { year: 'numeric', month: 'short', day: 'numeric', hour: '2-digit', minute: '2-digit', second: '2-digit', fractionalSecondDigits: 3 } as Intl.DateTimeFormatOptions)

/** A duration for people: 12 ms, 1.4 s, 2 min 5 s. */
export function human(ms: number): string {
  if (ms < 1000) return `${Math.round(ms * 10) / 10} ms`
  if (ms < 60_000) return `${(ms / 1000).toFixed(ms < 10_000 ? 2 : 1).replace(/\.?0+$/, '')} s`
  const m = Math.floor(ms / 60_000)
  const sec = Math.round((ms % 60_000) / 1000)
  return sec ? `${m} min ${sec} s` : `${m} min`
}

/** The first characters of a long hex id, with the whole id as its title. */
export const short = (id: string | undefined, n = 12): Node | string =>
  id === undefined ? '' : h('code', { title: id }, id.length > n ? `${id.slice(0, n)}…` : id)

/** The address of a timeline view from this page. */
export function timelineHref(q: { keyHash?: string; resource?: string; route?: string }): string {
  const p = new URLSearchParams()
  if (q.keyHash) p.set('keyHash', q.keyHash)
  else if (q.resource !== undefined) p.set('resource', q.resource)
  if (q.route && !q.keyHash) p.set('route', q.route)
  return `${root()}ui/timeline?${p}`
}
