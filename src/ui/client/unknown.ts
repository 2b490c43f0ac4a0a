/**
 * The Unknown outcomes view (`/ui/unknown`): `GET /unknown` as a sortable table that refreshes
 * itself, each row with its timeline and a Settle action. Settling asks for the outcome, a
 * reason and the write token (admin.writeToken, used for this one call and not kept), and calls
 * `POST /resolve {route, keyHash, as, reason}`.
 */
import { ApiError, fill, getJson, h, postJson, short, status, time, timelineHref } from './lib.js'

interface Unknown { route: string; keyHash: string; resource?: string; since: string; reason: string; replica?: string; traceId?: string; requestId?: string; expires: string }

const COLUMNS: [keyof Unknown, string][] = [['route', 'route'], ['keyHash', 'key hash'], ['resource', 'resource'], ['since', 'since'], ['reason', 'reason'], ['replica', 'replica'], ['traceId', 'trace id'], ['requestId', 'request id']]
const REFRESH_MS = 5000

export async function unknownView(): Promise<void> {
  const target = document.getElementById('unknown')!
  let rows: Unknown[] = []
  let sort: { col: keyof Unknown; dir: 1 | -1 } = { col: 'since', dir: 1 }
  const dialog = document.getElementById('settle') as HTMLDialogElement
  const form = document.getElementById('settle-form') as HTMLFormElement
  let settling: Unknown | undefined
  let opener: HTMLElement | undefined

  const render = () => {
    const sorted = [...rows].sort((a, b) => String(a[sort.col] ?? '').localeCompare(String(b[sort.col] ?? '')) * sort.dir)
    if (!sorted.length) { fill(target, h('p', { id: 'unknown-empty' }, 'No record is in the unknown state.')); return }
    fill(target, h('div', { class: 'scroll' }, h('table', { id: 'unknown-table' },
      h('caption', { class: 'help' }, `${sorted.length} record${sorted.length === 1 ? '' : 's'} in the unknown state; choose a column heading to sort`),
      h('thead', {}, h('tr', {}, ...COLUMNS.map(([col, label]) => h('th', { scope: 'col', 'aria-sort': sort.col === col ? (sort.dir === 1 ? 'ascending' : 'descending') : undefined },
        h('button', { type: 'button', 'data-col': col, onclick: () => { sort = { col, dir: sort.col === col ? (-sort.dir as 1 | -1) : 1 }; render() } }, label))), h('th', { scope: 'col' }, 'actions'))),
      h('tbody', {}, ...sorted.map((u) => h('tr', { 'data-key-hash': u.keyHash },
        h('td', {}, u.route), h('td', {}, short(u.keyHash)), h('td', {}, u.resource ?? ''), h('td', {}, time(u.since)), h('td', {}, u.reason),
        h('td', {}, u.replica ?? ''), h('td', {}, short(u.traceId)), h('td', {}, short(u.requestId, 13)),
        h('td', {}, h('a', { href: timelineHref(u) }, 'timeline'), ' ',
          h('button', { type: 'button', class: 'settle', 'aria-label': `Settle key hash ${u.keyHash.slice(0, 12)} of route ${u.route}`, onclick: (ev: Event) => open(u, ev.currentTarget as HTMLElement) }, 'Settle'))))))))
  }

  const refresh = async () => {
    try {
      rows = (await getJson<{ unknown: Unknown[] }>('unknown')).unknown
      render()
      if (document.getElementById('status')?.classList.contains('error')) status('')
    } catch (e) {
      rows = []
      fill(target)
      status((e as Error).message, true)
    }
  }

  const open = (u: Unknown, from: HTMLElement) => {
    settling = u
    opener = from
    form.reset()
    fill(document.getElementById('settle-what'), `Route ${u.route}, key hash `, h('code', {}, u.keyHash), `, unknown since `, time(u.since), ` (${u.reason}).`)
    fill(document.getElementById('settle-error'))
    dialog.showModal()
  }
  document.getElementById('settle-cancel')!.addEventListener('click', () => { dialog.close(); opener?.focus() })
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault()
    if (!settling) return
    const f = new FormData(form)
    const body = { route: settling.route, keyHash: settling.keyHash, as: String(f.get('as')), reason: String(f.get('reason') ?? '').trim() }
    if (!body.reason) { fill(document.getElementById('settle-error'), 'Give a reason: it is kept in the attempt log with who settled it.'); return }
    try {
      const r = await postJson<{ effect: string }>('resolve', body, String(f.get('writeToken') ?? ''))
      dialog.close()
      status(`Settled as ${body.as}: ${r.effect}.`)
      await refresh()
      document.getElementById('main')?.focus()
    } catch (e) {
      const msg = e instanceof ApiError && (e.status === 401 || e.status === 403) ? `The write token was refused: ${e.message}` : (e as Error).message
      fill(document.getElementById('settle-error'), msg)
    }
  })

  await refresh()
  // live: new unknown outcomes appear and settled ones leave without a reload (not while settling)
  setInterval(() => { if (!dialog.open) refresh().catch(() => {}) }, REFRESH_MS)
}
