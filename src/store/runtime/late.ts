/**
 * A shared store (redis, postgres) that does not answer at start-up is not a config mistake
 * (contract §2): a Redis restarting or a PostgreSQL failing over must not keep the gateway from
 * starting, nor make an orchestrator restart it in a loop. `openForGateway` starts the gateway
 * with a stand-in store that refuses every call with StoreError — so routes with fencing or
 * idempotency answer 503 `store-unavailable` (fail closed), `/readyz` answers 503 and plain routes
 * serve — while it tries to open the real store again, with backoff, logging each attempt. Once
 * the store opens, every call goes to it.
 *
 * The memory and sqlite stores live in the process or on a local path: when they cannot be
 * opened the path is wrong, which is a config mistake, and `openForGateway` throws.
 */
import type { Config } from '../../config/schema.js'
import type { Logger } from '../../log.js'
import { openStore } from './open-engine.js'
import { StoreError, type Store } from '../contract/store.js'
import { WriteSequence } from '../state-loss/sequence.js'

export interface LateOptions {
  /** first pause between attempts, ms (default 250); doubled after each failure */
  minDelayMs?: number
  /** longest pause between attempts, ms (default 5000) */
  maxDelayMs?: number
  /** the write sequence `open` gives the store; answered as the stand-in's own */
  sequence?: WriteSequence
}

/** The store behind `openForGateway`; `connected` resolves once the real store has opened. */
export interface OpenedStore {
  store: Store
  connected: Promise<void>
}

/**
 * Opens the configured store for a gateway process.
 * @throws StoreError when a memory or sqlite store cannot be opened (a config mistake)
 */
export async function openForGateway(config: Config, log: Logger, options: LateOptions = {}): Promise<OpenedStore> {
  // one write sequence across the attempts, so the state watch can follow it from the start
  const sequence = new WriteSequence()
  const open = () => openStore(config.store, config.audit, sequence)
  if (config.store.kind === 'memory' || config.store.kind === 'sqlite') return { store: await open(), connected: Promise.resolve() }
  try {
    return { store: await open(), connected: Promise.resolve() }
  } catch (e) {
    return lateStore(config.store.kind, open, log, e as Error, { ...options, sequence })
  }
}

/**
 * A stand-in for a store not reachable yet: every call rejects with StoreError until `open`
 * succeeds, then every call is the real store's. `close()` stops the attempts (and closes the
 * store when it had opened).
 */
export function lateStore(kind: Store['kind'], open: () => Promise<Store>, log: Logger, first: Error, options: LateOptions = {}): OpenedStore {
  const { minDelayMs = 250, maxDelayMs = 5000 } = options
  let inner: Store | undefined
  let closed = false
  let timer: NodeJS.Timeout | undefined
  let lastError = first.message
  let attempts = 1
  let onConnected!: () => void
  const connected = new Promise<void>((r) => { onConnected = r })
  const notYet = (op: string) => Promise.reject(new StoreError(`the ${kind} store has not answered since start-up (${lastError}); still trying to connect`, op, { unsent: true }))

  const retry = () => {
    const delay = Math.round(Math.min(maxDelayMs, minDelayMs * 2 ** (attempts - 1)) * (0.8 + Math.random() * 0.4))
    log.warn('store unreachable; the gateway serves without it (routes with fencing or idempotency answer 503) and keeps trying', { store: kind, attempt: attempts, retryInMs: delay, error: lastError })
    timer = setTimeout(attempt, delay)
    timer.unref()
  }
  const attempt = async () => {
    if (closed) return
    attempts++
    try {
      const s = await open()
      if (closed) { await s.close().catch(() => {}); return }
      inner = s
      log.info('store connected', { store: kind, attempts })
      onConnected()
    } catch (e) {
      lastError = (e as Error).message
      if (!closed) retry()
    }
  }
  retry()

  // forwards every call to the real store once it is there; unknown members too, so the
  // stand-in keeps up with the Store interface
  const forward = (target: () => object | undefined) => (prop: string | symbol): unknown => {
    if (typeof prop === 'symbol' || prop === 'then') return undefined
    const t = target() as Record<string, unknown> | undefined
    if (t) {
      const v = t[prop]
      return typeof v === 'function' ? v.bind(t) : v
    }
    return (..._args: unknown[]) => notYet(prop)
  }
  const audit = new Proxy({}, { get: (_t, prop) => forward(() => inner?.audit)(prop) })
  const member = forward(() => inner)
  const store = new Proxy({}, {
    get(_t, prop) {
      if (prop === 'kind') return kind
      if (prop === 'inProcess') return false
      if (prop === 'sequence') return options.sequence ?? inner?.sequence
      if (prop === 'clock') return inner?.clock
      // optional and synchronous: a stand-in has nothing to watch (only the in-process memory
      // store evicts, and it is never opened late), so it must not answer with a rejection
      if (prop === 'watchEvictions') return inner?.watchEvictions?.bind(inner)
      if (prop === 'writeRefused') return () => inner?.writeRefused?.()
      if (prop === 'replicaShortfalls') return () => inner?.replicaShortfalls?.() ?? []
      if (prop === 'audit') return audit
      if (prop === 'close') {
        return async () => {
          closed = true
          if (timer) clearTimeout(timer)
          await inner?.close()
        }
      }
      return member(prop)
    },
  }) as Store
  return { store, connected }
}
