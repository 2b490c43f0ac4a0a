/**
 * The audit view's entry script (`/ui/assets/main.js`): the token field, then the view the
 * shell names (`<body data-view>`). Errors (a missing or refused token, a store that cannot
 * answer) go to the status line, and no data is shown.
 */
import { getToken, setToken, status } from './lib.js'
import { leasesView } from './leases.js'
import { routesView } from './routes.js'
import { overviewView, timelineView } from './timeline.js'
import { unknownView } from './unknown.js'

const VIEWS: Record<string, () => Promise<void>> = { overview: overviewView, routes: routesView, unknown: unknownView, timeline: timelineView, leases: leasesView }

function tokenForm(): void {
  const form = document.getElementById('token-form') as HTMLFormElement
  const input = document.getElementById('token') as HTMLInputElement
  input.placeholder = getToken() ? 'token kept for this tab' : 'paste admin.token'
  form.addEventListener('submit', (ev) => {
    ev.preventDefault()
    setToken(input.value.trim())
    input.value = ''
    location.reload()
  })
  document.getElementById('token-forget')!.addEventListener('click', () => { setToken(''); location.reload() })
}

tokenForm()
const view = VIEWS[document.body.dataset.view ?? '']
view?.().catch((e: unknown) => {
  status((e as Error).message, true)
  if (!getToken()) (document.getElementById('token') as HTMLInputElement).focus()
})
