/**
 * The SQLite store's rows of fg_meta_v1: the state markers (contract §3) — the epoch, the
 * `accepted` one, the loss note (`lossnote`) — and the file's write sequence (`seq`), which every
 * write transaction checks and advances (../state-loss/sequence.ts).
 */
import { statSync } from 'node:fs'
import { randomUUID } from 'node:crypto'
import type { Database as Db, Statement } from 'better-sqlite3'
import type { StateMarkers } from '../contract/store.js'
import type { WriteSequence } from '../state-loss/sequence.js'
import { decodeNote, encodeNote, type LossNote } from '../state-loss/note.js'
import { META } from './sql.js'

export class Meta {
  readonly #sequence: WriteSequence
  readonly #get: Statement
  readonly #put: Statement
  readonly #acceptLoss: () => string
  readonly #retire: (note: string) => void

  constructor(db: Db, sequence: WriteSequence) {
    this.#sequence = sequence
    this.#get = db.prepare(META.get).pluck()
    this.#put = db.prepare(META.put)
    this.#acceptLoss = db.transaction(() => {
      const epoch = (this.#get.get('epoch') as string | undefined) ?? randomUUID()
      this.#put.run('epoch', epoch)
      this.#put.run('accepted', epoch)
      db.prepare(META.del).run('lossnote')
      return epoch
    }).immediate
    this.#retire = db.transaction((note: string) => {
      this.#put.run('lossnote', note)
      this.#put.run('epoch', randomUUID())
    }).immediate
  }

  /**
   * The file's sequence, refused when below what this process saw.
   * @throws StoreWentBack
   */
  check(op: string): bigint {
    const current = BigInt((this.#get.get('seq') as string | undefined) ?? '0')
    const seen = this.#sequence.seen
    if (current < seen) throw this.#sequence.wentBack(op, `sequence ${current} after ${seen} was seen`, { signal: 'sequence', now: String(current), was: String(seen) })
    return current
  }

  /** Inside a write transaction: the sequence it writes. */
  advanceTo(seq: bigint): void {
    this.#put.run('seq', String(seq))
  }

  /**
   * The markers of the file at `path`; none when another file now has the path (a new inode):
   * this process still writes to the old one, which no new process will read.
   */
  read(path: string, inode: number): StateMarkers {
    if (path !== ':memory:') {
      let now: number | undefined
      try { now = statSync(path).ino } catch { /* deleted */ }
      if (now !== inode) return {}
    }
    const get = (name: string) => this.#get.get(name) as string | undefined
    return { epoch: get('epoch'), accepted: get('accepted'), note: decodeNote(get('lossnote')) }
  }

  /** The epoch accepted as it is and the note deleted, in one transaction; answers the epoch. */
  acceptLoss(): string {
    return this.#acceptLoss()
  }

  /** The note and a new epoch, in one transaction. */
  retire(note: LossNote): void {
    this.#retire(encodeNote(note))
  }
}
