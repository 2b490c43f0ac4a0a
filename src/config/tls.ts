/**
 * The TLS keys of the config (contract §5b): PEM file paths only. No key turns peer
 * verification off. The files themselves are read and parsed after validation (src/tls/check.ts).
 */
import { z } from 'zod'

const pemFile = z.string().min(1, 'must not be empty (a PEM file\'s path)')

/** `cert` and `key` together or neither (a client certificate needs its key). */
const pairRefine = (t: { cert?: string; key?: string }, ctx: z.RefinementCtx) => {
  if (t.cert !== undefined && t.key === undefined) ctx.addIssue({ code: 'custom', path: ['key'], message: 'cert needs its key: give cert and key together, or neither' })
  if (t.key !== undefined && t.cert === undefined) ctx.addIssue({ code: 'custom', path: ['cert'], message: 'key needs its certificate: give cert and key together, or neither' })
}

/** `tls`, `admin.tls`: the listener serves HTTPS with this certificate; `clientCa` makes clients present one it signed. */
export const listenerTls = z.strictObject({
  cert: pemFile,
  key: pemFile,
  clientCa: pemFile.optional(),
})

/** `routes[].upstream.tls`: trust `ca` instead of the system's CAs, present `cert`, send and check `servername`. */
export const upstreamTls = z.strictObject({
  ca: pemFile.optional(),
  cert: pemFile.optional(),
  key: pemFile.optional(),
  servername: z.string().regex(/^[A-Za-z0-9.-]{1,253}$/, 'must be a host name (the name sent as SNI and checked in the certificate)').optional(),
}).superRefine(pairRefine)

/** `store.tls`: redis (rediss://) and postgres. */
export const storeTls = z.strictObject({
  ca: pemFile.optional(),
  cert: pemFile.optional(),
  key: pemFile.optional(),
}).superRefine(pairRefine)

export type ListenerTlsConfig = z.output<typeof listenerTls>
export type UpstreamTlsConfig = z.output<typeof upstreamTls>
export type StoreTlsConfig = z.output<typeof storeTls>

/**
 * `store.tls` against the store's kind and URL: only redis and postgres; redis needs a
 * `rediss://` URL, so the URL alone says whether the link is encrypted (ioredis turns TLS on for
 * `rediss://`; `tls` options with a `redis://` URL would too, which reads as cleartext); a
 * postgres URL's `sslmode`, which pg lets override the options, must be absent or verify-full.
 */
export function storeTlsIssues(s: { kind: string; url?: string; tls?: unknown; sentinels?: unknown }): { path: PropertyKey[]; message: string }[] {
  if (s.tls === undefined) return []
  if (s.kind !== 'redis' && s.kind !== 'postgres') return [{ path: ['tls'], message: `only with store.kind redis or postgres, not ${s.kind}` }]
  if (s.kind === 'redis') {
    if (s.url === undefined) return s.sentinels ? [{ path: ['url'], message: 'store.tls with store.sentinels needs store.url as rediss://… (it says TLS for the Sentinels and the primary)' }] : []
    const plain = s.url.split(',').map((u) => u.trim()).filter((u) => !u.startsWith('rediss://'))
    if (plain.length) return [{ path: ['url'], message: `store.tls needs rediss:// URLs, not ${plain[0].split('//')[0]}//… : redis:// is the cleartext scheme` }]
    return []
  }
  const mode = s.url && /[?&]sslmode=([^&]*)/.exec(s.url)?.[1]
  if (mode && mode !== 'verify-full') return [{ path: ['url'], message: `sslmode=${mode} contradicts store.tls, which verifies the server's certificate and name (verify-full): remove sslmode from the URL, or write sslmode=verify-full` }]
  return []
}
