/**
 * The key hash the attempt log, spans and logs carry for a record (contract §4): hex SHA-256 of
 * the record's scope (itself a hash, or "") and its idempotency key, never the key itself. The
 * same derivation as `keyHashOf` in src/idempotency/record-key.ts, which the gateway and the
 * operator tools use (test/unit/key-hash.test.ts holds the two equal); the store names a record
 * by it in what it logs.
 */
import { hash } from 'node:crypto'
import type { RecordKey } from './records.js'

/** 64 lower-case hex digits. */
export const keyHashOf = (key: RecordKey): string => hash('sha256', `${key.scope}\n${key.key}`, 'hex')
