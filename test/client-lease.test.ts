/**
 * fencegate/client's withLease against a real gateway's lease service (contract §3a) in front of
 * a real upstream: the token fn's requests carry is the lease's, renewals keep it, release ends
 * it; a second holder waits out lease-held and gets a higher token; a bounded wait gives up; a
 * lost lease (renewals held back past the lease, the way a paused process makes them, while
 * another holder takes over) aborts fn's request at the upstream at once, and a write with the
 * old token after the takeover is refused 412 and never forwarded.
 */
import { describe, expect, test } from 'vitest'
import { LeaseLostError, LeaseUnavailableError, readLease, withLease, type FetchLike, type LeaseEvent } from '../src/client/index.js'
import { withGateway } from './helpers/gateway.js'
import { headerValues } from './helpers/upstream.js'
import { until } from './helpers/wait.js'

const { up, gw } = withGateway((up) => ({
  leases: { resources: ['account:*'], defaultTtl: '2s', maxTtl: '30s' },
  routes: [{ name: 'pay', path: '/accounts/:account/*', upstream: { url: up.url, timeout: '10s' },
    fencing: { resource: 'account:{param.account}' }, idempotency: { required: true } }],
}))

let n = 0
const account = () => `acct-${process.pid}-${++n}`
const json = { 'content-type': 'application/json' }

describe('withLease on the gateway\'s lease service', () => {
  test('fn\'s requests carry the lease\'s token and the job\'s key; renewed while fn runs; released after', async () => {
    const a = account()
    const events: LeaseEvent[] = []
    const out = await withLease(`account:${a}`, async (lease) => {
      const first = await lease.send(`/accounts/${a}/apply`, { method: 'POST', headers: json, body: '{}' })
      // long enough for two renewals (every third of the 2 s lease)
      await until(() => events.filter((e) => e.event === 'renewed').length >= 2, { timeoutMs: 5000, message: 'two renewals' })
      const live = await readLease({ gateway: gw.url }, `account:${a}`)
      return { token: lease.token, first, live }
    }, { gateway: gw.url, key: 'job-1', holder: 'w1', onEvent: (e) => events.push(e) })
    expect(out.first).toMatchObject({ status: 201, decision: { action: 'done', case: 'applied' } })
    const seen = up.seen.filter((s) => s.url.startsWith(`/accounts/${a}/`))
    expect(seen).toHaveLength(1)
    expect(headerValues(seen[0], 'fencing-token')).toEqual([out.token])
    expect(headerValues(seen[0], 'idempotency-key')).toEqual(['job-1'])
    expect(out.live).toMatchObject({ status: 200, body: { token: out.token, holder: 'w1' } })
    expect(events[0].event).toBe('acquired')
    expect(events.at(-1)!.event).toBe('released')
    expect(events.slice(1, -1).map((e) => e.event)).toEqual(Array(events.length - 2).fill('renewed'))
    expect(events.length).toBeGreaterThanOrEqual(4)
    expect(events.at(-1)).toMatchObject({ decision: { status: 204, action: 'done' } })
    expect((await readLease({ gateway: gw.url }, `account:${a}`)).status).toBe(404)
  })

  test('a second holder waits out lease-held (Retry-After) and gets a higher token once the first releases', async () => {
    const a = account()
    let releaseFirst!: () => void
    const held = new Promise<void>((r) => { releaseFirst = r })
    const bEvents: LeaseEvent[] = []
    const first = withLease(`account:${a}`, async (lease) => { await held; return lease.token }, { gateway: gw.url, holder: 'first' })
    await until(async () => (await readLease({ gateway: gw.url }, `account:${a}`)).status === 200, { message: 'the first lease' })
    const second = withLease(`account:${a}`, async (lease) => lease.token, { gateway: gw.url, holder: 'second', onEvent: (e) => bEvents.push(e) })
    await until(() => bEvents.some((e) => e.event === 'held'), { message: 'the second holder told lease-held' })
    releaseFirst()
    const [t1, t2] = await Promise.all([first, second])
    expect(BigInt(t2)).toBeGreaterThan(BigInt(t1))
    const heldEvent = bEvents.find((e) => e.event === 'held')!
    expect(heldEvent).toMatchObject({ holder: 'first', decision: { status: 409, action: 'retry-after', case: 'lease-held' } })
    expect(heldEvent.retryAfterMs).toBeGreaterThanOrEqual(1000)
  })

  test('a bounded wait: no lease within waitMs → LeaseUnavailableError saying lease-held', async () => {
    const a = account()
    let done!: () => void
    const first = withLease(`account:${a}`, () => new Promise<void>((r) => { done = r }), { gateway: gw.url, holder: 'keeper', ttl: '10s' })
    await until(async () => (await readLease({ gateway: gw.url }, `account:${a}`)).status === 200, { message: 'the first lease' })
    const err = await withLease(`account:${a}`, async () => 'never', { gateway: gw.url, holder: 'impatient', waitMs: 500 }).catch((e: unknown) => e)
    expect(err).toBeInstanceOf(LeaseUnavailableError)
    expect((err as LeaseUnavailableError).decision).toMatchObject({ action: 'retry-after', case: 'lease-held' })
    done()
    await first
  })

  test('a lease lost to a takeover: the old holder\'s request at the upstream is aborted at once, its next write is 412 and never forwarded', async () => {
    const a = account()
    // the old holder's renewals are held back (a paused process sends none) until `resume`
    let resume!: () => void
    const paused = new Promise<void>((r) => { resume = r })
    // (a paused process's renewal timeout does not run either: the PUT goes out whole on resume)
    const pausingFetch: FetchLike = async (input, init) => {
      if (init?.method !== 'PUT') return fetch(input, init)
      await paused
      return fetch(input, { ...init, signal: undefined })
    }
    const events: LeaseEvent[] = []
    const old = withLease(`account:${a}`, async (lease) => {
      const slow = lease.send(`/accounts/${a}/slow?ms=8000`, { method: 'POST', headers: json, body: '{}' }, { maxAttempts: 1 })
      await until(() => events.some((e) => e.event === 'lost'), { timeoutMs: 15_000, message: 'the lease to be lost' })
      const inFlight = await slow
      const late = await lease.send(`/accounts/${a}/apply`, { method: 'POST', headers: json, body: '{}', signal: undefined }, { maxAttempts: 1 })
      return { token: lease.token, inFlight, late, signalReason: lease.signal.reason }
    }, { gateway: gw.url, key: 'job-old', holder: 'old', ttl: '1s', fetch: pausingFetch, onEvent: (e) => events.push(e) })

    // the old lease runs out; another holder takes over with the next token
    await until(() => up.count(`/accounts/${a}/slow`) === 1, { message: 'the slow write at the upstream' })
    const next = await withLease(`account:${a}`, async (lease) => lease.token, { gateway: gw.url, holder: 'new', ttl: '5s', waitMs: 10_000 })
    resume()
    const r = await old
    expect(BigInt(next)).toBeGreaterThan(BigInt(r.token))
    expect(events.find((e) => e.event === 'lost')).toMatchObject({ reason: 'stale', decision: { status: 412, action: 'stop' } })
    expect(r.signalReason).toBeInstanceOf(LeaseLostError)
    // the request it had out was aborted at once (the upstream saw its connection close), decided stop
    expect(r.inFlight).toMatchObject({ status: 0, decision: { action: 'stop', case: 'aborted' } })
    await until(() => up.aborted.some((u) => u.startsWith(`/accounts/${a}/slow`)), { message: 'the upstream to see the slow write cancelled' })
    // after the abort, lease.fetch refuses to send at all: the write never leaves the worker
    expect(r.late).toMatchObject({ status: 0, decision: { action: 'stop', case: 'aborted' } })
    expect(up.count(`/accounts/${a}/apply`)).toBe(0)
    // no release for a lost lease: the new holder's lease was not touched
    expect(events.some((e) => e.event === 'released')).toBe(false)
  })

  test('a write with the old token after a takeover reaches the gateway and is refused 412 (stop); the lease is then lost', async () => {
    const a = account()
    let resume!: () => void
    const paused = new Promise<void>((r) => { resume = r })
    // (a paused process's renewal timeout does not run either: the PUT goes out whole on resume)
    const pausingFetch: FetchLike = async (input, init) => {
      if (init?.method !== 'PUT') return fetch(input, init)
      await paused
      return fetch(input, { ...init, signal: undefined })
    }
    const events: LeaseEvent[] = []
    let takenOver!: () => void
    const takeover = new Promise<void>((r) => { takenOver = r })
    const old = withLease(`account:${a}`, async (lease) => {
      await takeover
      const late = await lease.send(`/accounts/${a}/apply`, { method: 'POST', headers: json, body: '{}' }, { maxAttempts: 1 })
      return { token: lease.token, late, lost: lease.lost }
    }, { gateway: gw.url, key: 'job-late', holder: 'old', ttl: '1s', fetch: pausingFetch, onEvent: (e) => events.push(e) })
    await until(() => events.some((e) => e.event === 'acquired'), { message: 'the old lease' })
    const next = await withLease(`account:${a}`, async (lease) => {
      const w = await lease.send(`/accounts/${a}/apply`, { method: 'POST', headers: json, body: '{"by":"new"}' }, { maxAttempts: 1 })
      return { token: lease.token, w }
    }, { gateway: gw.url, key: 'job-new', holder: 'new', ttl: '5s', waitMs: 10_000 })
    takenOver()
    const r = await old
    resume()
    expect(next.w.decision.case).toBe('applied')
    expect(r.late).toMatchObject({ status: 412, body: { type: 'urn:fencegate:problem:stale-fencing-token', token: r.token, highestToken: next.token }, decision: { action: 'stop', case: 'stale-fencing-token' } })
    expect(r.lost).toBeInstanceOf(LeaseLostError)
    expect(events.find((e) => e.event === 'lost')).toMatchObject({ reason: 'stale', decision: { status: 412, problem: 'stale-fencing-token' } })
    const seen = up.seen.filter((s) => s.url.startsWith(`/accounts/${a}/`))
    expect(seen.map((s) => headerValues(s, 'fencing-token')[0])).toEqual([next.token])
  })
})
