/**
 * The shared services the tests run against, and how a test leaves them as it found them: every
 * test run uses its own Redis key prefix and PostgreSQL schema, dropped afterwards.
 */
import { Redis } from 'ioredis'
import pg from 'pg'

export const REDIS_URL = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379'
export const PG_URL = process.env.PG_URL ?? 'postgres://postgres@127.0.0.1:5432/test'

/** Deletes every key a RedisStore with `keyPrefix` wrote on the server at `url` (one server, not a cluster). */
export async function dropRedisPrefix(keyPrefix: string, url = REDIS_URL): Promise<void> {
  const r = new Redis(url)
  try {
    let cursor = '0'
    do {
      const [next, keys] = await r.scan(cursor, 'MATCH', `{fg:${keyPrefix}:*`, 'COUNT', 1000)
      cursor = next
      if (keys.length) await r.del(...keys)
    } while (cursor !== '0')
  } finally {
    r.disconnect()
  }
}

/** Drops the PostgreSQL schema `schema` with everything in it, if it exists. */
export async function dropPostgresSchema(schema: string, url = PG_URL): Promise<void> {
  const c = new pg.Client({ connectionString: url })
  await c.connect()
  try {
    await c.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`)
  } finally {
    await c.end()
  }
}
