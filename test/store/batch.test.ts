import { describe, expect, test } from 'vitest'
import { batcher } from '../../src/store/postgres/batcher.js'

/** A batch runner that refuses any batch holding a negative input, like a server refusing one value. */
function runner() {
  const batches: number[][] = []
  const run = async (inputs: readonly number[]) => {
    batches.push([...inputs])
    if (inputs.some((n) => n < 0)) throw Object.assign(new Error('refused'), { code: '22021' })
    return inputs.map((n) => n * 10)
  }
  return { batches, run }
}

describe('batcher: a failed batch', () => {
  test('that the server refused and rolled back is made again call by call: only the refused call fails', async () => {
    const { batches, run } = runner()
    const call = batcher(run, { isolate: (e) => (e as { code?: string }).code === '22021' })
    const results = await Promise.allSettled([call(1), call(-1), call(2)])
    expect(results.map((r) => (r.status === 'fulfilled' ? r.value : 'refused'))).toEqual([10, 'refused', 20])
    expect(batches).toEqual([[1, -1, 2], [1], [-1], [2]])
  })

  test('whose outcome is unknown (not isolated) fails every call and is never made again', async () => {
    const { batches, run } = runner()
    const call = batcher(run)
    const results = await Promise.allSettled([call(1), call(-1), call(2)])
    expect(results.map((r) => r.status)).toEqual(['rejected', 'rejected', 'rejected'])
    expect(batches).toEqual([[1, -1, 2]])
  })
})
