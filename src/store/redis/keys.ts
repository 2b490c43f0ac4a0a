/**
 * The Redis store's key names, and the Redis Cluster slot of a key.
 *
 * Key layout (every key is its own hash tag, so records and marks spread over a cluster's slots;
 * on a cluster every script but ADMIT touches one key):
 *   {fg:<prefix>:f:<resource>}               string: the high-water mark, decimal; never expires
 *   {fg:<prefix>:f:<resource>}s              string: "<mark> <epoch ms>", when the mark was first
 *                                            accepted (same hash tag, so same slot); never expires;
 *                                            read only while its mark still matches (a mark raised
 *                                            by a gateway older than it leaves it behind)
 *   {fg:<prefix>:f:<resource>}w              hash: `fencing.serialize: store`'s registrations of
 *                                            the resource, id → "<token> <deadline ms>" (same hash
 *                                            tag as the mark: REGISTER reads the mark and writes
 *                                            here in one script, on a cluster too); PEXPIRE = its
 *                                            latest deadline + 60 s, so a crashed replica's go
 *   {fg:<prefix>:f:<resource>}l              hash: the resource's lease (contract §3a, ./lua-leases.ts):
 *                                            the mark's hash tag, so a grant raises the mark in the
 *                                            same script, on a cluster too; never expires
 *   {fg:<prefix>:r:<route>:<scope>:<key>}    hash: one idempotency record; PEXPIRE = its ttl
 *   {fg:<prefix>:epoch}                      string: written once when the prefix is first used
 *   {fg:<prefix>:accepted}                   string: the epoch an operator accepted after a loss
 *   {fg:<prefix>:lossnote}                   string: what the gateway that retired the epoch saw
 *                                            (JSON, ../state-loss/note.ts); deleted by accept-loss
 *   {fg:<prefix>:seq}                        string: the write sequence (../state-loss/sequence.ts), advanced by
 *                                            every script but the attempt log's (one server only)
 *   {fg:<prefix>:audit}                      stream: the attempt log (one server)
 *   {fg:<prefix>:unsettled}                  sorted set: the index of unsettled records (one
 *                                            server, ./unknowns.ts): member = a record's key,
 *                                            score = its `exp`; kept by the scripts that change
 *                                            a record's state
 *   {fg:<prefix>:unsettled}n                 string: the writes made by scripts that keep the
 *                                            index, advanced with the write sequence (one server)
 *   {fg:<prefix>:unsettled}b                 string: sequence − n when the index was last built
 *                                            from a SCAN: the writes of gateways that keep no
 *                                            index counted so far (one server)
 * and on a cluster only:
 *   {fg:<prefix>:m:<n>}  × 256               string: the epoch again, one copy in each block of
 *                                            64 slots, so losing any master's data shows
 *   {fg:<prefix>:audit:<n>}  × 16            streams: the attempt log, one in each block of
 *                                            1024 slots, so it spreads over the masters
 *   {fg:<prefix>:q:<n>}  × 16384             string: the write sequence of one slot (the first n
 *                                            whose key hashes to it), advanced by every write
 *                                            script on that slot (./cluster-history.ts)
 * `%`, `{`, `}` and `:` inside the parts are percent-encoded, so no user value can end the hash
 * tag early or make two records share a key. These names are shared with older gateways on the
 * same Redis: they do not change.
 */
import type { RecordKey } from '../contract/store.js'

const KEY_SPECIAL = /[%{}:]/

/** Percent-encodes the characters that would end a hash tag or blur the parts of a key. */
export const part = (s: string): string =>
  KEY_SPECIAL.test(s) ? s.replace(/[%{}:]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`) : s // most parts have none: no copy

/** The inverse of `part`. */
export const unpart = (s: string): string => (s.includes('%') ? s.replace(/%([0-9A-F]{2})/g, (_, h: string) => String.fromCharCode(parseInt(h, 16))) : s)

// ------------------------------------------------------------------ cluster slots

/** Slots of a Redis Cluster. */
export const SLOTS = 16384

const CRC16_TABLE = (() => {
  const t = new Uint16Array(256)
  for (let i = 0; i < 256; i++) {
    let c = i << 8
    for (let j = 0; j < 8; j++) c = c & 0x8000 ? (c << 1) ^ 0x1021 : c << 1
    t[i] = c & 0xffff
  }
  return t
})()

/** The Redis Cluster slot of a key: CRC16 (XMODEM) of its hash tag (the part inside the first `{…}`, when not empty), mod 16384. */
export function keySlot(key: string): number {
  let s = key
  const open = key.indexOf('{')
  if (open >= 0) {
    const close = key.indexOf('}', open + 1)
    if (close > open + 1) s = key.slice(open + 1, close)
  }
  let crc = 0
  for (const b of Buffer.from(s)) crc = ((crc << 8) & 0xffff) ^ CRC16_TABLE[((crc >> 8) ^ b) & 0xff]
  return crc % SLOTS
}

/** Marker copies of the epoch on a cluster: one in each block of SLOTS / MARKERS slots. */
export const MARKERS = 256
/** Streams of the attempt log on a cluster: one in each block of SLOTS / AUDIT_STREAMS slots. */
export const AUDIT_STREAMS = 16

/**
 * Key names `{<base><n>}`, one per block of SLOTS / blocks consecutive slots, in block order:
 * the first n (from 0) whose slot falls in each block. Deterministic, so every gateway and the
 * CLI derive the same names.
 */
export function keysPerBlock(base: string, blocks: number): string[] {
  const size = SLOTS / blocks
  const out: (string | undefined)[] = new Array(blocks)
  let found = 0
  for (let n = 0; found < blocks; n++) {
    const k = `{${base}${n}}`
    const b = Math.floor(keySlot(k) / size)
    if (out[b] === undefined) { out[b] = k; found++ }
  }
  return out as string[]
}

// ------------------------------------------------------------------ one key prefix's names

/** Escapes a SCAN MATCH pattern's special characters. */
const glob = (s: string): string => s.replace(/[*?[\]\\]/g, (c) => `\\${c}`)

/** Every key name of one `keyPrefix` (see the layout above). */
export class KeyNames {
  /** `fg:<prefix>`, the start of every hash tag */
  readonly #base: string
  readonly epoch: string
  readonly accepted: string
  /** the loss note (../state-loss/note.ts) */
  readonly lossNote: string
  /** the write sequence (one server) */
  readonly seq: string
  /** cluster: the epoch's copies, one per block of slots; one server: none */
  readonly markers: string[]
  /** cluster: the sequence key of each slot, by slot (`buildSlotSeqs`) */
  #slotSeqs?: string[]
  /** the attempt log's streams: one, or one per block of slots on a cluster */
  readonly audit: string[]
  /** one server: the index of unsettled records, its write count and its build mark (see the layout); a cluster keeps none */
  readonly unsettled?: { index: string; writes: string; built: string }

  constructor(keyPrefix: string, cluster: boolean) {
    this.#base = `fg:${part(keyPrefix)}`
    this.epoch = this.#key('epoch')
    this.accepted = this.#key('accepted')
    this.lossNote = this.#key('lossnote')
    this.seq = this.#key('seq')
    this.markers = cluster ? keysPerBlock(`${this.#base}:m:`, MARKERS) : []
    this.audit = cluster ? keysPerBlock(`${this.#base}:audit:`, AUDIT_STREAMS) : [this.#key('audit')]
    if (!cluster) {
      const index = this.#key('unsettled')
      this.unsettled = { index, writes: `${index}n`, built: `${index}b` }
    }
  }

  #key(...parts: string[]): string {
    return `{${this.#base}:${parts.map(part).join(':')}}`
  }

  /**
   * Cluster: builds the write sequence key of every slot (16384 names found by hashing, about
   * 0.1 s): RedisStore.open calls it, so that the first write does not stall the event loop.
   */
  buildSlotSeqs(): void {
    this.#slotSeqs ??= keysPerBlock(`${this.#base}:q:`, SLOTS)
  }

  /** Cluster: the write sequence key that hashes to `slot`. */
  slotSeq(slot: number): string {
    this.buildSlotSeqs()
    return this.#slotSeqs![slot]
  }

  /** The resource's high-water mark. */
  mark(resource: string): string {
    return this.#key('f', resource)
  }

  /** The mark's key and its since key (one hash tag: one slot). */
  fence(resource: string): [mark: string, since: string] {
    const k = this.mark(resource)
    return [k, `${k}s`]
  }

  /** The hash of `resource`'s registrations: the mark's hash tag, so one slot with it. */
  registrations(resource: string): string {
    return `${this.mark(resource)}w`
  }

  /** The keys of the resource's lease scripts: the mark, its since key, the lease (one hash tag: one slot). */
  lease(resource: string): [mark: string, since: string, lease: string] {
    const [mark, since] = this.fence(resource)
    return [mark, since, `${mark}l`]
  }

  /** One idempotency record. */
  record(k: RecordKey): string {
    return this.#key('r', k.route, k.scope, k.key)
  }

  /**
   * The keys CLAIM, FINISH, RELEASE and RESOLVE take: the record's, then on one server the index
   * of unsettled records' (on a cluster the index cannot share the record's slot: none).
   */
  recordKeys(k: RecordKey): string[] {
    const r = this.record(k)
    return this.unsettled ? [r, this.unsettled.index] : [r]
  }

  /** A SCAN (or ZSCAN) MATCH pattern for every record key, or only `route`'s. */
  records(route?: string): string {
    return `${glob(`{${this.#base}:r:`)}${route !== undefined ? `${glob(part(route))}:` : ''}*`
  }

  /** The record key a record's name (as SCAN found it) stands for. */
  recordOf(name: string): RecordKey {
    const [route, scope, key] = name.slice(`{${this.#base}:r:`.length, -1).split(':').map(unpart)
    return { route, scope, key }
  }
}
