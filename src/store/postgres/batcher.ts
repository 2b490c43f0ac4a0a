/**
 * Group commit for the PostgreSQL store (./batches.ts): calls of one operation made while
 * `maxInFlight` batches of it are running wait, and go to the server together as the next
 * batch — one round trip and one commit for all of them. A quiet gateway sends each call at the end of its event-loop turn,
 * so batching adds no waiting when there is nothing to wait for.
 *
 * Built on DataLoader (cache off: every call is its own entry, equal inputs included), whose
 * `batchScheduleFn` holds a batch open until a slot is free.
 */
import DataLoader from 'dataloader'

export interface BatchOptions {
  /** batches of this operation running at once; default 2 */
  maxInFlight?: number
  /** most calls in one batch; default 256 */
  maxBatch?: number
  /**
   * Whether a batch's error proves nothing of it was applied (the server refused it and rolled
   * back), so each call may be made again alone; default: never. Any other error (a connection
   * lost mid-commit: the batch may have committed) fails every call of the batch.
   */
  isolate?: (e: unknown) => boolean
}

/**
 * @param run executes a batch in one transaction; must resolve with one result per input, in
 *   input order (an Error in the array rejects that call alone). When it rejects with an error
 *   `options.isolate` accepts, each call is run again alone, so the rejection fails only the
 *   calls that fail on their own too; any other rejection fails the whole batch.
 * @returns a function that queues one call and resolves with its result
 */
export function batcher<I, O>(run: (inputs: readonly I[]) => Promise<(O | Error)[]>, options: BatchOptions = {}): (input: I) => Promise<O> {
  const { maxInFlight = 2, maxBatch = 256, isolate = () => false } = options
  let inFlight = 0
  const waiting: (() => void)[] = []
  const loader = new DataLoader<I, O>(async (inputs) => {
    try {
      return await run(inputs)
    } catch (e) {
      if (inputs.length === 1 || !isolate(e)) throw e
      // One call the server refuses (a value it cannot store, a statement timeout on one hot
      // row) must not fail the others: the batch's transaction rolled back, so each call is
      // made again on its own, in order (calls of one key keep their order), and only the calls
      // that fail again fail.
      const out: (O | Error)[] = []
      for (const input of inputs) out.push(await run([input]).then((r) => r[0], (err: Error) => err))
      return out
    } finally {
      const next = waiting.shift()
      if (next) next() // the slot passes straight to the batch that waited for it
      else inFlight--
    }
  }, {
    cache: false,
    maxBatchSize: maxBatch,
    batchScheduleFn: (dispatch) => {
      if (inFlight < maxInFlight) {
        inFlight++
        setImmediate(dispatch) // collect the rest of this event-loop turn's calls first
      } else {
        waiting.push(dispatch)
      }
    },
  })
  return (input) => loader.load(input)
}
