/**
 * Admission's part in `idempotency.settle` (contract §4a): the claim of a settle route carries
 * the filled probe request, and a retry whose claim finds the key's outcome unknown asks the
 * resource at once (bounded by `upstream.timeout`) before `unknownOutcome` decides. Its probe is
 * the store's next one (`takeProbe`): taken only when due — once `after` has passed since the
 * outcome became unknown, and not while another gateway's probe of the key holds its lease.
 *
 * With `unknownOutcome: retry` the claims of a settle route first do not take unknown outcomes
 * over (`retryUnknown` false), so the probe has its chance before a second attempt is sent; the
 * claim after the probe takes it over when it is still unknown.
 */
import type { Exchange } from '../exchange.js'
import type { CompiledRoute, RouteContext } from '../route.js'
import type { RecordKey, Store } from '../store/index.js'
import type { Logger } from '../log.js'
import type { RouteProber } from '../idempotency/settle/prober.js'
import { probeFiller, type ProbeFiller } from '../idempotency/settle/request.js'
import { requestTemplateSource } from '../template-fill.js'

export class ClaimSettle {
  readonly #fill: ProbeFiller
  readonly #prober: RouteProber
  readonly #store: Store
  readonly #log: Logger
  readonly #route: CompiledRoute

  constructor(context: RouteContext) {
    this.#route = context.route
    this.#prober = context.prober!
    this.#store = context.store
    this.#log = context.log
    this.#fill = probeFiller(this.#prober.settle, context.route.config.match.path)
  }

  /** The filled probe request for the claim of `x` with `key` (undefined: a template the request cannot fill). */
  probeOf(x: Exchange, key: RecordKey): string | undefined {
    return this.#fill(requestTemplateSource(x), key.key, x.facts.requestId)
  }

  /**
   * The claim found `key`'s outcome unknown: sends its next probe when one is due and settles the
   * record by the answer. Never throws: a store that cannot answer leaves it to the claim after.
   * @returns whether a probe was sent
   */
  async probeNow(key: RecordKey): Promise<boolean> {
    try {
      const found = await this.#store.unknownRecord(key, Date.now())
      if (found?.probe === undefined) return false
      const r = await this.#prober.probe(key, found.probes ?? 0)
      return r.kind === 'probed'
    } catch (e) {
      this.#log.warn('the probe of a retried unknown outcome was not taken or not settled: the store did not answer', { route: this.#route.name, error: (e as Error).message })
      return false
    }
  }
}
