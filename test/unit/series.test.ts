// Series counted directly give the exposition prom-client's own children give, in both formats.
import { describe, expect, test } from 'vitest'
import { Counter, Histogram, Registry, type RegistryContentType } from 'prom-client'
import { counterSeries, histogramSeries } from '../../src/telemetry/series.js'

function pair() {
  const make = () => {
    const registry = new Registry<RegistryContentType>()
    const h = new Histogram({ name: 'd_seconds', help: 'd', labelNames: ['route', 'outcome'], buckets: [0.001, 0.01, 0.1, 1], registers: [registry] })
    const c = new Counter({ name: 'r_total', help: 'r', labelNames: ['route', 'code'], registers: [registry] })
    return { registry, h, c }
  }
  return { theirs: make(), ours: make() }
}
const values = [0.0005, 0.001, 0.002, 0.05, 0.5, 1, 3, 0]

describe('series', () => {
  test('histogram and counter series expose what prom-client children expose', async () => {
    const { theirs, ours } = pair()
    const [th, tc] = [theirs.h.labels('payments', 'forwarded'), theirs.c.labels('payments', '201')]
    const [oh, oc] = [histogramSeries(ours.h, 'payments', 'forwarded'), counterSeries(ours.c, 'payments', '201')]
    for (const v of values) { th.observe(v); tc.inc(); oh.observe(v); oc.inc() }
    theirs.h.labels('other', 'replayed').observe(0.2)
    histogramSeries(ours.h, 'other', 'replayed').observe(0.2)
    expect(await ours.registry.metrics()).toBe(await theirs.registry.metrics())
    expect(await ours.registry.metrics()).toContain('d_seconds_bucket{le="0.01",route="payments",outcome="forwarded"} 4')
    expect(await ours.registry.metrics()).toContain('r_total{route="payments",code="201"} 8')
    ours.registry.setContentType(Registry.OPENMETRICS_CONTENT_TYPE)
    theirs.registry.setContentType(Registry.OPENMETRICS_CONTENT_TYPE)
    expect(await ours.registry.metrics()).toBe(await theirs.registry.metrics())
  })

  test('a series made before its label set was zeroed starts it at 0, and one of a zeroed set keeps counting it', async () => {
    const { ours } = pair()
    ours.h.zero({ route: 'payments', outcome: 'forwarded' })
    const s = histogramSeries(ours.h, 'payments', 'forwarded')
    s.observe(0.05)
    expect(await ours.registry.metrics()).toContain('d_seconds_count{route="payments",outcome="forwarded"} 1')
    expect((await ours.registry.metrics()).match(/d_seconds_count\{route="payments"/g)).toHaveLength(1)
  })

  test('after reset() a series counts again from 0', async () => {
    const { ours } = pair()
    const h = histogramSeries(ours.h, 'payments', 'forwarded')
    const c = counterSeries(ours.c, 'payments', '201')
    h.observe(0.05); c.inc()
    ours.h.reset(); ours.c.reset()
    h.observe(0.05); c.inc(); c.inc()
    const text = await ours.registry.metrics()
    expect(text).toContain('d_seconds_count{route="payments",outcome="forwarded"} 1')
    expect(text).toContain('r_total{route="payments",code="201"} 2')
  })

  test('a value that is not a finite number is refused, and nothing is counted', async () => {
    const { ours } = pair()
    const h = histogramSeries(ours.h, 'payments', 'forwarded')
    expect(() => h.observe(Number.NaN)).toThrow(TypeError)
    expect(await ours.registry.metrics()).toContain('d_seconds_count{route="payments",outcome="forwarded"} 0')
  })

  test('the wrong number of label values is refused', () => {
    const { ours } = pair()
    expect(() => histogramSeries(ours.h, 'payments')).toThrow(/expected 2 label values/)
  })
})
