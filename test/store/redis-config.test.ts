// The redis topology keys of the config (store.cluster, store.replicas, store.replicasTimeout):
// defaults, and every mistake named by its YAML path. In-process (parseConfig), no store opened.
import { describe, expect, test } from 'vitest'
import { parseConfig, ConfigError } from '../../src/config/load.js'
import { claimFor } from '../../src/audit/guarantees.js'

const config = (store: string) => `store:
${store}
routes:
  - name: payments
    match:
      path: /accounts/:account/*
    upstream:
      url: http://127.0.0.1:9090
    fencing:
      resource: "account:{param.account}"
`
const parse = (store: string) => parseConfig(config(store), '/tmp/fencegate.yaml', {})
const problem = (store: string): string => {
  try {
    parse(store)
  } catch (e) {
    if (e instanceof ConfigError) return e.message
    throw e
  }
  return ''
}

describe('store.cluster, store.replicas, store.replicasTimeout', () => {
  test('defaults: no cluster, no WAIT; the WAIT timeout is left to the store (a quarter of store.timeout)', () => {
    const s = parse('  kind: redis\n  url: redis://127.0.0.1:6379').store
    expect([s.cluster, s.replicas, s.replicasTimeout]).toEqual([false, 0, undefined])
  })

  test('a cluster with seed nodes, WAIT for one replica within 200 ms', () => {
    const s = parse('  kind: redis\n  cluster: true\n  url: redis://h1:7000,redis://h2:7001, rediss://h3:7002\n  replicas: 1\n  replicasTimeout: 200ms').store
    expect([s.cluster, s.url, s.replicas, s.replicasTimeout]).toEqual([true, 'redis://h1:7000,redis://h2:7001, rediss://h3:7002', 1, 200])
  })

  test.each([
    ['cluster on another store', '  kind: postgres\n  url: postgres://x/db\n  cluster: true', 'store.cluster: only with store.kind redis'],
    ['replicas on another store', '  kind: sqlite\n  replicas: 1', 'store.replicas: only with store.kind redis'],
    ['a negative replica count', '  kind: redis\n  url: redis://x\n  replicas: -1', 'store.replicas: must be 0 or more'],
    ['a fractional replica count', '  kind: redis\n  url: redis://x\n  replicas: 1.5', 'store.replicas: must be a whole number'],
    ['several nodes without cluster', '  kind: redis\n  url: redis://h1:7000,redis://h2:7001', 'store.url: lists several nodes: set store.cluster: true'],
    ['a seed node that is not a redis URL', '  kind: redis\n  cluster: true\n  url: redis://h1:7000,h2:7001', 'store.url: every seed node must be a redis:// or rediss:// URL'],
    ['a WAIT timeout as long as store.timeout', '  kind: redis\n  url: redis://x\n  timeout: 500ms\n  replicas: 1\n  replicasTimeout: 500ms', 'store.replicasTimeout: must be shorter than store.timeout (500 ms)'],
    ['a WAIT timeout that is not a duration', '  kind: redis\n  url: redis://x\n  replicas: 1\n  replicasTimeout: soon', 'store.replicasTimeout: "soon" is not a duration'],
  ])('%s: named by its YAML path', (_what, store, expected) => {
    expect(problem(store)).toContain(expected)
  })
})

describe('the claim (contract §8) of a route on a cluster with store.replicas', () => {
  test('says what the cluster and WAIT promise, and that WAIT is not consensus', () => {
    const c = parse('  kind: redis\n  cluster: true\n  url: redis://h1:7000,redis://h2:7001\n  replicas: 1')
    const claim = claimFor(c.routes[0], c.store)
    expect(claim.assumptions.join('\n')).toMatch(/Redis Cluster: a slot whose master is down .* 503/)
    expect(claim.guarantees.join('\n')).toMatch(/acknowledged by 1 Redis replica \(WAIT\) before the request is forwarded/)
    expect(claim.notGuaranteed.join('\n')).toMatch(/WAIT is not consensus/)
    const plain = claimFor(parse('  kind: redis\n  url: redis://h1:7000').routes[0], parse('  kind: redis\n  url: redis://h1:7000').store)
    expect([...plain.guarantees, ...plain.assumptions, ...plain.notGuaranteed].join('\n')).not.toMatch(/WAIT|Redis Cluster/)
  })
})
