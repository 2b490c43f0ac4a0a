/**
 * fencegate/client's decision table (src/client/decisions.ts) against the gateway's problems
 * (src/problems.ts) and against docs/requests.md, "What a client should do", whose table is this
 * one rendered: a row changed in the code and not in the docs (or the other way) fails here, with
 * the table to paste.
 */
import { readFileSync } from 'node:fs'
import { resolve } from 'node:path'
import { describe, expect, test } from 'vitest'
import { DECISIONS, decide, retryAfterMs, type Rule } from '../../src/client/index.js'
import { PROBLEMS } from '../../src/problems.js'

const DOC = resolve(import.meta.dirname, '../../docs/requests.md')
const BEGIN = '<!-- decisions: generated from src/client/decisions.ts, checked by test/unit/client-table.test.ts -->'
const END = '<!-- /decisions -->'

const answer = (r: Rule): string => {
  const statuses = r.status.map((s) => (s === 0 ? 'no answer' : String(s))).join(', ')
  const problems = r.problems ? ` ${r.problems.map((p) => `\`${p}\``).join(', ')}` : ''
  const replay = r.replayed === true ? ' with `Idempotent-Replayed: true`' : ''
  return `${statuses}${problems}${replay}`
}

/** The docs' table: one line per row of DECISIONS, in match order. */
const renderTable = (): string => [
  '| answer | decision | `case` | why |',
  '| --- | --- | --- | --- |',
  ...DECISIONS.map((r) => `| ${answer(r)} | **${r.action}** | \`${r.case}\` | ${r.reason.replaceAll('|', '\\|')} |`),
].join('\n')

describe('the client\'s decision table', () => {
  test('docs/requests.md shows it as it is in the code', () => {
    const doc = readFileSync(DOC, 'utf8')
    const start = doc.indexOf(BEGIN)
    const end = doc.indexOf(END)
    expect(start, `docs/requests.md has the marker ${BEGIN}`).toBeGreaterThan(0)
    expect(doc.slice(start + BEGIN.length, end).trim(), `paste this between the markers:\n${renderTable()}`).toBe(renderTable())
  })

  test('every problem it names is one the gateway answers with, under the status its row names', () => {
    const known: Record<string, { status: number }> = PROBLEMS
    for (const r of DECISIONS) for (const p of r.problems ?? []) {
      expect(known[p], `${r.case}: ${p}`).toBeDefined()
      expect(r.status, `${r.case}: ${p}`).toContain(known[p].status)
    }
  })

  test('case names are unique; every status class ends somewhere', () => {
    expect(new Set(DECISIONS.map((r) => r.case)).size).toBe(DECISIONS.length)
    for (const status of [0, 100, 200, 204, 302, 400, 401, 409, 412, 418, 422, 428, 500, 503, 599]) {
      expect(decide({ status }).action, String(status)).toEqual(expect.any(String))
    }
  })

  test('the first matching row wins: a replay before a plain 2xx, a fencegate problem before the upstream\'s same status', () => {
    expect(decide({ status: 201, headers: { 'Idempotent-Replayed': 'true' } })).toMatchObject({ action: 'done', case: 'replayed' })
    expect(decide({ status: 201, headers: new Headers() })).toMatchObject({ action: 'done', case: 'applied' })
    expect(decide({ status: 409, body: { type: 'urn:fencegate:problem:outcome-unknown' } })).toMatchObject({ action: 'surface' })
    expect(decide({ status: 409, body: { type: 'about:blank' } })).toMatchObject({ action: 'dead-letter', case: 'upstream-4xx' })
    expect(decide({ status: 412, body: 'stale, says the upstream' })).toMatchObject({ action: 'stop' })
    expect(decide({ status: 503, headers: { 'retry-after': '3' }, body: { type: 'urn:fencegate:problem:store-state-lost' } })).toMatchObject({ action: 'backoff', case: 'store-unavailable', retryAfterMs: 3000 })
  })

  test('Retry-After: delay-seconds or an HTTP date', () => {
    const now = Date.parse('2025-01-01T00:00:00Z')
    expect([retryAfterMs('1'), retryAfterMs(' 12 '), retryAfterMs(''), retryAfterMs(undefined), retryAfterMs('soon')]).toEqual([1000, 12_000, undefined, undefined, undefined])
    expect(retryAfterMs('Wed, 01 Jan 2025 00:00:05 GMT', now)).toBe(5000)
  })
})
