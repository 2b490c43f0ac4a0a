/**
 * A listen address of the config (`listen`, `admin.listen`: `host:port`, an IPv6 host in
 * brackets or bare) as the server binds it and as a client on this host dials it.
 */

/** The host and port of a listen address; an IPv6 host without its brackets. */
export function hostPort(listen: string): { host: string; port: number } {
  const i = listen.lastIndexOf(':')
  return { host: listen.slice(0, i).replace(/^\[|\]$/g, ''), port: Number(listen.slice(i + 1)) }
}

/** Whether a listen host takes every interface (0.0.0.0, ::, or none given). */
export const isWildcard = (host: string): boolean => host === '0.0.0.0' || host === '::' || host === '[::]' || host === ''

/** The `host:port` a client on this host reaches a listen address at: a wildcard host is its loopback. */
export function localAddress(listen: string): string {
  const { host, port } = hostPort(listen)
  const local = host === '::' ? '[::1]' : isWildcard(host) ? '127.0.0.1' : host.includes(':') ? `[${host}]` : host
  return `${local}:${port}`
}
