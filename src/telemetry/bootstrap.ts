/**
 * Loaded before the rest of the gateway: by the CLI as its first step, or with
 * `node --import fencegate/dist/src/telemetry/bootstrap.js` in front of a program that embeds it.
 * When the environment asks for traces (see `tracingRequested`), it registers the ESM loader
 * hook of `@opentelemetry/instrumentation` — so modules imported from here on, `node:http`
 * included, can be instrumented — and starts the SDK. Otherwise it loads nothing.
 */
import { register } from 'node:module'
import { tracingRequested } from './tracing.js'
import type { Tracing } from './sdk.js'

export let tracing: Tracing | undefined

if (tracingRequested()) {
  register('@opentelemetry/instrumentation/hook.mjs', import.meta.url)
  const { startTracing } = await import('./sdk.js')
  tracing = startTracing()
}
