// src/fencing/window.ts on its own (`fencing.serialize: store`), over the memory store: two
// StoreWindows on one store play two gateways. The stores' side is in test/store/conformance.ts;
// two real gateways on sqlite, redis and postgres in test/fencing-window-replicas.test.ts.
import { afterEach, describe, expect, test, vi } from 'vitest'
import { MemoryStore, StoreError, type Store } from '../src/store/index.js'
import { StoreWindow, MARGIN_MS, LONGEST_POLL_MS, type WindowTimes } from '../src/fencing/window.js'
import { createLogger } from '../src/log.js'
import { sleep } from './helpers/wait.js'

const lines: string[] = []
const log = createLogger({ write: (s: string) => { lines.push(s); return true } } as unknown as NodeJS.WritableStream)
const times: WindowTimes = { serializeWait: 1000, upstreamTimeout: 2000, waitForInFlight: false }
const never = () => false

afterEach(() => { vi.restoreAllMocks(); lines.length = 0 })

async function registered(w: StoreWindow, resource: string, token: bigint, t: WindowTimes = times, recorded = false) {
  const r = await w.register(resource, token, t, recorded, Date.now())
  if (!('ticket' in r)) throw new Error(`not registered: mark ${r.highest}`)
  return r
}

describe('StoreWindow', () => {
  test('a registration\'s deadline is the request\'s own bound: the wait, then an upstream timeout and the hold of an unknown outcome', async () => {
    const store = new MemoryStore()
    const w = new StoreWindow(store, log)
    const before = Date.now()
    const bare = await registered(w, 'r1', 1n)
    // serializeWait + margin before sending, then 2 × upstream.timeout (the answer, one more for an unknown outcome) + margin
    expect(bare.ticket.deadline - before).toBeGreaterThanOrEqual(1000 + 2 * 2000 + 2 * MARGIN_MS)
    expect(bare.ticket.deadline - before).toBeLessThan(1000 + 2 * 2000 + 2 * MARGIN_MS + 50)
    // with a record: the lease from the start, when it is longer
    const rec = await registered(w, 'r2', 1n, { ...times, lease: 30_000, waitForInFlight: true }, true)
    expect(rec.ticket.deadline - before).toBeGreaterThanOrEqual(30_000 + MARGIN_MS)
    expect(rec.ticket.deadline - before).toBeLessThan(30_000 + MARGIN_MS + 50)
  })

  test('a token below the mark is not registered', async () => {
    const store = new MemoryStore()
    await store.fence('r', 7n)
    expect(await new StoreWindow(store, log).register('r', 6n, times, false, Date.now())).toEqual({ highest: 7n })
  })

  test('a newer token waits for an older one of another gateway until it leaves; equal tokens do not wait', async () => {
    const store = new MemoryStore()
    const a = new StoreWindow(store, log)
    const b = new StoreWindow(store, log)
    const five = await registered(a, 'r', 5n)
    const six = await registered(b, 'r', 6n)
    expect(six.older).toMatchObject({ oldest: 5n })
    const equal = await registered(b, 'r', 5n)
    expect(equal.older.oldest).toBeUndefined() // 5 is not older than 5
    await b.leave(equal.ticket)
    const started = Date.now()
    const waited = b.waitForOlder(six.ticket, six.older, 2000, never)
    setTimeout(() => { void a.leave(five.ticket) }, 120)
    expect(await waited).toEqual({ kind: 'clear' })
    const took = Date.now() - started
    expect(took).toBeGreaterThanOrEqual(115)
    expect(took).toBeLessThan(120 + LONGEST_POLL_MS + 80) // seen at the next poll
  })

  test('on one gateway, a request that leaves wakes its waiters at once', async () => {
    const store = new MemoryStore()
    const w = new StoreWindow(store, log)
    const five = await registered(w, 'r', 5n)
    const six = await registered(w, 'r', 6n)
    // let the polls back off to their longest pause first
    let done: unknown
    void w.waitForOlder(six.ticket, six.older, 2000, never).then((x) => { done = x })
    await sleep(200)
    await w.leave(five.ticket)
    // within the same turn of the event loop, not at the next poll (a timer up to 50 ms away)
    await new Promise((r) => setImmediate(r))
    expect(done).toEqual({ kind: 'clear' })
  })

  test('the wait is bounded: it answers within serializeWait + 50 ms with when the older registrations expire', async () => {
    const store = new MemoryStore()
    const a = new StoreWindow(store, log)
    const b = new StoreWindow(store, log)
    const five = await registered(a, 'r', 5n)
    const six = await registered(b, 'r', 6n)
    const started = Date.now()
    expect(await b.waitForOlder(six.ticket, six.older, 130, never)).toEqual({ kind: 'timeout', until: five.ticket.deadline })
    const took = Date.now() - started
    expect(took).toBeGreaterThanOrEqual(129)
    expect(took).toBeLessThan(130 + LONGEST_POLL_MS + 30)
  })

  test('a client that leaves stops the wait', async () => {
    const store = new MemoryStore()
    const w = new StoreWindow(store, log)
    await registered(w, 'r', 5n)
    const six = await registered(w, 'r', 6n)
    expect(await w.waitForOlder(six.ticket, six.older, 2000, () => true)).toEqual({ kind: 'gone' })
  })

  test('an unknown outcome keeps the registration until its hold ends', async () => {
    const store = new MemoryStore()
    const w = new StoreWindow(store, log)
    const five = await registered(w, 'r', 5n)
    five.ticket.holdUntil = Date.now() + 5000
    await w.leave(five.ticket)
    expect(await store.olderRegistered('r', 6n, Date.now())).toEqual({ oldest: 5n, until: five.ticket.holdUntil })
    // a hold already over deletes it
    const seven = await registered(w, 'q', 7n)
    seven.ticket.holdUntil = Date.now() - 1
    await w.leave(seven.ticket)
    expect(await store.olderRegistered('q', 8n, Date.now())).toEqual({ until: 0 })
  })

  test('a request sent later than its deadline foresaw extends it as it is sent', async () => {
    const store = new MemoryStore()
    const w = new StoreWindow(store, log)
    const { ticket } = await registered(w, 'r', 5n)
    const sent: bigint[] = []
    const flights = w.flights(ticket, { markSent: (t) => sent.push(t) })
    const first = ticket.deadline
    // sent in time: nothing to write
    flights.markSent(5n)
    expect(ticket.deadline).toBe(first)
    // sent an hour late (an in-flight key waited for, a slow store): the bound moves with it
    const later = Date.now() + 3_600_000
    vi.spyOn(Date, 'now').mockReturnValue(later)
    flights.markSent(5n)
    expect(sent).toEqual([5n, 5n])
    expect(ticket.deadline).toBe(later + 2 * 2000 + MARGIN_MS)
    await new Promise((r) => setImmediate(r))
    expect(await store.olderRegistered('r', 6n, later)).toEqual({ oldest: 5n, until: later + 2 * 2000 + MARGIN_MS })
  })

  test('a registration that cannot be removed is logged, never thrown: it counts until its deadline', async () => {
    const store = new MemoryStore()
    const down = new Proxy(store, {
      get(target, prop) {
        if (prop === 'unregister') return () => Promise.reject(new StoreError('down', 'unregister'))
        const v = Reflect.get(target, prop) as unknown
        return typeof v === 'function' ? v.bind(target) : v
      },
    }) as Store
    const w = new StoreWindow(down, log)
    const five = await registered(w, 'r', 5n)
    await expect(w.leave(five.ticket)).resolves.toBeUndefined()
    expect(lines.some((l) => l.includes('registration could not be removed'))).toBe(true)
    expect(await store.olderRegistered('r', 6n, Date.now())).toMatchObject({ oldest: 5n })
  })
})
