/**
 * Opening the SQLite file: its folder made, WAL and the chosen `synchronous`, the schema and the
 * columns added since older versions, the epoch written on first use; then busy_timeout 0, so
 * that from here on a locked database answers SQLITE_BUSY at once and the wait is on timers
 * (./busy.ts): SQLite's busy handler would sleep on the event-loop thread.
 */
import { mkdirSync, statSync } from 'node:fs'
import { dirname } from 'node:path'
import { randomUUID } from 'node:crypto'
import Database, { type Database as Db } from 'better-sqlite3'
import { StoreError } from '../contract/store.js'
import { ADDED_COLUMNS, LEASES_SCHEMA, META, REGISTRATIONS_SCHEMA, SCHEMA, addColumn, tableInfo } from './sql.js'

/** An open, initialised file. */
export interface OpenFile {
  db: Db
  /** set when the file was first initialised */
  epoch: string
  /** the file's inode when opened (0 for `:memory:`) */
  inode: number
}

/**
 * Opens and initialises the file at `path` (`:memory:` for none); waits for another process's
 * lock up to `busyTimeoutMs`, in SQLite's own busy handler (this is the one synchronous wait).
 * @throws StoreError (`op` open) when the file cannot be opened or initialised
 */
export function openFile(path: string, busyTimeoutMs: number, synchronous: 'normal' | 'full'): OpenFile {
  try {
    if (path !== ':memory:') mkdirSync(dirname(path), { recursive: true })
    const db = new Database(path, { timeout: busyTimeoutMs })
    db.pragma('journal_mode = WAL')
    db.pragma(`synchronous = ${synchronous === 'full' ? 'FULL' : 'NORMAL'}`)
    db.exec(SCHEMA)
    db.exec(REGISTRATIONS_SCHEMA)
    db.exec(LEASES_SCHEMA)
    // a file made by an older version: the columns added since
    const columns = new Map<string, Set<string>>()
    for (const [table, column, type] of ADDED_COLUMNS) {
      let have = columns.get(table)
      if (!have) columns.set(table, (have = new Set((db.pragma(tableInfo(table)) as { name: string }[]).map((c) => c.name))))
      if (!have.has(column)) db.exec(addColumn(table, column, type))
    }
    db.prepare(META.init).run('epoch', randomUUID())
    const epoch = db.prepare(META.get).pluck().get('epoch') as string
    const inode = path === ':memory:' ? 0 : statSync(path).ino
    db.pragma('busy_timeout = 0')
    return { db, epoch, inode }
  } catch (e) {
    throw new StoreError(`cannot open SQLite store at ${path}: ${(e as Error).message}`, 'open', { cause: e })
  }
}
