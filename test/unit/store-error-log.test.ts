// Failed store calls in the log (src/store/runtime/error-log.ts): the first of an outage once
// with its cause, then a summary a minute, then one line when the store answers again. The
// clock is the test's own, so a minute passes without waiting for it.
import { describe, expect, test } from 'vitest'
import { createLogger } from '../../src/log.js'
import { StoreErrorLog, STORE_ERROR_SUMMARY_MS } from '../../src/store/runtime/error-log.js'

function setup() {
  const lines: Record<string, unknown>[] = []
  const log = createLogger({ write: (s: string) => { for (const l of s.split('\n')) if (l) lines.push(JSON.parse(l)); return true } } as unknown as NodeJS.WritableStream)
  let now = 1_000_000
  const errors = new StoreErrorLog(log, 'redis', () => now)
  return { lines, errors, tick: (ms: number) => { now += ms } }
}

describe('store errors in the log', () => {
  test('an outage of two minutes, a call a second: the first failure with its cause, one summary a minute, one line on recovery', () => {
    const { lines, errors, tick } = setup()
    for (let s = 0; s < 125; s++) {
      errors.failed('markers', 'store did not answer markers within 1000 ms')
      if (s % 10 === 0) errors.failed('claim', 'connect ECONNREFUSED 127.0.0.1:6379')
      tick(1000)
    }
    errors.answered()
    expect(lines.map((l) => l.msg)).toEqual([
      expect.stringMatching(/^store call failed/),
      expect.stringMatching(/^store calls still failing, for 60 s now: \d+ failed since the last line/),
      expect.stringMatching(/^store calls still failing, for 120 s now/),
      expect.stringMatching(/^store answers again after 125 s/),
    ])
    expect(lines[0]).toMatchObject({ level: 'error', store: 'redis', op: 'markers', error: 'store did not answer markers within 1000 ms' })
    // seconds 1..60: 60 markers, 6 claims
    expect(lines[1]).toMatchObject({ store: 'redis', ops: 'markers 60, claim 6', causes: '"store did not answer markers within 1000 ms" ×60; "connect ECONNREFUSED 127.0.0.1:6379" ×6' })
    expect(lines[3]).toMatchObject({ level: 'info', failedSinceLastLine: 4 + 1 })
  })

  test('after a recovery, the next outage\'s first failure is logged at once with its own cause', () => {
    const { lines, errors, tick } = setup()
    errors.failed('ping', 'ECONNRESET')
    tick(2000)
    errors.answered()
    tick(STORE_ERROR_SUMMARY_MS)
    errors.failed('fence', 'READONLY You can\'t write against a read only replica.')
    expect(lines.map((l) => [l.msg, l.error])).toEqual([
      [expect.stringMatching(/^store call failed/), 'ECONNRESET'],
      [expect.stringMatching(/^store answers again after 2 s/), undefined],
      [expect.stringMatching(/^store call failed/), 'READONLY You can\'t write against a read only replica.'],
    ])
  })

  test('a store that fails every other call writes a few lines a minute, not one a failure', () => {
    const { lines, errors, tick } = setup()
    for (let s = 0; s < 180; s++) {
      errors.failed('markers', 'ETIMEDOUT')
      tick(500)
      errors.answered()
      tick(500)
    }
    // three minutes: at most a first line, a summary and a recovery line a minute
    expect(lines.length).toBeLessThanOrEqual(9)
    expect(lines.length).toBeGreaterThanOrEqual(3)
  })
})
