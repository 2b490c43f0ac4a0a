/** `fencegate migrate`: the schema of the configured store, created or brought up to date. */
import type { Config } from '../../config/schema.js'
import { migratePostgres } from '../postgres/index.js'
import { openStore } from './open-engine.js'
import { storeTlsOptions } from '../shared/tls.js'

/**
 * `fencegate migrate`: creates or updates the store's schema (postgres); the other stores
 * create theirs when opened, so for them it only checks that the store opens.
 * @returns a line saying what was done
 * @throws StoreError when the store cannot be reached
 */
export async function migrateStore(config: Config['store']): Promise<string> {
  if (config.kind === 'postgres') {
    const { schema, epoch } = await migratePostgres({ url: config.url!, schema: config.schema, connectTimeoutMs: Math.max(config.timeout, 5000), tls: storeTlsOptions(config) })
    return `postgres schema ${schema} is up to date (epoch ${epoch})`
  }
  const store = await openStore(config)
  await store.close()
  return `${config.kind} store needs no migration (its layout is created when opened)`
}
