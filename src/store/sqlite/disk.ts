/**
 * A file that can be read but not written: the disk is full (SQLITE_FULL, ENOSPC underneath), the
 * filesystem went read-only (SQLITE_READONLY), or a write failed in the kernel (SQLITE_IOERR_*).
 * A request whose decision needs no new state (a replay of a completed record, a stale token's
 * refusal, a token equal to the high-water mark) is still answered from what the file holds; one
 * that needs a write fails closed with StoreFull (limit `disk`, 503, nothing forwarded).
 */
import { StoreFull } from '../contract/errors.js'
import type { WriteRefusal } from '../contract/store.js'

const code = (e: unknown): string => String((e as { code?: unknown } | null)?.code ?? '')

/** Whether SQLite refused a write for a reason of the disk, not of the data. */
export const refusesWrites = (e: unknown): boolean => /^SQLITE_(FULL|READONLY|IOERR)/.test(code(e))

/** Whether a statement tried to write on a connection held to reads (`PRAGMA query_only`). */
export const triedToWrite = (e: unknown): boolean => code(e).startsWith('SQLITE_READONLY')

/** How long a disk refusal stays in `/readyz` and `fencegate doctor` after the last one, ms. */
export const DISK_RECENT_MS = 60_000

/** Remembers the last disk refusal, and turns SQLite's error into the store's StoreFull. */
export class DiskWatch {
  #last?: WriteRefusal

  /** The StoreFull (limit `disk`) a call `op` fails with when SQLite refused its write `e`. */
  refusal(op: string, e: unknown): StoreFull {
    const c = code(e) || 'SQLITE_IOERR'
    this.#last = { code: c, message: (e as Error)?.message ?? String(e), at: Date.now() }
    return Object.assign(new StoreFull(`the store's disk refuses writes (${c}: ${this.#last.message})`, op, 'disk', 0), { cause: e })
  }

  /** The last refusal if it came within DISK_RECENT_MS, else undefined. */
  recent(now = Date.now()): WriteRefusal | undefined {
    return this.#last && now - this.#last.at < DISK_RECENT_MS ? this.#last : undefined
  }
}
