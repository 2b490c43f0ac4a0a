// The claim sentences (contract §8) generated from a route's config: what a reviewer reads to
// check the promise against the config.
import { describe, expect, test } from 'vitest'
import { parseConfig } from '../../src/config/load.js'
import { claimFor } from '../../src/audit/guarantees.js'
import { formatDuration, formatSize } from '../../src/config/units.js'

const config = (store: string, routeExtra: string) => parseConfig(`store:
${store}
routes:
  - name: payments
    match:
      path: /accounts/:account/*
      methods: [POST, PUT]
    upstream:
      url: http://127.0.0.1:9090
${routeExtra}`, '/tmp/fencegate.yaml')

const claimOf = (store: string, routeExtra: string) => {
  const c = config(store, routeExtra)
  return claimFor(c.routes[0], c.store)
}
const all = (c: ReturnType<typeof claimOf>) => [...c.guarantees, ...c.assumptions, ...c.notGuaranteed].join('\n')

const FENCING = `    fencing:
      resource: "account:{param.account}"
`
const IDEM = (extra = '') => `    idempotency:
      required: true
      ttl: 24h
      lease: 30s
${extra}`

describe('claimFor', () => {
  test('fencing required, idempotency at-most-once, sqlite: every sentence names what the config says', () => {
    const c = claimOf('  kind: sqlite\n  path: /var/lib/fencegate/fg.db', FENCING + IDEM())
    expect(c.guarantees.length).toBeGreaterThan(0)
    expect(c.assumptions.length).toBeGreaterThan(0)
    expect(c.notGuaranteed.length).toBeGreaterThan(0)
    const text = all(c)
    expect(c.guarantees.join('\n')).toMatch(/lower than the highest token .*"account:\{param\.account\}".* refused with 412/)
    expect(c.guarantees.join('\n')).toMatch(/without a Fencing-Token header is refused with 428/)
    expect(c.guarantees.join('\n')).toMatch(/At most once per key/)
    expect(c.guarantees.join('\n')).toMatch(/replayed byte for byte.* for 24h/)
    expect(c.guarantees.join('\n')).toMatch(/A POST request without an Idempotency-Key is refused with 400/)
    expect(c.notGuaranteed.join('\n')).toMatch(/At least once: an attempt whose outcome is unknown may never have taken effect/)
    expect(c.notGuaranteed.join('\n')).toMatch(/check-to-apply window/)
    expect(c.assumptions.join('\n')).toMatch(/upstream closes the check-to-apply window itself .*Fencing-Token/)
    expect(c.assumptions.join('\n')).toMatch(/within 30s \(idempotency\.lease\).*the clock of the one host every gateway sharing the file runs on/)
    expect(c.assumptions.join('\n')).toMatch(/SQLite store \(\/var\/lib\/fencegate\/fg\.db\).*power loss/)
    expect(c.assumptions.join('\n')).toMatch(/one host/)
    // PUT is routed but not deduplicated: said so
    expect(c.notGuaranteed.join('\n')).toMatch(/PUT requests are not deduplicated/)
    expect(text).toMatch(/no clock is involved in fencing/)
  })

  test('unknownOutcome retry is at-least-once and says duplicates are possible', () => {
    const c = claimOf('  kind: postgres\n  url: postgres://x@127.0.0.1/db', IDEM('      unknownOutcome: retry\n'))
    expect(c.guarantees.join('\n')).toMatch(/At least once per key/)
    expect(c.guarantees.join('\n')).not.toMatch(/At most once/)
    expect(c.notGuaranteed.join('\n')).toMatch(/Exactly once: .*take effect twice.*duplicateForwards/)
    expect(c.assumptions.join('\n')).toMatch(/PostgreSQL .*asynchronous standby/)
    // replicas share the store: leases run on its clock, theirs need not agree
    expect(c.assumptions.join('\n')).toMatch(/on the store's clock .*replicas sharing the store need not agree on the time/)
    // no fencing: no fencing sentence
    expect(all(c)).not.toMatch(/Fencing is on/)
  })

  test('optional fencing and idempotency say what slips through', () => {
    const c = claimOf('  kind: redis\n  url: redis://127.0.0.1:6379', `    fencing:
      resource: "account:{param.account}"
      required: false
    idempotency:
      inFlight: wait
`)
    expect(c.notGuaranteed.join('\n')).toMatch(/without a Fencing-Token header is forwarded unfenced/)
    expect(c.notGuaranteed.join('\n')).toMatch(/without an Idempotency-Key is forwarded every time/)
    expect(c.guarantees.join('\n')).toMatch(/waits for it and gets its response/)
    expect(c.assumptions.join('\n')).toMatch(/Redis .*replication is asynchronous/)
  })

  test('the memory store is said not to be durable', () => {
    const c = claimOf('  kind: memory', FENCING)
    expect(c.notGuaranteed.join('\n')).toMatch(/memory store is not durable/)
  })

  test('a route with neither fencing nor idempotency still gets a sentence saying so', () => {
    const c = claimOf('  kind: sqlite', '')
    expect(c.guarantees).toEqual([])
    expect(c.notGuaranteed).toHaveLength(1)
    expect(c.notGuaranteed[0]).toMatch(/Neither fencing nor idempotency/)
  })

  test('durations and sizes are written as in the config', () => {
    expect(formatDuration(86_400_000)).toBe('24h')
    expect(formatDuration(7 * 86_400_000)).toBe('7d')
    expect(formatDuration(30_000)).toBe('30s')
    expect(formatDuration(1500)).toBe('1500ms')
    expect(formatDuration(5_400_000)).toBe('90m')
    expect(formatSize(1024 ** 2)).toBe('1MiB')
    expect(formatSize(65_536)).toBe('64KiB')
    expect(formatSize(1000)).toBe('1000 bytes')
  })
})
