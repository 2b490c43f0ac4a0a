/** What the memory store is opened with (./index.ts), and how full it is. */
import type { WriteSequence } from '../state-loss/sequence.js'

export interface MemoryStoreOptions {
  /** most resources with a high-water mark; default 1,000,000 */
  maxResources?: number
  /** most unexpired idempotency records kept; default 100,000 */
  maxRecords?: number
  /** `store.acceptRisks: [maxRecords]`: at maxRecords the oldest completed record is dropped (counted) instead of a new key refused */
  evictRecords?: boolean
  /** attempt log entries older than this are not reported, ms; default 7 days */
  auditRetentionMs?: number
  /** most attempt log entries kept; default 100,000 */
  auditCapacity?: number
  /** `store.acceptRisks: [maxAttempts]`: a full attempt log drops its oldest entry (counted) instead of refusing the new one */
  evictAttempts?: boolean
  /** the write sequence to follow; default a new one */
  sequence?: WriteSequence
}

/** How full the memory store is, and how fast it fills (`fencegate doctor`). */
export interface MemoryCapacity {
  records: number
  maxRecords: number
  evictRecords: boolean
  resources: number
  maxResources: number
  /** records added under a new key since the store was made, and over how many ms */
  added: number
  overMs: number
  /** the longest ttl a claim asked for, ms (0 before the first) */
  longestTtlMs: number
  evicted: number
}
