/**
 * The SQL the migration (./migrate.ts) applies, as the list it sends: the tables (./schema.ts),
 * then the functions this version calls (./functions.ts) and those kept for older gateways
 * (./legacy-functions.ts), interleaved in the order they were released, so that moving a function
 * between those files changes nothing the database receives and a new one is added at the end.
 * The tables come first: plpgsql resolves a `table%ROWTYPE` when CREATE FUNCTION checks the body
 * (a call of another function is resolved only when it runs). The statements the store sends are
 * in ./queries.ts.
 */
import * as legacy from './legacy-functions.js'
import * as live from './functions.js'
import { registrationsTable, tables } from './schema.js'
import { leaseManyV1, leasesV1 } from './lease-functions.js'

/** One piece of a migration statement, for the (validated, quoted) schema `s`. */
type Piece = (s: string) => string

const SCHEMA: Piece[] = [
  tables,
  live.resolveV1, live.nowMsV1, live.fenceV2, legacy.fenceV1, live.claimV1, live.claimV2,
  legacy.fenceManyV1, legacy.claimManyV1, legacy.admitManyV1, live.fenceManyV2, legacy.admitManyV2,
  legacy.claimManyV2, legacy.admitManyV3, live.releaseV1, legacy.settleManyV3, legacy.settleManyV2, legacy.settleManyV1,
  live.claimV3, live.claimManyV3, live.admitManyV4, live.settleManyV4, live.takeProbeV1, live.settleUnknownV1,
  leasesV1, leaseManyV1,
]

const REGISTRATIONS: Piece[] = [
  registrationsTable,
  legacy.registerManyV1, live.registerManyV2, live.unregisterManyV2, legacy.unregisterManyV1,
]

/** The pieces as one statement text (one query: the migration's transaction runs it whole). */
const statement = (pieces: Piece[], s: string): string => `\n${pieces.map((piece) => piece(s)).join('\n')}`

/** The schema as SQL, every name qualified with the (validated, quoted) schema. */
export function schemaSql(s: string): string {
  return statement(SCHEMA, s)
}

/** `fencing.serialize: store` (src/fencing/window.ts): the registered writes, and their batches. */
export function registrationsSchemaSql(s: string): string {
  return statement(REGISTRATIONS, s)
}

/** Statements of the migration (./migrate.ts), around schemaSql and registrationsSchemaSql. */
export const migrateSql = {
  /** serialises replicas migrating at once, until the transaction ends */
  lock: "SELECT pg_advisory_xact_lock(hashtext('fencegate migrate'))",
  /** $1: the schema's bare name */
  schemaExists: 'SELECT 1 FROM pg_namespace WHERE nspname = $1',
  createSchema: (s: string): string => `CREATE SCHEMA ${s}`,
}
