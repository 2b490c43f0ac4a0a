/**
 * The state markers in PostgreSQL (fg_meta_v1): the epoch written when the schema was first
 * created, reading the markers, accept-loss, retiring the epoch with its loss note (../state-loss/note.ts); and the server's current
 * timeline, which ./sequence.ts follows (a new one without store.replicas is reported).
 */
import type pg from 'pg'
import { randomUUID } from 'node:crypto'
import type { StateMarkers } from '../contract/store.js'
import { currentTimelineSql, type Timeline } from './sequence.js'
import type { Queries } from './queries.js'
import { decodeNote, encodeNote, type LossNote } from '../state-loss/note.js'

/** The server's current timeline; rejects on a standby (no WAL of its own). */
export async function readTimeline(pool: pg.Pool): Promise<string> {
  const { rows } = await pool.query<{ tl: string }>(currentTimelineSql)
  return rows[0].tl
}

/** The epoch written when the schema was first created ('' when none). */
export async function readEpoch(pool: pg.Pool, q: Queries): Promise<string> {
  const { rows } = await pool.query(q.epochRead)
  return rows[0]?.value ?? ''
}

/** The markers, after the timeline is looked at (StoreWentBack on a new one without store.replicas). */
export async function readMarkers(pool: pg.Pool, q: Queries, timeline: Timeline): Promise<StateMarkers> {
  timeline.observe(await readTimeline(pool), 'markers')
  const { rows } = await pool.query(q.markers)
  const get = (n: string) => rows.find((r) => r.name === n)?.value as string | undefined
  return { epoch: get('epoch'), accepted: get('accepted'), note: decodeNote(get('lossnote')) }
}

/** A new epoch when none is there, accepted, and the loss note deleted: the loss is taken as known. */
export async function acceptLoss(pool: pg.Pool, q: Queries): Promise<string> {
  await pool.query(q.epochWrite, [randomUUID()])
  const { rows } = await pool.query(q.epochRead)
  const epoch = rows[0].value as string
  await pool.query(q.acceptEpoch, [epoch])
  return epoch
}

/** The loss note and a new epoch, not accepted: every gateway sharing the store sees the loss. */
export async function retireEpoch(pool: pg.Pool, q: Queries, note: LossNote): Promise<void> {
  await pool.query(q.retireEpoch, [randomUUID(), encodeNote(note)])
}
