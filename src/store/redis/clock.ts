/**
 * One reading of the Redis server's clock (`TIME`) on a connection of its own — a cluster's first
 * seed node — for `fencegate doctor` when no running store has measured it (../doctor/clock.ts).
 */
import { Redis } from 'ioredis'
import type { Config } from '../../config/schema.js'
import { StoreClock, type ClockReading } from '../shared/clock.js'
import { redisTls, storeTlsOptions } from '../shared/tls.js'

/** @param connectTimeout ms @throws the client's error when the server cannot be reached */
export async function readRedisClock(config: Config['store'], connectTimeout: number): Promise<ClockReading> {
  const conn = new Redis(config.url!.split(',')[0].trim(), { lazyConnect: true, enableOfflineQueue: false, maxRetriesPerRequest: 0, connectTimeout, retryStrategy: () => null, ...redisTls(config.url, storeTlsOptions(config), { sentinels: false }) })
  conn.on('error', () => {})
  try {
    await conn.connect()
    return await new StoreClock(async () => { const [s, us] = await conn.time(); return Number(s) * 1000 + Math.floor(Number(us) / 1000) }).measure()
  } finally {
    conn.disconnect()
  }
}
