/**
 * `fencegate resolve` through the running gateway's admin API (`POST /resolve` on
 * `admin.listen`, with `admin.writeToken`): the gateway that settles the record counts it in
 * `fencegate_unknown_outcomes_settled_total{by="operator"}` (contract §4a, §6), which a CLI
 * writing to the store itself cannot. When no gateway can be asked — no write token, an admin
 * listener over TLS (the CLI would send the token to a certificate it cannot check), or nothing
 * answering there — the caller resolves in the store directly.
 */
import { request } from 'undici'
import type { Config } from '../config/schema.js'
import { problemName } from '../client/decisions.js'
import { localAddress } from '../listen-address.js'
import type { Resolved, ResolveRequest } from './resolve.js'

/** How long the CLI waits for the local gateway's admin API before resolving in the store itself, ms. */
const ADMIN_WAIT_MS = 5_000

/**
 * What the admin API answered: `resolved`, `refused` (a problem: its status and detail), or
 * `unreachable` (why the store is to be used instead).
 */
type ViaAdmin =
  | { kind: 'resolved'; resolved: Resolved; at: string }
  | { kind: 'refused'; status: number; detail: string }
  | { kind: 'unreachable'; why: string }

/** Never throws: every failure to reach the gateway is `unreachable`. */
export async function resolveViaAdmin(config: Config, r: ResolveRequest): Promise<ViaAdmin> {
  const { writeToken, tls, listen } = config.admin
  if (!writeToken) return { kind: 'unreachable', why: 'admin.writeToken is not set, so the gateway\'s POST /resolve would refuse' }
  if (tls) return { kind: 'unreachable', why: 'the admin listener serves HTTPS, and the CLI does not send the write token to a certificate it cannot check' }
  const at = localAddress(listen)
  try {
    const res = await request(`http://${at}/resolve`, {
      method: 'POST',
      headers: { authorization: `Bearer ${writeToken}`, 'content-type': 'application/json' },
      body: JSON.stringify(r),
      signal: AbortSignal.timeout(ADMIN_WAIT_MS),
    })
    const text = await res.body.text()
    let body: Record<string, unknown> = {}
    try { body = JSON.parse(text) } catch { /* not JSON: not a fencegate admin listener */ }
    if (res.statusCode === 200 && typeof body.keyHash === 'string') return { kind: 'resolved', resolved: body as unknown as Resolved, at }
    if (problemName(body) !== undefined) {
      // the store behind the gateway is down: the CLI's own store call would fail the same way
      return { kind: 'refused', status: res.statusCode, detail: String(body.detail ?? body.title ?? res.statusCode) }
    }
    return { kind: 'unreachable', why: `${at} answered ${res.statusCode}, not as a fencegate admin listener` }
  } catch (e) {
    return { kind: 'unreachable', why: `no gateway answered at ${at} (${(e as Error).message})` }
  }
}
