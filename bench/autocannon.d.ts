/**
 * The part of autocannon's programmatic API (v9) the harness uses. autocannon ships no types
 * and @types/autocannon lags behind v9, so this small declaration stands in for both.
 */
declare module 'autocannon' {
  namespace autocannon {
    interface RequestParams {
      method?: string
      path?: string
      headers?: Record<string, string>
      body?: string | Buffer
    }

    interface Request extends RequestParams {
      /** called before each request is built; returns the request to send (falsy restarts the list) */
      setupRequest?: (req: RequestParams, context: Record<string, unknown>) => RequestParams | undefined | null | false
      onResponse?: (status: number, body: string, context: Record<string, unknown>, headers: Record<string, string | string[]>) => void
    }

    /** One connection's client (see autocannon's "Client API"). */
    interface Client {
      setHeaders(headers: Record<string, string> | undefined): void
      setBody(body: string | Buffer | undefined): void
      setRequests(requests: Request[]): void
      on(event: string, listener: (...args: unknown[]) => void): this
    }

    interface Options extends RequestParams {
      url: string
      connections?: number
      duration?: number
      amount?: number
      pipelining?: number
      timeout?: number
      workers?: number
      bailout?: number
      title?: string
      expectBody?: string
      requests?: Request[]
      setupClient?: (client: Client) => void
      warmup?: { connections?: number; duration?: number }
    }

    interface Histogram {
      average: number
      mean: number
      stddev: number
      min: number
      max: number
      total: number
      p0_001: number
      p0_01: number
      p0_1: number
      p1: number
      p2_5: number
      p10: number
      p25: number
      p50: number
      p75: number
      p90: number
      p97_5: number
      p99: number
      p99_9: number
      p99_99: number
      p99_999: number
      sent?: number
    }

    interface Result {
      title?: string
      url: string
      connections: number
      pipelining: number
      duration: number
      start: Date
      finish: Date
      latency: Histogram
      requests: Histogram
      throughput: Histogram
      errors: number
      timeouts: number
      mismatches: number
      non2xx: number
      resets: number
      '1xx': number
      '2xx': number
      '3xx': number
      '4xx': number
      '5xx': number
      statusCodeStats: Record<string, { count: number }>
      warmup?: Result
    }

    interface Instance extends PromiseLike<Result> {
      on(event: 'done', listener: (result: Result) => void): this
      on(event: 'error', listener: (err: Error) => void): this
      on(event: string, listener: (...args: unknown[]) => void): this
    }
  }

  function autocannon(opts: autocannon.Options): autocannon.Instance
  function autocannon(opts: autocannon.Options, cb: (err: Error | null, result: autocannon.Result) => void): autocannon.Instance

  export = autocannon
}
