import { Problem } from '../problems.js'
import { StoreError } from './types.js'

/** The 503 a request gets when the store cannot answer: fail closed, nothing forwarded. */
export function storeProblem(e: unknown): Problem | unknown {
  if (!(e instanceof StoreError)) return e
  return new Problem('store-unavailable', 'The gateway cannot reach its store, so it cannot check this request; nothing was forwarded.', {}, { 'retry-after': '1' })
}
