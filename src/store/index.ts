/**
 * The store's one face: what the rest of the gateway may use of the layer that keeps state. Code
 * outside src/store/ imports from here only (test/unit/architecture.test.ts holds it to that).
 *
 *   contract/    the Store interface (contract/store.ts, where each promise is stated), the
 *                shapes it speaks in (fences, records), StoreError and StoreFull, the kind
 *   memory/ sqlite/ redis/ postgres/
 *                the engines, side by side; each passes test/store/conformance.ts
 *   runtime/     opening the engine the config names, a gateway's guarded store (every call
 *                timed and bounded by store.timeout, claims never used given back, a network
 *                store that is down at start connected later), `fencegate migrate`
 *   state-loss/  the write sequence, the loss note, the watch that notices a store gone back
 *   doctor/      the store's real settings against the guarantees, as findings
 *   attempt-log/ the attempt log's shapes and the SQL sqlite and postgres share
 *   shared/      what more than one engine runs: the record state machine, the registrations of
 *                serialize: store, decoding the server-side stores' replies, the closed check,
 *                the store's clock
 */

// the interface and the shapes it speaks in
export type { Store, StoreKind, StateMarkers, WriteRefusal, UnknownReason } from './contract/store.js'
export type { AdmitResult, FenceMark, FenceRequest, FenceResult, OlderWrites, Registration } from './contract/fences.js'
export type { ClaimRequest, ClaimResult, Completion, RecordKey, ReleaseResult, Resolution, ResolveResult, StoredResponse, UnknownRecord } from './contract/records.js'
export { StoreError, StoreFull, type StoreLimit } from './contract/errors.js'
export type { Lease, LeaseChange, LeaseGrant } from './contract/leases.js'
export { keyHashOf as recordKeyHash } from './contract/key-hash.js'

// the attempt log
export { emptyCounts, LEASE_ROUTE, type AuditCounts, type AuditEntry, type AuditLog, type TimelineFilter } from './attempt-log/types.js'

// opening: the engine the config names, a gateway's guarded store, the schema
export { openStore } from './runtime/open-engine.js'
export { openGuardedStore, type GuardedStore, type OpenGuardedOptions } from './runtime/open.js'
export { guardStore } from './runtime/guard.js'
export { migrateStore } from './runtime/migrate.js'
export { MemoryStore, type MemoryStoreOptions } from './memory/index.js'
export { SqliteStore, type SqliteStoreOptions } from './sqlite/index.js'
export { RedisStore, type RedisStoreOptions } from './redis/index.js'
export { PostgresStore, migratePostgres, type PostgresStoreOptions } from './postgres/index.js'

// store.tls as the clients take it
export { pgConnection, redisTls, storeTlsOptions, type RedisTls } from './shared/tls.js'

// a store gone back in time
export { StoreWentBack, WriteSequence, type LossSignal } from './state-loss/sequence.js'
export { describeNote, type LossNote } from './state-loss/note.js'
export { StateWatch } from './state-loss/watch.js'

// the doctor
export { inspectStore } from './doctor/inspect.js'
export { RiskRefused, type DoctorReport, type Finding, type FindingStatus } from './doctor/findings.js'
export { acceptedLossFinding, lossFinding } from './doctor/loss.js'
export { runningReport } from './memory/settings.js'
