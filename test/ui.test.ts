// The audit view in a real browser (Debian's chromium driven by playwright-core) against a real
// gateway, store and upstream: the seed's timeline drawn and read back from the DOM, an unknown
// outcome settled through the page, tokens refused, and hostile text kept as text under the CSP.
// Screenshots of each view go to a temporary folder, or to docs/images/ with
// FENCEGATE_SCREENSHOTS=docs/images (`npm run screenshots`), so a test run leaves the tree clean.
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { afterAll, beforeAll, describe, expect, test } from 'vitest'
import { chromium, type BrowserContext, type Page } from 'playwright-core'
import { startTestGateway, withGateway } from './helpers/gateway.js'
import { post, send } from './helpers/http.js'
import { sleep, until } from './helpers/wait.js'

const READ = 'read-secret-1'
const WRITE = 'write-secret-2'
const IMAGES = process.env.FENCEGATE_SCREENSHOTS
  ? resolve(import.meta.dirname, '..', process.env.FENCEGATE_SCREENSHOTS)
  : mkdtempSync(join(tmpdir(), 'fg-ui-shots-'))
const HOSTILE = '<img src=x onerror="window.__xss=1"><script>window.__xss=2</script>'

const { up, gw } = withGateway((up) => ({
  admin: { token: READ, writeToken: WRITE },
  store: { kind: 'sqlite', path: '@DIR@/fg.db' },
  leases: { resources: ['account:lease-*'], defaultTtl: '1s' },
  routes: [
    { name: 'payments', path: '/accounts/:account/*', methods: ['POST'], upstream: up.url,
      fencing: { resource: 'account:{param.account}' }, idempotency: { required: true, lease: '5s' } },
    // an upstream that never answers within its timeout: an unknown outcome
    { name: 'ledger', path: '/ledger/:account/*', methods: ['POST'], upstream: { url: up.url, timeout: '300ms' },
      fencing: { resource: 'ledger:{param.account}' }, idempotency: { required: true, lease: '5s' } },
    // the same, settled by a probe the upstream answers 200 (applied)
    { name: 'settled', path: '/settled/:account/*', methods: ['POST'], upstream: { url: up.url, timeout: '300ms' },
      fencing: { resource: 'settled:{param.account}' },
      idempotency: { required: true, lease: '5s', settle: { probe: { path: '/status/200?of={param.account}', applied: [200], notApplied: [404] }, after: '1s', every: '30s' } } },
    { name: 'tenants', path: '/tenants/*', methods: ['POST'], upstream: up.url,
      fencing: { resource: 'tenant:{header.x-tenant}' }, idempotency: {} },
  ],
}))

let dir: string
let ctx: BrowserContext
let page: Page

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'fg-chromium-'))
  ctx = await chromium.launchPersistentContext(dir, {
    executablePath: '/usr/bin/chromium',
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run'],
    viewport: { width: 1280, height: 800 },
  })
  page = ctx.pages()[0] ?? await ctx.newPage()
}, 30_000)

afterAll(async () => {
  await ctx?.close()
  rmSync(dir, { recursive: true, force: true })
})

const admin = (path: string, token = READ) => send(`${gw.adminUrl}${path}`, { headers: { authorization: `Bearer ${token}` } })

/** Opens a view in a fresh tab state and gives it the read token through its token field. */
async function openWithToken(path: string): Promise<void> {
  await page.goto(`${gw.adminUrl}${path}`)
  await page.getByLabel('Admin token').fill(READ)
  await Promise.all([page.waitForEvent('load'), page.getByRole('button', { name: 'Use token' }).click()])
}

const shot = (name: string) => page.screenshot({ path: join(IMAGES, `${name}.png`) })

describe('the audit view', () => {
  test('the shell needs no token and holds no data; every admin response carries the CSP, nosniff and no-referrer; data is not cached', async () => {
    const shell = await send(`${gw.adminUrl}/ui/unknown`)
    expect(shell.status).toBe(200)
    expect(shell.headers['content-type']).toBe('text/html; charset=UTF-8')
    expect(shell.text).toContain('<label for="token">Admin token</label>')
    for (const r of [shell, await send(`${gw.adminUrl}/ui/assets/main.js`), await admin('/unknown'), await send(`${gw.adminUrl}/unknown`)]) {
      expect(r.headers['content-security-policy']).toMatch(/^default-src 'self'(;|$)/)
      expect(r.headers['x-content-type-options']).toBe('nosniff')
      expect(r.headers['referrer-policy']).toBe('no-referrer')
    }
    expect((await admin('/unknown')).headers['cache-control']).toBe('no-store')
    expect((await send(`${gw.adminUrl}/ui/assets/main.js`)).headers['content-type']).toBe('text/javascript; charset=utf-8')
    expect((await send(`${gw.adminUrl}/ui/assets/view.css`)).headers['content-type']).toBe('text/css; charset=utf-8')
    expect((await send(`${gw.adminUrl}/unknown`)).status).toBe(401)
    // nothing from elsewhere: every src and href of the shell is relative to the admin listener
    expect([...shell.text.matchAll(/(?:src|href)="([^"]*)"/g)].map((m) => m[1]).filter((u) => /^[a-z]+:|^\/\//i.test(u))).toEqual([])
  })

  test('the seed\'s timeline: token 33 forwarded, 34 replayed, 33 refused stale; lanes, marks and order read from the drawing', async () => {
    const body = { amount: 1250, currency: 'eur' }
    const headers = (token: string) => ({ 'fencing-token': token, 'idempotency-key': 'job-9-9f2c' })
    expect((await post(`${gw.url}/accounts/acct-9f2c/charges`, body, headers('33'))).status).toBe(201)
    await sleep(300) // the ack is lost, the lease expires: a gap the drawing shows on its time scale
    const replay = await post(`${gw.url}/accounts/acct-9f2c/charges`, body, headers('34'))
    expect(replay.headers['idempotent-replayed']).toBe('true')
    await sleep(300)
    expect((await post(`${gw.url}/accounts/acct-9f2c/charges`, body, headers('33'))).status).toBe(412)
    expect(up.count('/accounts/acct-9f2c/')).toBe(1)
    const t = await until(async () => { const j = (await admin('/audit/timeline?route=payments&key=job-9-9f2c')).json(); return j.entries?.length === 3 && j })

    // no token: an error, and no data
    await page.goto(`${gw.adminUrl}/ui/timeline?keyHash=${t.keyHash}`)
    await expect.poll(() => page.locator('#status.error').textContent()).toMatch(/needs the admin token/)
    expect(await page.locator('svg.timeline').count()).toBe(0)

    await page.getByLabel('Admin token').fill(READ)
    await Promise.all([page.waitForEvent('load'), page.getByRole('button', { name: 'Use token' }).click()])
    await page.locator('svg.timeline').waitFor()
    expect(await page.locator('svg.timeline g.lane').evaluateAll((gs) => gs.map((g) => g.getAttribute('data-lane')))).toEqual(['token 33', 'token 34', 'high-water mark', 'upstream'])
    const marks = await page.locator('svg.timeline g.attempt').evaluateAll((gs) => gs.map((g) => ({
      outcome: g.getAttribute('data-outcome'), lane: g.getAttribute('data-lane'), text: g.querySelector('text')!.textContent,
      x: g.querySelector('circle, rect:not(.req), path, polygon')!.getBoundingClientRect().x,
    })))
    expect(marks.map((m) => [m.outcome, m.lane])).toEqual([['forwarded', 'token 33'], ['replayed', 'token 34'], ['stale', 'token 33']])
    expect(marks[0].x).toBeLessThan(marks[1].x) // time runs left to right
    expect(marks[1].x).toBeLessThan(marks[2].x)
    expect(marks[2].text).toMatch(/^412 stale \d+(\.\d)? ms after token 34 took over$/)
    // the high-water mark steps from 33 to 34; token 33's tenure ends where 34 was first accepted
    expect(await page.locator('svg.timeline [data-mark]').allTextContents()).toEqual(['33', '34'])
    expect(await page.locator('svg.timeline rect[data-tenure="33"] title').textContent()).toMatch(/^token 33 held the resource until token 34 was first accepted/)
    // only the first attempt reached the upstream
    expect(await page.locator('svg.timeline g.upstream').evaluateAll((gs) => gs.map((g) => g.getAttribute('data-upstream')))).toEqual(['answered'])
    // the same entries as a table, oldest first; times in the viewer's zone with UTC on hover
    expect(await page.locator('table.entries tbody tr').evaluateAll((rs) => rs.map((r) => r.getAttribute('data-outcome')))).toEqual(['forwarded', 'replayed', 'stale'])
    expect(await page.locator('table.entries time').first().getAttribute('title')).toBe(`${t.entries[0].time} (UTC)`)
    await shot('timeline-view')
    await page.locator('#timeline .scroll').first().screenshot({ path: join(IMAGES, 'timeline.png') }) // the drawing alone, for the README

    // pages: the newest `limit` entries, then the ones before on "Older attempts"
    const newest = (await admin(`/audit/timeline?keyHash=${t.keyHash}&limit=2`)).json()
    expect([newest.entries.map((e: { outcome: string }) => e.outcome), newest.more]).toEqual([['replayed', 'stale'], true])
    const before = (await admin(`/audit/timeline?keyHash=${t.keyHash}&limit=2&until=${newest.entries[0].time}`)).json()
    expect([before.entries.map((e: { outcome: string }) => e.outcome), before.more]).toEqual([['forwarded'], undefined])
    await page.goto(`${gw.adminUrl}/ui/timeline?keyHash=${t.keyHash}&limit=2`)
    await page.locator('svg.timeline').waitFor()
    expect(await page.locator('svg.timeline g.attempt').count()).toBe(2)
    await page.getByRole('button', { name: 'Older attempts' }).click()
    await expect.poll(() => page.locator('svg.timeline g.attempt').count()).toBe(3)
    expect(await page.getByRole('button', { name: 'Older attempts' }).count()).toBe(0)

    // the overview at / draws the newest key's timeline
    await page.goto(`${gw.adminUrl}/`)
    await page.locator('svg.timeline').waitFor()
    expect(await page.locator('#recent tbody tr').first().textContent()).toContain('payments')
    await shot('overview')
  }, 60_000)

  test('a key with attempts milliseconds and seconds apart: every row\'s request id differs, no mark or label covers another, the axis is broken, leases have a legend entry', async () => {
    const body = { amount: 75, currency: 'eur' }
    const headers = (token: string) => ({ 'fencing-token': token, 'idempotency-key': 'job-rough-1' })
    const ids: string[] = []
    const go = async (token: string, status: number) => {
      const r = await post(`${gw.url}/accounts/acct-rough/charges`, body, headers(token))
      expect(r.status).toBe(status)
      ids.push(String(r.headers['x-request-id']))
    }
    await go('50', 201); await go('51', 201); await go('50', 412)
    await sleep(2500) // seconds after three attempts milliseconds apart: the seed's pile-up
    await go('51', 201); await go('50', 412)
    const t = await until(async () => { const j = (await admin('/audit/timeline?route=payments&key=job-rough-1')).json(); return j.entries?.length === 5 && j })
    await openWithToken(`/ui/timeline?keyHash=${t.keyHash}`)
    await page.locator('svg.timeline').waitFor()

    // the request id column: the part that differs, each the end of the id the client was given
    const cells = await page.locator('table.entries tbody tr td:nth-child(6)').allTextContents()
    expect(cells).toHaveLength(5)
    expect(new Set(cells).size).toBe(5)
    cells.forEach((c, i) => {
      expect(c).toMatch(/^…[0-9a-f]{12}$/)
      expect(ids[i].endsWith(c.slice(1))).toBe(true)
    })
    expect(await page.locator('table.entries tbody tr td:nth-child(6) code').evaluateAll((cs) => cs.map((c) => c.getAttribute('title')))).toEqual(ids)

    // no two attempts' marks or words overlap, and time still runs left to right
    const boxes = await page.locator('svg.timeline g.attempt').evaluateAll((gs) => gs.map((g) => {
      const box = (el: Element) => { const r = el.getBoundingClientRect(); return { l: r.left, r: r.right, t: r.top, b: r.bottom } }
      return { mark: box(g.querySelector('circle, rect:not(.req), path, polygon')!), text: box(g.querySelector('text')!), words: g.querySelector('text')!.textContent }
    }))
    expect(boxes.map((b) => b.words)).toEqual(['201 forwarded', '201 replayed', expect.stringMatching(/^412 stale/), '201 replayed', expect.stringMatching(/^412 stale/)])
    type Box = { l: number; r: number; t: number; b: number }
    const overlap = (a: Box, b: Box) => a.l < b.r && b.l < a.r && a.t < b.b && b.t < a.b
    const clashes: string[] = []
    boxes.forEach((a, i) => boxes.forEach((b, j) => {
      if (j <= i) return
      for (const [what, p, q] of [['marks', a.mark, b.mark], ['labels', a.text, b.text], ['mark and label', a.mark, b.text], ['label and mark', a.text, b.mark]] as const) {
        if (overlap(p, q)) clashes.push(`${what} of ${a.words} (#${i}) and ${b.words} (#${j})`)
      }
    }))
    expect(clashes).toEqual([])
    // nor do the axis's clock times
    const ticks = await page.locator('svg.timeline g.axis > text').evaluateAll((ts) => ts.map((t) => { const r = t.getBoundingClientRect(); return { l: r.left, r: r.right, t: r.top, b: r.bottom } }))
    expect(ticks.length).toBeGreaterThan(0)
    expect(ticks.slice(1).filter((b, i) => overlap(ticks[i], b))).toEqual([])
    const byTime = boxes.map((b) => b.mark.l)
    expect(byTime.slice(1).every((v, i) => v > byTime[i])).toBe(true)
    // the seconds of nothing are cut out of the axis and say how long they were
    const breaks = await page.locator('svg.timeline g.axis-break').evaluateAll((gs) => gs.map((g) => [Number(g.getAttribute('data-break')), [...g.querySelector('text')!.childNodes].filter((n) => n.nodeType === 3).map((n) => n.textContent).join('')]))
    expect(breaks).toHaveLength(1)
    expect(breaks[0][0]).toBeGreaterThanOrEqual(2400)
    expect(breaks[0][1]).toMatch(/^\+2(\.\d+)? s$/)

    // the dashed lease boxes have their legend entry, drawn as they are
    const tenure = page.locator('ul.legend li[data-legend="tenure"]')
    expect(await tenure.textContent()).toMatch(/dashed box: a fencing token's lease/)
    expect(await tenure.locator('rect.tenure').count()).toBe(1)
    expect(await page.locator('svg.timeline rect.tenure').count()).toBe(2)
    await shot('timeline-rough')

    // the overview's wait line: one ellipsis, not the shortened hash's and the wait's together
    const held: (() => void)[] = []
    await page.route('**/audit/timeline?**', async (route) => { await new Promise<void>((r) => held.push(r)); await route.continue() })
    try {
      await page.goto(`${gw.adminUrl}/`)
      await expect.poll(() => page.locator('#status').textContent()).toMatch(/^Reading the timeline of key hash [0-9a-f]{12}…$/)
      expect(await page.locator('#status').textContent()).not.toContain('……')
    } finally {
      held.forEach((r) => r())
    }
    await page.locator('svg.timeline').waitFor() // the held answer arrived: the route is done with
    await page.unroute('**/audit/timeline?**')
  }, 60_000)

  test('a wrong token shows an error and no data', async () => {
    await page.goto(`${gw.adminUrl}/ui/routes`)
    await page.getByLabel('Admin token').fill('not-the-token')
    await Promise.all([page.waitForEvent('load'), page.getByRole('button', { name: 'Use token' }).click()])
    await expect.poll(() => page.locator('#status.error').textContent()).toMatch(/^The token was refused/)
    expect(await page.locator('#routes').textContent()).toBe('')
    expect(await page.locator('#store').textContent()).toBe('')
  }, 60_000)

  test('an unknown outcome appears without a reload, is settled with the write token and a reason, and its key is forwarded again', async () => {
    await openWithToken('/ui/unknown')
    await page.locator('#unknown-empty').waitFor()
    const headers = { 'fencing-token': '40', 'idempotency-key': 'job-u-1' }
    expect((await post(`${gw.url}/ledger/acct-u/hang`, { amount: 5 }, headers)).status).toBe(504)
    const row = page.locator('#unknown-table tbody tr')
    await row.first().waitFor({ timeout: 10_000 }) // the list refreshes itself
    expect(await row.locator('td').evaluateAll((tds) => tds.slice(0, 5).map((td) => td.textContent))).toEqual(
      ['ledger', expect.stringMatching(/^[0-9a-f]{12}…$/), 'ledger:acct-u', expect.any(String), 'timeout'])
    await shot('unknown')

    await row.getByRole('button', { name: /^Settle/ }).click()
    const dialog = page.getByRole('dialog')
    await dialog.getByRole('radio', { name: /^failed/ }).check()
    await dialog.getByLabel(/^Reason/).fill(`ledger shows no charge ${HOSTILE}`)
    await dialog.getByLabel(/^Write token/).fill(READ) // the read token may not write
    await dialog.getByRole('button', { name: 'Settle' }).click()
    await expect.poll(() => page.locator('#settle-error').textContent()).toMatch(/^The write token was refused/)
    await dialog.getByLabel(/^Write token/).fill(WRITE)
    await dialog.getByRole('button', { name: 'Settle' }).click()
    await expect.poll(() => page.locator('#status').textContent()).toMatch(/^Settled as failed: released/)
    await page.locator('#unknown-empty').waitFor()

    // forwardable again, and the audit names the reason
    expect((await post(`${gw.url}/ledger/acct-u/charges`, { amount: 5 }, headers)).status).toBe(201)
    expect(up.count('/ledger/acct-u/charges')).toBe(1)
    const actions = (await admin('/audit?since=1h')).json().operatorActions
    expect(actions).toEqual([expect.objectContaining({ kind: 'resolve', route: 'ledger', resolution: 'failed', reason: `ledger shows no charge ${HOSTILE}`, by: expect.stringMatching(/^admin-api:127\.0\.0\.1/) })])
  }, 60_000)

  // after the operator's resolve above: a settlement by probe is in the attempt log's operator actions too
  test('an unknown outcome settled by probe: the probe and the settlement with its answer are drawn in their own lane', async () => {
    const headers = { 'fencing-token': '3', 'idempotency-key': 'job-probe-1' }
    expect((await post(`${gw.url}/settled/acct-p/apply-then-hang`, { amount: 9 }, headers)).status).toBe(504)
    const t = await until(async () => {
      const j = (await admin('/audit/timeline?route=settled&key=job-probe-1')).json()
      return j.entries?.some((e: { kind: string }) => e.kind === 'resolve') && j
    }, { timeoutMs: 15_000, message: 'the probe to settle the key' })
    await openWithToken(`/ui/timeline?keyHash=${t.keyHash}`)
    await page.locator('svg.timeline').waitFor()
    expect(await page.locator('svg.timeline g.lane').evaluateAll((gs) => gs.map((g) => g.getAttribute('data-lane')))).toEqual(['token 3', 'high-water mark', 'upstream', 'settle probes'])
    const marks = await page.locator('svg.timeline g.attempt').evaluateAll((gs) => gs.map((g) => [g.getAttribute('data-outcome'), g.getAttribute('data-lane'), g.querySelector('text')!.textContent]))
    expect(marks).toEqual([
      ['unknown', 'token 3', expect.stringMatching(/^504 .*unknown \(timeout\)/)],
      ['probe', 'settle probes', 'probe: 200 applied'],
      ['settled', 'settle probes', 'settled as applied (200)'],
    ])
    expect(await page.locator('ul.legend li[data-legend="probe"]').textContent()).toContain('settle probe')
    expect(await page.locator('ul.legend li[data-legend="settled"]').textContent()).toContain('settled by probe')
    expect(await page.locator('table.entries tbody tr').evaluateAll((rs) => rs.map((r) => r.getAttribute('data-outcome')))).toEqual(['unknown', 'probe', 'settled'])
    await shot('timeline-settled')
  }, 60_000)

  test('hostile text in resources, header values and reasons stays text, and the CSP blocks inline script', async () => {
    expect((await post(`${gw.url}/tenants/orders`, {}, { 'fencing-token': '1', 'idempotency-key': '<script>window.__xss=3</script>', 'x-tenant': HOSTILE })).status).toBe(201)
    expect((await post(`${gw.url}/accounts/${encodeURIComponent('<svg onload=window.__xss=4>')}/charges`, {}, { 'fencing-token': '1', 'idempotency-key': 'k-x' })).status).toBe(201)
    const pages = ['/', `/ui/timeline?resource=${encodeURIComponent(`tenant:${HOSTILE}`)}`, `/ui/timeline?keyHash=${(await admin('/audit/timeline?route=ledger&key=job-u-1')).json().keyHash}`, '/ui/routes', '/ui/unknown', '/ui/leases']
    const blocked: string[] = []
    page.on('console', (m) => { if (/Content Security Policy/.test(m.text())) blocked.push(m.text()) })
    for (const p of pages) {
      await openWithToken(p)
      await expect.poll(() => page.locator('#status').textContent()).toBe('')
      expect(await page.evaluate(() => (window as unknown as { __xss?: number }).__xss)).toBeUndefined()
      expect(await page.locator('script').count()).toBe(1) // the page's own module only
      expect(await page.locator('img').count()).toBe(0)
    }
    // on the resource's timeline the text is there, as text
    await openWithToken(pages[1])
    await page.locator('svg.timeline').waitFor()
    expect(await page.locator('main').textContent()).toContain(`tenant:${HOSTILE}`)
    // the second line: an inline script that did reach the DOM is refused by the CSP
    await page.evaluate(() => { const s = document.createElement('script'); s.textContent = 'window.__inline = 1'; document.body.append(s) })
    expect(await page.evaluate(() => (window as unknown as { __inline?: number }).__inline)).toBeUndefined()
    await until(() => blocked.length > 0, { message: 'chromium to report the inline script refused by the Content Security Policy' })
  }, 60_000)

  test('Routes, Leases at 1280×800 and the timeline at phone width', async () => {
    await openWithToken('/ui/routes')
    await page.locator('section.route[data-route="payments"]').waitFor()
    expect(await page.locator('#findings li').count()).toBeGreaterThan(0)
    expect(await page.locator('section.route[data-route="payments"] h3').allTextContents()).toEqual(['Last 24 hours', 'Guarantees', 'Assumptions', 'Not guaranteed'])
    await shot('routes')
    await openWithToken('/ui/leases')
    await page.locator('section.route[data-route="payments"] svg.chart').first().waitFor()
    await shot('leases')

    await page.setViewportSize({ width: 390, height: 800 })
    await openWithToken('/')
    await page.locator('svg.timeline').waitFor()
    // the page itself does not scroll sideways; the drawing scrolls in its own box
    expect(await page.evaluate(() => document.documentElement.scrollWidth)).toBeLessThanOrEqual(390)
    await page.keyboard.press('Tab') // keyboard: the skip link comes first
    expect(await page.evaluate(() => document.activeElement?.textContent)).toBe('Skip to the view')
    await shot('phone')
    await page.setViewportSize({ width: 1280, height: 800 })
  }, 60_000)

  test('a resource\'s lease bars: each token the lease service granted gets a bar from its grant to its end in its lane; the takeover raises the mark; the old holder\'s write is refused', async () => {
    const r = `lease-ui-${Date.now()}`
    const lease = (holder: string) => post(`${gw.url}/_fencegate/leases/account%3A${r}`, { holder })
    const pay = (token: string, key: string) => post(`${gw.url}/accounts/${r}/charges`, { amount: 1 }, { 'fencing-token': token, 'idempotency-key': key })
    expect((await lease('worker-a')).json().token).toBe('1')
    expect((await pay('1', `${r}-a`)).status).toBe(201)
    expect((await send(`${gw.url}/_fencegate/leases/account%3A${r}`, { method: 'PUT', headers: { 'fencing-token': '1' } })).status).toBe(200)
    const taken = await until(async () => { const g = await lease('worker-b'); return g.status === 201 && g.json() }, { timeoutMs: 10_000, intervalMs: 300 })
    expect(taken.token).toBe('2')
    expect((await pay('1', `${r}-late`)).status).toBe(412)
    expect((await pay('2', `${r}-b`)).status).toBe(201)
    await gw.audit.flush()
    await openWithToken(`/ui/timeline?resource=${encodeURIComponent(`account:${r}`)}`)
    await page.locator('svg.timeline').waitFor()
    expect(await page.locator('svg.timeline g.lane').evaluateAll((gs) => gs.map((g) => g.getAttribute('data-lane')))).toEqual(['token 1', 'token 2', 'high-water mark', 'upstream'])
    expect(await page.locator('svg.timeline rect[data-lease]').evaluateAll((rs) => rs.map((x) => x.getAttribute('data-lease')))).toEqual(['1', '2'])
    expect(await page.locator('svg.timeline rect[data-lease="1"] title').textContent()).toMatch(/^token 1: leased to worker-a for /)
    const words = await page.locator('svg.timeline g.attempt[data-lane="token 1"] text').allTextContents()
    expect(words).toEqual(expect.arrayContaining(['lease granted (worker-a)', 'lease renewed (worker-a)', 'lease expired (worker-a)']))
    expect(await page.locator('svg.timeline [data-mark]').allTextContents()).toEqual(['1', '2'])
    await shot('lease-bars')
  })
})

test('an admin listener beyond loopback without admin.token shows a warning banner on every view', async () => {
  const open = await startTestGateway({ admin: { listen: '0.0.0.0:0' }, routes: [{ name: 'plain', path: '/plain/*', upstream: 'http://127.0.0.1:9' }] })
  try {
    const port = new URL(open.adminUrl).port
    for (const p of ['/', '/ui/routes', '/ui/timeline']) {
      const r = await send(`http://127.0.0.1:${port}${p}`)
      expect(r.text).toMatch(/<p class="banner" role="alert"><strong>Warning:<\/strong> the admin listener on 0\.0\.0\.0:0 is reachable beyond this host and admin\.token is not set/)
    }
  } finally {
    await open.close()
  }
  // and none on loopback
  expect((await send(`${gw.adminUrl}/`)).text).not.toContain('class="banner"')
})
