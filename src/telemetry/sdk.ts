/**
 * Starts the OpenTelemetry SDK for traces (contract §7): a SERVER span per request from
 * `@opentelemetry/instrumentation-http`, a CLIENT span per upstream call from
 * `@opentelemetry/instrumentation-undici`, exported as the standard `OTEL_*` variables say
 * (OTLP over HTTP, `http/protobuf`, by default). Only `bootstrap.ts` and tests call this: a
 * process that never does pays nothing for tracing.
 */
import { createRequire } from 'node:module'
import { propagation } from '@opentelemetry/api'
import { NodeSDK, type NodeSDKConfiguration } from '@opentelemetry/sdk-node'
import { HttpInstrumentation } from '@opentelemetry/instrumentation-http'
import { UndiciInstrumentation } from '@opentelemetry/instrumentation-undici'
import { defaultResource, resourceFromAttributes } from '@opentelemetry/resources'
import { isUntracedRequest, setReplacedTraceFields } from './tracing.js'
import { VERSION } from '../version.js'

export interface Tracing {
  /** flushes the spans still buffered and stops exporting */
  shutdown(): Promise<void>
}

/**
 * Starts the SDK. `overrides` replace parts of the configuration (tests pass
 * `spanProcessors` with an in-memory exporter); everything else comes from `OTEL_*`.
 */
export function startTracing(overrides: Partial<NodeSDKConfiguration> = {}): Tracing {
  const named = Boolean(process.env.OTEL_SERVICE_NAME) || /(^|,)\s*service\.name\s*=/.test(process.env.OTEL_RESOURCE_ATTRIBUTES ?? '')
  const sdk = new NodeSDK({
    serviceName: named ? undefined : 'fencegate',
    resource: defaultResource().merge(resourceFromAttributes({ 'service.version': VERSION })),
    // metrics are Prometheus's (admin /metrics); logs are the JSON lines on stderr
    metricReaders: [],
    logRecordProcessors: [],
    instrumentations: [
      new HttpInstrumentation({
        // probes and scrapes on the admin listener are not traffic
        ignoreIncomingRequestHook: (req) => isUntracedRequest(req),
        // the gateway's own outgoing calls go through undici
        disableOutgoingRequestInstrumentation: true,
      }),
      new UndiciInstrumentation(),
    ],
    ...overrides,
  })
  sdk.start()
  // The HTTP instrumentation patches http.Server.prototype when `http` is required after it is
  // enabled. A static ESM import graph links node:http before the bootstrap's code runs, so the
  // loader hook alone may come too late: requiring it here applies the patch either way.
  createRequire(import.meta.url)('node:http')
  setReplacedTraceFields(propagation.fields())
  return {
    shutdown: async () => {
      setReplacedTraceFields([])
      await sdk.shutdown()
    },
  }
}
