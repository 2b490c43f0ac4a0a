// A gateway process with a skewed wall clock (libfaketime). The library is preloaded into the
// gateway's own process rather than run through the `faketime` command: that command forks and
// waits, so a signal sent to it (SIGKILL, SIGTERM) never reaches the gateway, which would live on.
import { existsSync } from 'node:fs'

const CANDIDATES = [
  '/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1',
  '/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1',
  '/usr/lib/faketime/libfaketime.so.1',
  '/usr/local/lib/faketime/libfaketime.so.1',
]

/** The path of libfaketime.so.1; throws naming the places looked at when it is not installed. */
export function libfaketime(): string {
  const found = CANDIDATES.find((p) => existsSync(p))
  if (!found) throw new Error(`libfaketime.so.1 not found (looked in ${CANDIDATES.join(', ')}): install the faketime package`)
  return found
}

/**
 * The environment of a process whose wall clock is off by `offset` (libfaketime's -f format:
 * '+20s', '-20s'). Only the wall clock: node's timers and performance.now stay true.
 */
export const skewedEnv = (offset: string): NodeJS.ProcessEnv => ({ LD_PRELOAD: libfaketime(), FAKETIME: offset, FAKETIME_DONT_FAKE_MONOTONIC: '1' })

/** `spawnGateway`'s launch options for a gateway whose clock is off by `offset`. */
export const skewed = (offset: string) => ({ env: skewedEnv(offset) })
