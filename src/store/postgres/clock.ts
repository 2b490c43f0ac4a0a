/**
 * One reading of the PostgreSQL server's clock (`clock_timestamp()`) on a connection of its own,
 * for `fencegate doctor` when no running store has measured it (../doctor/clock.ts).
 */
import pg from 'pg'
import { pgConnection, storeTlsOptions } from '../shared/tls.js'
import type { Config } from '../../config/schema.js'
import { StoreClock, type ClockReading } from '../shared/clock.js'

/** @param connectTimeout ms @throws the driver's error when the server cannot be reached */
export async function readPostgresClock(config: Config['store'], connectTimeout: number): Promise<ClockReading> {
  const client = new pg.Client({ ...pgConnection(config.url!, storeTlsOptions(config)), connectionTimeoutMillis: connectTimeout, fallback_application_name: 'fencegate doctor' })
  client.on('error', () => {})
  await client.connect()
  try {
    return await new StoreClock(async () => Number((await client.query('SELECT (extract(epoch FROM clock_timestamp()) * 1000)::float8 AS ms')).rows[0].ms)).measure()
  } finally {
    await client.end().catch(() => {})
  }
}
