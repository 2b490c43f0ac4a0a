/**
 * Preloaded into the fencegate gateways that bench/scale.ts and bench/soak.ts start
 * (`node --import dist/bench/exit-with-parent.js dist/src/cli.js …`): when the harness's pipe to
 * the gateway's stdin closes (the harness died, even with kill -9), the gateway gets a SIGTERM
 * and stops through its own graceful shutdown. The gateway itself does not watch stdin.
 */
const stop = () => { process.kill(process.pid, 'SIGTERM') }
process.stdin.on('end', stop).on('error', stop).resume()
// the pipe must not keep the process alive once the gateway closed everything else
;(process.stdin as unknown as { unref?: () => void }).unref?.()
