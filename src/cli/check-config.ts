/**
 * `fencegate check-config`: the config validated (the parser has done that by the time this
 * runs), and with --connect the store opened the way start-up opens it.
 */
import type { Config } from '../config/schema.js'
import { openStore } from '../store/index.js'
import type { Values } from './commands.js'
import { Exit } from './exit.js'
import { configWarnings, formatWarning } from '../config/warnings.js'

/** `check-config --connect`: opens the store as start-up does, asks it for its markers, closes it. */
async function connectCheck(config: Config): Promise<{ store: string; epoch?: string }> {
  let store
  try {
    store = await openStore(config.store, config.audit)
  } catch (e) {
    throw new Exit(1, 'runtime', [`store: the ${config.store.kind} store cannot be opened: ${(e as Error).message}`])
  }
  try {
    await store.ping()
    const { epoch } = await store.markers()
    return { store: config.store.kind, epoch }
  } catch (e) {
    throw new Exit(1, 'runtime', [`store: the ${config.store.kind} store opened but does not answer: ${(e as Error).message}`])
  } finally {
    await store.close().catch(() => {})
  }
}

/**
 * Prints that `file` is valid: its number of routes, and whether the store answers (--connect);
 * its warnings (src/config/warnings.ts) on stderr, one line each, without changing the exit code.
 * @throws Exit 1 (runtime) when --connect finds the store cannot be opened or does not answer
 */
export async function checkConfig(config: Config, file: string, values: Values): Promise<void> {
  const connected = values.connect ? await connectCheck(config) : undefined
  const routes = config.routes.length
  const warnings = configWarnings(config)
  for (const w of warnings) process.stderr.write(`${formatWarning(file, w)}\n`)
  if (values.json) process.stdout.write(`${JSON.stringify({ file, ok: true, routes, ...(warnings.length ? { warnings } : {}), ...(connected ? { store: { kind: connected.store, reachable: true, epoch: connected.epoch } } : {}) })}\n`)
  else process.stdout.write(`${file}: ok (${routes} route${routes === 1 ? '' : 's'}${connected ? `; the ${connected.store} store answers` : ''})\n`)
}
