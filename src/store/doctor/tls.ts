/**
 * The store link's TLS, as `fencegate doctor` reports it (finding `tls`): encrypted and verified
 * (rediss://, sslmode=verify-full, store.tls), or cleartext to a host other than this one — fencing
 * tokens, idempotency keys and stored responses then cross the network readable and alterable by
 * whoever is on the path. Cleartext to a loopback address (one host) gives no finding.
 */
import type { Config } from '../../config/schema.js'
import type { Finding } from './findings.js'

const LOOPBACK = (host: string): boolean => host === 'localhost' || host.endsWith('.localhost') || /^127\./.test(host) || host === '::1' || host === '[::1]'

/** A postgres URL that says TLS: a verifying or requiring sslmode, or ssl=true. */
const pgTls = (u: URL): boolean => ['require', 'verify-ca', 'verify-full'].includes(u.searchParams.get('sslmode') ?? '') || ['true', '1'].includes(u.searchParams.get('ssl') ?? '')

/** The hosts the store is reached at, and whether the link is TLS; undefined for memory and sqlite. */
export function storeLink(config: Config['store']): { tls: boolean; hosts: string[]; how: string } | undefined {
  if (config.kind === 'redis') {
    const urls = (config.url ?? '').split(',').map((u) => u.trim()).filter(Boolean)
    const tls = config.tls !== undefined || urls.some((u) => u.startsWith('rediss://'))
    const hosts = config.sentinels ? config.sentinels.map((a) => a.slice(0, a.lastIndexOf(':'))) : urls.map((u) => { try { return new URL(u).hostname } catch { return u } })
    return { tls, hosts, how: tls ? `rediss://${config.sentinels ? ' (the Sentinels and the primary)' : config.cluster ? ' (every node)' : ''}` : 'redis:// (cleartext)' }
  }
  if (config.kind === 'postgres' && config.url) {
    const u = new URL(config.url)
    const tls = config.tls !== undefined || pgTls(u)
    // host= in the query (a socket folder) reaches the server on this host
    const socket = u.searchParams.get('host')?.startsWith('/')
    const hosts = socket ? ['localhost'] : [decodeURIComponent(u.hostname) || 'localhost']
    const mode = config.tls !== undefined ? 'verify-full' : u.searchParams.get('sslmode') ?? (pgTls(u) ? 'require' : 'disable')
    return { tls, hosts, how: tls ? `sslmode=${mode}` : 'cleartext (no sslmode, no store.tls)' }
  }
  return undefined
}

/** Finding `tls`, or undefined when the store is local (memory, sqlite) or a loopback address in cleartext. */
export function tlsFinding(config: Config['store']): Finding | undefined {
  const link = storeLink(config)
  if (!link) return undefined
  const client = config.tls?.cert ? ', client certificate presented' : ''
  if (link.tls) {
    return { id: 'tls', status: 'ok', setting: `store link TLS: ${link.how}${config.tls ? `, store.tls${client}` : ''}`, consequence: 'The store link is encrypted and the server\'s certificate verified, so no one on the path can read or alter fencing tokens, idempotency keys or stored responses.' }
  }
  const remote = link.hosts.filter((h) => !LOOPBACK(h.replace(/^\[|\]$/g, '')))
  if (!remote.length) return undefined
  const fix = config.kind === 'redis' ? 'use rediss:// URLs with store.tls' : 'add store.tls (verified as sslmode=verify-full)'
  return { id: 'tls', status: 'risk', setting: `store link cleartext: ${link.how} to ${remote.join(', ')}`, consequence: `The store is reached over the network in cleartext: fencing tokens, idempotency keys and stored responses can be read, and a forged reply could admit a stale write or replay a wrong response; ${fix}.` }
}
