// Access lines (src/log.ts): gathered per event-loop turn and serialised at the flush; each line
// must be the JSON a generic serialiser would write, whatever a client put in the fields.
import { describe, expect, test } from 'vitest'
import { createLogger, type Fields } from '../../src/log.js'

const capture = () => {
  const chunks: string[] = []
  const log = createLogger({ write: (s: string) => { chunks.push(s); return true } } as unknown as NodeJS.WritableStream)
  return { log, lines: () => chunks.join('').split('\n').filter(Boolean) }
}
const turn = () => new Promise((r) => setImmediate(r))

describe('access lines', () => {
  test('each is JSON.stringify of { time, level, msg, ...fields }: quotes, backslashes, control characters, non-ASCII, lone surrogates, non-finite numbers', async () => {
    const { log, lines } = capture()
    const fields: Fields[] = [
      { requestId: 'r1', path: '/a"b\\c', route: 'pay', status: 201, durationMs: 0.25, duplicate: true, view: undefined },
      { path: '/\u0000\u001f\u007f', resource: 'caf\u00e9 \u2028 \ud83d\ude00', token: '7', upstreamMs: Number.NaN, lateMs: Infinity },
      { path: '/\ud800x', client: '::1', overtaken: false },
    ]
    const before = Date.now()
    for (const f of fields) log.access(f)
    expect(lines()).toEqual([]) // nothing written before the turn ends
    await turn()
    const written = lines()
    expect(written).toHaveLength(3)
    written.forEach((l, i) => {
      const parsed = JSON.parse(l) as { time: string }
      expect(Date.parse(parsed.time)).toBeGreaterThanOrEqual(Math.floor(before / 1000) * 1000)
      expect(l).toBe(JSON.stringify({ time: parsed.time, level: 'info', msg: 'request', ...fields[i] }))
    })
  })

  test('another line first writes the access lines gathered before it: order is kept', async () => {
    const { log, lines } = capture()
    log.access({ requestId: 'a' })
    log.warn('store slow', { route: 'pay' })
    log.access({ requestId: 'b' })
    await turn()
    expect(lines().map((l) => JSON.parse(l) as { msg: string; requestId?: string }).map((l) => l.requestId ?? l.msg)).toEqual(['a', 'store slow', 'b'])
  })
})
