import { keysPerBlock, SLOTS } from '../dist/src/store/redis/keys.js'
const t = Date.now(); const k = keysPerBlock('fg:fencegate:q:', SLOTS); console.log(Date.now() - t, 'ms', k.length, k[0], k[16383])
