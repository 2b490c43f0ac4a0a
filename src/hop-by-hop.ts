/**
 * Hop-by-hop fields, lower-case: RFC 9110 §7.6.1 and the de-facto ones (Keep-Alive,
 * Proxy-Connection). They describe one connection, not the request: never forwarded
 * (./forward/headers.ts), so no template may read them (./config/template.ts). A module of its
 * own because both the config and the forwarding layer read it.
 */
export const HOP_BY_HOP: ReadonlySet<string> = new Set(['connection', 'keep-alive', 'proxy-connection', 'te', 'trailer', 'transfer-encoding', 'upgrade'])
