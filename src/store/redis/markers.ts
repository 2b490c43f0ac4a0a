/**
 * The state markers in Redis (contract §3): the prefix's epoch, the epoch an operator accepted,
 * and on a cluster a copy of the epoch in every block of slots (./keys.ts), so that a master that
 * came back empty, or a replica promoted without the data, shows as a loss.
 */
import { randomUUID } from 'node:crypto'
import type { StateMarkers } from '../types.js'
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
    const [epoch, accepted] = await r.mget(keys.epoch, keys.accepted)
    return { epoch: epoch ?? undefined, accepted: accepted ?? undefined }
  }
  const [epoch, accepted, ...copies] = await Promise.all([keys.epoch, keys.accepted, ...keys.markers].map((k) => r.get(k)))
  const whole = epoch !== null && copies.every((c) => c === epoch)
  return { epoch: whole ? epoch : undefined, accepted: accepted ?? undefined }
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
  await r.set(keys.accepted, epoch)
  return epoch
}

/** Writes a new epoch: every gateway sharing the store sees the loss (../state-loss.ts). */
export async function retireEpoch(r: Conn, keys: KeyNames): Promise<void> {
  await r.set(keys.epoch, randomUUID())
}
