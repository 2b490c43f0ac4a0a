/**
 * Loaded before the rest of the gateway: by the CLI as its first step, or with
 * `node --import fencegate/dist/src/telemetry/bootstrap.js` in front of a program that embeds it.
 * When the environment asks for traces (see `tracingRequested`) it starts the SDK; otherwise it
 * loads nothing.
 */
import { tracingRequested } from './tracing.js'
import type { Tracing } from './sdk.js'

export let tracing: Tracing | undefined

if (tracingRequested()) {
  const { startTracing } = await import('./sdk.js')
  tracing = startTracing()
}
