/** What the SQLite store (./index.ts) is opened with. */
import type { WriteSequence } from '../state-loss/sequence.js'

export interface SqliteStoreOptions {
  /** database file; its folder is created when missing */
  path: string
  /**
   * how long a call waits for another process's lock before it fails with StoreError, ms;
   * default 1000. The wait is asynchronous (retries on timers), except when the file is opened
   * and initialised, which waits in the constructor.
   */
  busyTimeoutMs?: number
  /** `full` (default) survives a power loss too, `normal` a process crash only */
  synchronous?: 'normal' | 'full'
  /** how often expired records are deleted, ms; default 60000 (0 turns the reaper off) */
  reapIntervalMs?: number
  /** attempt log entries older than this are deleted, ms; default 7 days */
  auditRetentionMs?: number
  /** the write sequence to follow (../state-loss/sequence.ts); default a new one */
  sequence?: WriteSequence
}
