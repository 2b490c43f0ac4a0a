/**
 * The key hash the attempt log, spans and logs carry for a record (contract §4): hex SHA-256 of
 * the record's scope (itself a hash, or "") and its idempotency key, never the key itself. The
 * one derivation: the store names a record by it in what it logs, and the gateway and the
 * operator tools take it through src/idempotency/record-key.ts.
 */
import { hash } from 'node:crypto'
import type { RecordKey } from './records.js'

/** 64 lower-case hex digits. */
export const keyHashOf = (key: RecordKey): string => hash('sha256', `${key.scope}\n${key.key}`, 'hex')
