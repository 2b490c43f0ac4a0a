import { startLocalCluster } from '/work/wt/cluster-loss/dist/scripts/redis-cluster.js'
import { Cluster } from 'ioredis'
const c = await startLocalCluster({ masters: 3, replicasPerMaster: 1, nodeTimeoutMs: 1500 })
const r = new Cluster([{ host: '127.0.0.1', port: c.nodes[0].port }])
try {
  for (const lua of ["return redis.call('CLUSTER','MYID')", "return string.match(redis.call('INFO','replication'), 'master_replid:(%w+)')"]) {
    try { console.log(lua, await r.eval(lua, 1, '{a}x')) } catch (e) { console.log('ERR', lua, e.message) }
  }
  const t0 = process.hrtime.bigint()
  for (let i = 0; i < 2000; i++) await r.eval("return string.match(redis.call('INFO','replication'), 'master_replid:(%w+)')", 1, '{a}x')
  const t1 = process.hrtime.bigint()
  for (let i = 0; i < 2000; i++) await r.eval("return 1", 1, '{a}x')
  const t2 = process.hrtime.bigint()
  console.log('info', Number(t1 - t0) / 2000 / 1000, 'us; plain', Number(t2 - t1) / 2000 / 1000)
  const cmd = await r.cluster('SLOTS'); console.log(JSON.stringify(cmd).slice(0, 300))
} finally { r.disconnect(); await c.stop() }
