/**
 * The conformance suite's cases for the lease service (contract §3a; src/store/contract/
 * leases.ts), run by conformance.ts against every store: a grant above every token issued and
 * the high-water mark, which it raises; one live lease per resource under racing holders (from
 * one client and from two); expiry and takeover; renewals and releases only by the live lease's
 * token; a store reopened (the gateway restarted) in between; tokens strictly rising. What a
 * grant does to the fence is read the way a gateway reads it: through `fence` and `mark`.
 */
import { describe, expect, test } from 'vitest'
import { StoreError, type Store } from '../../src/store/index.js'
import { T0 } from './conformance.js'

const R = 'account:acct-9f2c'
const TTL = 10_000
const MAX_TOKEN = 9223372036854775807n

/**
 * The lease cases on the stores `open` makes; `openSecond` (conformance's `makeSecond`) opens
 * another client on the same state, also after the first was closed (a restarted gateway);
 * `onClock` one that takes its instants from its own clock (redis, postgres).
 */
export function describeLeases(open: () => Promise<Store>, openSecond?: () => Promise<Store>, onClock?: () => Promise<Store>): void {
  describe('leases (contract §3a)', () => {
    test('a first grant takes token 1 and raises the mark to it; the lease reads back; the fence accepts its token', async () => {
      const s = await open()
      const g = await s.acquireLease(R, 'worker-7', TTL, T0)
      expect(g).toEqual({ granted: true, lease: { resource: R, token: 1n, holder: 'worker-7', expiresAt: T0 + TTL, ttlMs: TTL } })
      expect(await s.mark(R)).toEqual({ highest: 1n, since: T0 })
      expect(await s.readLease(R, T0 + 1)).toEqual({ resource: R, token: 1n, holder: 'worker-7', expiresAt: T0 + TTL, ttlMs: TTL })
      expect(await s.fence(R, 1n, T0 + 2)).toMatchObject({ accepted: true, highest: 1n })
      expect(await s.readLease('account:other', T0)).toBeUndefined()
    })

    test('a grant goes above the high-water mark that tokens from elsewhere set', async () => {
      const s = await open()
      await s.fence(R, 41n, T0)
      const g = await s.acquireLease(R, 'w', TTL, T0 + 1)
      expect(g.granted && g.lease.token).toBe(42n)
      expect(await s.fence(R, 41n, T0 + 2)).toMatchObject({ accepted: false, highest: 42n })
    })

    test('another holder is refused while the lease is live, with the holder and its end, and nothing is written', async () => {
      const s = await open()
      await s.acquireLease(R, 'a', TTL, T0)
      expect(await s.acquireLease(R, 'b', TTL, T0 + TTL - 1)).toEqual({ granted: false, held: { resource: R, token: 1n, holder: 'a', expiresAt: T0 + TTL, ttlMs: TTL } })
      expect(await s.mark(R)).toEqual({ highest: 1n, since: T0 })
      expect(await s.renewLease(R, 1n, T0 + TTL - 1)).toMatchObject({ done: true })
    })

    test('the same holder asking again gets a new token; the one it never saw is stale from then on', async () => {
      const s = await open()
      await s.acquireLease(R, 'a', TTL, T0)
      const g = await s.acquireLease(R, 'a', TTL, T0 + 5)
      expect(g).toEqual({ granted: true, lease: { resource: R, token: 2n, holder: 'a', expiresAt: T0 + 5 + TTL, ttlMs: TTL }, previous: { token: 1n, holder: 'a', expiresAt: T0 + TTL, expired: false } })
      expect(await s.renewLease(R, 1n, T0 + 6)).toEqual({ done: false, highest: 2n })
    })

    test('expiry and takeover: the next holder gets the next token at the end; the old holder\'s renew, release and write are refused', async () => {
      const s = await open()
      await s.acquireLease(R, 'a', 1_000, T0)
      expect((await s.acquireLease(R, 'b', TTL, T0 + 999)).granted).toBe(false)
      const g = await s.acquireLease(R, 'b', TTL, T0 + 1_000)
      expect(g).toEqual({ granted: true, lease: { resource: R, token: 2n, holder: 'b', expiresAt: T0 + 1_000 + TTL, ttlMs: TTL }, previous: { token: 1n, holder: 'a', expiresAt: T0 + 1_000, expired: true } })
      expect(await s.renewLease(R, 1n, T0 + 1_001)).toEqual({ done: false, highest: 2n })
      expect(await s.releaseLease(R, 1n, T0 + 1_002)).toEqual({ done: false, highest: 2n })
      // the takeover raised the mark: the old holder is refused before the new one writes at all
      expect(await s.fence(R, 1n, T0 + 1_003)).toMatchObject({ accepted: false, highest: 2n })
      expect(await s.readLease(R, T0 + 1_004)).toMatchObject({ token: 2n, holder: 'b' })
    })

    test('a renewal moves the end by the lease\'s ttl from the renewal; a lease past its end nobody took may still be renewed', async () => {
      const s = await open()
      await s.acquireLease(R, 'a', 1_000, T0)
      expect(await s.renewLease(R, 1n, T0 + 800)).toEqual({ done: true, lease: { resource: R, token: 1n, holder: 'a', expiresAt: T0 + 1_800, ttlMs: 1_000 } })
      expect((await s.acquireLease(R, 'b', TTL, T0 + 1_500)).granted).toBe(false)
      expect(await s.readLease(R, T0 + 1_800)).toBeUndefined()
      expect(await s.renewLease(R, 1n, T0 + 2_000)).toMatchObject({ done: true, lease: { expiresAt: T0 + 3_000 } })
      expect((await s.acquireLease(R, 'b', TTL, T0 + 2_500)).granted).toBe(false)
      expect((await s.acquireLease(R, 'b', TTL, T0 + 3_000)).granted).toBe(true)
    })

    test('a release ends the lease at once; a second release and a renewal are stale; the next grant is above the released token', async () => {
      const s = await open()
      await s.acquireLease(R, 'a', TTL, T0)
      expect(await s.releaseLease(R, 1n, T0 + 1)).toEqual({ done: true, lease: { resource: R, token: 1n, holder: 'a', expiresAt: T0 + TTL, ttlMs: TTL } })
      expect(await s.readLease(R, T0 + 2)).toBeUndefined()
      expect(await s.releaseLease(R, 1n, T0 + 3)).toEqual({ done: false, highest: 1n })
      expect(await s.renewLease(R, 1n, T0 + 3)).toEqual({ done: false, highest: 1n })
      const g = await s.acquireLease(R, 'b', TTL, T0 + 4)
      expect(g).toEqual({ granted: true, lease: { resource: R, token: 2n, holder: 'b', expiresAt: T0 + 4 + TTL, ttlMs: TTL } })
    })

    test('a lease passed by a newer token fenced from elsewhere is stale; renew and release of a resource without a lease are stale', async () => {
      const s = await open()
      await s.acquireLease(R, 'a', TTL, T0)
      await s.fence(R, 7n, T0 + 1)
      expect(await s.renewLease(R, 1n, T0 + 2)).toEqual({ done: false, highest: 7n })
      expect(await s.releaseLease(R, 1n, T0 + 2)).toEqual({ done: false, highest: 7n })
      expect(await s.renewLease('account:none', 1n, T0)).toEqual({ done: false })
      await s.fence('account:fenced', 3n, T0)
      expect(await s.releaseLease('account:fenced', 3n, T0)).toEqual({ done: false, highest: 3n })
    })

    test('tokens strictly rise across takeovers and releases', async () => {
      const s = await open()
      let last = 0n
      for (let i = 0; i < 20; i++) {
        const g = await s.acquireLease(R, `w${i}`, 1_000, T0 + i * 1_000)
        expect(g.granted).toBe(true)
        const t = g.granted ? g.lease.token : 0n
        expect(t).toBeGreaterThan(last)
        last = t
        if (i % 3 === 0) expect((await s.releaseLease(R, t, T0 + i * 1_000 + 1)).done).toBe(true)
      }
    })

    test('past Lua\'s and JavaScript\'s exact numbers: a mark of 2^53+1 gives the grant 2^53+2 exactly; one of 2^63−2 the largest token', async () => {
      const s = await open()
      const big = 2n ** 53n + 1n
      await s.fence(R, big, T0)
      const g = await s.acquireLease(R, 'w', TTL, T0 + 1)
      expect(g.granted && g.lease.token).toBe(big + 1n)
      expect(await s.mark(R)).toEqual({ highest: big + 1n, since: T0 + 1 })
      expect(await s.renewLease(R, big + 1n, T0 + 2)).toMatchObject({ done: true, lease: { token: big + 1n } })
      await s.fence('account:top', MAX_TOKEN - 1n, T0)
      const top = await s.acquireLease('account:top', 'w', TTL, T0 + 1)
      expect(top.granted && top.lease.token).toBe(MAX_TOKEN)
      expect(await s.fence('account:top', MAX_TOKEN, T0 + 2)).toMatchObject({ accepted: true, highest: MAX_TOKEN })
    })

    test('no token above 2^63−1: a grant on a resource whose mark or lease holds it is refused with StoreError, on every engine alike, and nothing is written', async () => {
      const s = await open()
      await s.fence(R, MAX_TOKEN, T0)
      for (const holder of ['a', 'b']) {
        const e = await s.acquireLease(R, holder, TTL, T0 + 1).then(() => undefined, (x: unknown) => x)
        expect(e).toBeInstanceOf(StoreError)
        expect((e as StoreError).op).toBe('lease_acquire')
        expect((e as Error).message).toContain('the resource has token 9223372036854775807, the largest fencing token, so no lease can be granted above it; nothing was written')
      }
      expect(await s.mark(R)).toEqual({ highest: MAX_TOKEN, since: T0 })
      expect(await s.readLease(R, T0 + 2)).toBeUndefined()
      // the lease that took the largest token: its holder asking again is refused too, the lease kept
      await s.fence('account:last', MAX_TOKEN - 1n, T0)
      const last = await s.acquireLease('account:last', 'w', TTL, T0 + 1)
      expect(last.granted && last.lease.token).toBe(MAX_TOKEN)
      await expect(s.acquireLease('account:last', 'w', TTL, T0 + 2)).rejects.toBeInstanceOf(StoreError)
      expect(await s.readLease('account:last', T0 + 3)).toMatchObject({ token: MAX_TOKEN, holder: 'w', expiresAt: T0 + 1 + TTL })
      // other resources are not affected
      expect(await s.acquireLease('account:fresh', 'w', TTL, T0)).toMatchObject({ granted: true, lease: { token: 1n } })
    })

    test('a grant racing fences from elsewhere: its token is above every token the fence accepted before it, and the mark never falls back', async () => {
      const s = await open()
      const other = openSecond ? await openSecond() : s
      for (let round = 0; round < 12; round++) {
        const r = `account:race-${round}`
        // tokens 1..8 fenced in a shuffled order, the grant started among them
        const tokens = Array.from({ length: 8 }, (_, i) => BigInt(i + 1)).sort(() => Math.random() - 0.5)
        const at = round % (tokens.length + 1)
        const fences = tokens.map((t, i) => other.fence(r, t, T0 + i))
        const grant = s.acquireLease(r, 'w', TTL, T0 + at)
        const [g, ...done] = await Promise.all([grant, ...fences])
        expect(g.granted).toBe(true)
        const token = g.granted ? g.lease.token : 0n
        const accepted = tokens.filter((_, i) => done[i].accepted)
        // linearised, the fences accepted before the grant are those below its token, and it is one above the highest of them
        const before = accepted.filter((t) => t < token)
        expect(token, `round ${round}: accepted ${accepted.join(',')}`).toBe((before.length ? before.reduce((a, b) => (a > b ? a : b)) : 0n) + 1n)
        const top = accepted.reduce((a, b) => (a > b ? a : b), token)
        expect((await s.mark(r))?.highest, `round ${round}`).toBe(top)
        // a fence below the grant after it is refused
        expect(await other.fence(r, token - 1n, T0 + 100)).toMatchObject({ accepted: false })
      }
    })

    test('holders racing: of 40 at once one is granted, the others see its lease', async () => {
      const s = await open()
      const all = await Promise.all(Array.from({ length: 40 }, (_, i) => s.acquireLease(R, `w${i}`, TTL, T0)))
      const granted = all.filter((g) => g.granted)
      expect(granted).toHaveLength(1)
      const winner = granted[0].granted ? granted[0].lease : undefined
      for (const g of all) if (!g.granted) expect(g.held).toEqual(winner)
      expect(await s.mark(R)).toMatchObject({ highest: 1n })
    })

    test.runIf(openSecond)('holders racing from two clients: one is granted; after the lease ends, one takes over with the next token', async () => {
      const a = await open()
      const b = await openSecond!()
      const race = (now: number) => Promise.all(Array.from({ length: 30 }, (_, i) => (i % 2 ? a : b).acquireLease(R, `w${i}`, 1_000, now)))
      const first = (await race(T0)).filter((g) => g.granted)
      expect(first).toHaveLength(1)
      const second = (await race(T0 + 1_000)).filter((g) => g.granted)
      expect(second).toHaveLength(1)
      expect(second[0].granted && second[0].lease.token).toBe(2n)
    })

    test.runIf(openSecond)('a restart in between (the store reopened): the lease is still there, a takeover goes above it, the old token is stale', async () => {
      const a = await open()
      await a.acquireLease(R, 'a', 1_000, T0)
      await a.close()
      const b = await openSecond!()
      expect(await b.readLease(R, T0 + 1)).toMatchObject({ token: 1n, holder: 'a' })
      expect((await b.acquireLease(R, 'b', TTL, T0 + 2)).granted).toBe(false)
      const g = await b.acquireLease(R, 'b', TTL, T0 + 1_000)
      expect(g.granted && g.lease.token).toBe(2n)
      expect(await b.renewLease(R, 1n, T0 + 1_001)).toEqual({ done: false, highest: 2n })
    })

    test.runIf(onClock)('on the store\'s own clock: the lease ends a ttl after the store\'s now, answered on this process\'s clock', async () => {
      const s = await onClock!()
      const before = Date.now()
      const g = await s.acquireLease(R, 'a', 60_000, T0)
      expect(g.granted).toBe(true)
      const end = g.granted ? g.lease.expiresAt : 0
      // the store and this process share a host here: within a second of this process's own reckoning
      expect(end).toBeGreaterThan(before + 59_000)
      expect(end).toBeLessThan(Date.now() + 61_000)
      expect(await s.readLease(R, T0)).toMatchObject({ token: 1n })
      expect((await s.acquireLease(R, 'b', 60_000, T0)).granted).toBe(false)
    })

    test('after close every lease call rejects with StoreError', async () => {
      const s = await open()
      await s.close()
      for (const call of [() => s.acquireLease(R, 'a', TTL, T0), () => s.renewLease(R, 1n, T0), () => s.releaseLease(R, 1n, T0), () => s.readLease(R, T0)]) {
        await expect(call()).rejects.toBeInstanceOf(StoreError)
      }
    })
  })
}
