/**
 * Starts the OpenTelemetry SDK for traces (contract §7): the gateway makes its SERVER and CLIENT
 * spans itself (./tracing.ts); the SDK provides the tracer, the W3C propagators, the
 * AsyncLocalStorage context and the export the standard `OTEL_*` variables describe (OTLP over
 * HTTP, `http/protobuf`, by default). Only `bootstrap.ts` and tests call this: a process that
 * never does pays nothing for tracing.
 */
import { NodeSDK, type NodeSDKConfiguration } from '@opentelemetry/sdk-node'
import { defaultResource, resourceFromAttributes } from '@opentelemetry/resources'
import { setTracing } from './tracing.js'
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
    instrumentations: [],
    ...overrides,
  })
  sdk.start()
  setTracing(true)
  return {
    shutdown: async () => {
      setTracing(false)
      await sdk.shutdown()
    },
  }
}
