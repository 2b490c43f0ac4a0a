/**
 * The state markers in Redis (contract §3): the prefix's epoch, the epoch an operator accepted,
 * the loss note of the gateway that retired the epoch (../state-loss/note.ts), and on a cluster a copy of the epoch in every block of slots (./keys.ts), so that a master that
 * came back empty, or a replica promoted without the data, shows as a loss.
 */
import { randomUUID } from 'node:crypto'
import type { Cluster, Redis } from 'ioredis'
import type { StateMarkers } from '../contract/store.js'
import { decodeNote, encodeNote, type LossNote } from '../state-loss/note.js'
import type { Conn } from './connection.js'
import type { KeyNames } from './keys.js'

/**
 * Writes the prefix's epoch when it is new (on a cluster also its copies, when none is there yet).
 * @returns the epoch
 */
export async function initEpoch(r: Conn, keys: KeyNames, cluster: boolean): Promise<string> {
  await r.set(keys.epoch, randomUUID(), 'NX')
  const epoch = (await r.get(keys.epoch)) ?? ''
  if (cluster) {
    const copies = await Promise.all(keys.markers.map((k) => r.get(k)))
    // a new prefix: copy the epoch into every block; copies already there (all, or only
    // some: a master lost its data) are left for readMarkers to report
    if (copies.every((c) => c === null)) await Promise.all(keys.markers.map((k) => r.set(k, epoch, 'NX')))
  }
  return epoch
}

/**
 * One server: the epoch key. Cluster: the epoch key and its 256 copies, read from every master
 * that holds one; unless all are present and equal the epoch reads as missing (lost).
 */
export async function readMarkers(r: Conn, keys: KeyNames, cluster: boolean): Promise<StateMarkers> {
  if (!cluster) {
    const [epoch, accepted, note] = await r.mget(keys.epoch, keys.accepted, keys.lossNote)
    return { epoch: epoch ?? undefined, accepted: accepted ?? undefined, note: decodeNote(note) }
  }
  const [epoch, accepted, note, ...copies] = await Promise.all([keys.epoch, keys.accepted, keys.lossNote, ...keys.markers].map((k) => r.get(k)))
  const whole = epoch !== null && copies.every((c) => c === epoch)
  return { epoch: whole ? epoch : undefined, accepted: accepted ?? undefined, note: decodeNote(note) }
}

/**
 * One server: writes a new epoch when none is left. Cluster: keeps the epoch when it and every
 * copy are intact, else writes a new one to the epoch key and every copy. Then marks it accepted.
 * @returns the accepted epoch
 */
export async function acceptLoss(r: Conn, keys: KeyNames, cluster: boolean): Promise<string> {
  let epoch: string
  if (!cluster) {
    await r.set(keys.epoch, randomUUID(), 'NX')
    epoch = (await r.get(keys.epoch))!
  } else {
    const [current, ...copies] = await Promise.all([keys.epoch, ...keys.markers].map((k) => r.get(k)))
    if (current !== null && copies.every((c) => c === current)) {
      epoch = current
    } else {
      epoch = randomUUID()
      await Promise.all([keys.epoch, ...keys.markers].map((k) => r.set(k, epoch)))
    }
  }
  // the note first: a gateway reading in between still sees the loss, not yet accepted
  await r.del(keys.lossNote)
  await r.set(keys.accepted, epoch)
  return epoch
}

/**
 * Writes the loss note, then a new epoch (a cluster's copies are left as they are: the epoch then
 * reads as lost there too): every gateway sharing the store sees the loss (../state-loss/watch.ts), and
 * whoever sees the new epoch finds the note.
 */
export async function retireEpoch(r: Conn, keys: KeyNames, note: LossNote): Promise<void> {
  if (r.isCluster) {
    // two slots: no transaction spans them; the note first, so the epoch never changes without it
    await r.set(keys.lossNote, encodeNote(note))
    await r.set(keys.epoch, randomUUID())
    return
  }
  // one server: both or neither, so a gateway killed in between cannot leave a note that every
  // other gateway ignores (their epoch still the accepted one)
  const replies = await r.multi().set(keys.lossNote, encodeNote(note)).set(keys.epoch, randomUUID()).exec()
  const failed = replies?.find(([e]) => e)?.[0]
  if (replies === null || failed) throw failed ?? new Error('the loss note\'s transaction was discarded')
}

/** The loss note alone, for `fencegate doctor` on a connection of its own. */
export async function readNote(r: Redis | Cluster, keys: KeyNames): Promise<LossNote | undefined> {
  return decodeNote(await r.get(keys.lossNote))
}
