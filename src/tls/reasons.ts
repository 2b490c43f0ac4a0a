/**
 * Why a TLS connection to an upstream (or a store) failed, in the words the 502
 * `upstream-unavailable` problem's `detail` gives (contract §5b): OpenSSL's verification result
 * as Node names it (`self-signed certificate`, `unable to verify the first certificate`), the
 * host name check (`Hostname/IP does not match certificate's altnames: …`), or the peer's alert.
 */

/** Node's verification error codes (tls.TLSSocket.authorizationError), as the detail says them. */
const VERIFY: Record<string, string> = {
  DEPTH_ZERO_SELF_SIGNED_CERT: 'self-signed certificate',
  SELF_SIGNED_CERT_IN_CHAIN: 'self-signed certificate in certificate chain',
  UNABLE_TO_VERIFY_LEAF_SIGNATURE: 'unable to verify the first certificate',
  UNABLE_TO_GET_ISSUER_CERT_LOCALLY: 'unable to get local issuer certificate',
  UNABLE_TO_GET_ISSUER_CERT: 'unable to get issuer certificate',
  CERT_HAS_EXPIRED: 'certificate has expired',
  CERT_NOT_YET_VALID: 'certificate is not yet valid',
  CERT_REVOKED: 'certificate revoked',
  CERT_SIGNATURE_FAILURE: 'certificate signature failure',
  CERT_UNTRUSTED: 'certificate not trusted',
  CERT_REJECTED: 'certificate rejected',
  INVALID_CA: 'invalid CA certificate',
}

/** OpenSSL alerts and record errors Node gives as ERR_SSL_* codes, as the detail says them. */
const SSL: [RegExp, string][] = [
  [/ALERT_CERTIFICATE_REQUIRED$/, 'the upstream requires a client certificate and none was presented (upstream.tls.cert)'],
  [/ALERT_(BAD_CERTIFICATE|UNKNOWN_CA|CERTIFICATE_UNKNOWN|UNSUPPORTED_CERTIFICATE|ACCESS_DENIED)$/, 'the upstream refused the client certificate'],
  [/ALERT_CERTIFICATE_EXPIRED$/, 'the upstream refused the client certificate: it has expired'],
  [/WRONG_VERSION_NUMBER$|PACKET_LENGTH_TOO_LONG$|HTTP_REQUEST$/, 'the upstream does not speak TLS on this port'],
  [/ALERT_HANDSHAKE_FAILURE$|NO_SHARED_CIPHER$|UNSUPPORTED_PROTOCOL$|ALERT_PROTOCOL_VERSION$/, 'no TLS version or cipher in common with the upstream'],
]

/**
 * The TLS reason of a connection error, or undefined when it is not one (a refused connection,
 * a timeout). Looks through `cause` chains (undici wraps the socket's error).
 */
export function tlsReason(error: unknown): string | undefined {
  for (let e = error as (Error & { code?: string; reason?: string; cause?: unknown }) | undefined, depth = 0; e && depth < 5; e = e.cause as typeof e, depth++) {
    const code = e.code ?? ''
    if (VERIFY[code]) return VERIFY[code]
    // "Hostname/IP does not match certificate's altnames: Host: x. is not in the cert's altnames: DNS:y"
    if (code === 'ERR_TLS_CERT_ALTNAME_INVALID') return e.message
    if (code.startsWith('ERR_SSL_')) {
      const known = SSL.find(([re]) => re.test(code))
      return known ? `${known[1]} (${code.slice('ERR_SSL_'.length).toLowerCase().replaceAll('_', ' ')})` : `TLS error: ${e.message}`
    }
  }
  return undefined
}

/** The alerts a TLS server sends while it refuses the handshake over the client's certificate. */
const HANDSHAKE_REFUSAL = /ALERT_(CERTIFICATE_REQUIRED|BAD_CERTIFICATE|UNKNOWN_CA|CERTIFICATE_UNKNOWN|UNSUPPORTED_CERTIFICATE|ACCESS_DENIED|CERTIFICATE_EXPIRED|CERTIFICATE_REVOKED)$/

/**
 * Whether the peer refused the TLS handshake over the client certificate. With TLS 1.3 the
 * client's handshake ends before the server has checked its certificate, so undici may have
 * written the request when the server's alert arrives; a server that refused the handshake read
 * none of it (no early data is offered), so the request counts as not sent.
 */
export function handshakeRefused(error: unknown): boolean {
  for (let e = error as (Error & { code?: string; cause?: unknown }) | undefined, depth = 0; e && depth < 5; e = e.cause as typeof e, depth++) {
    if (e.code?.startsWith('ERR_SSL_') && HANDSHAKE_REFUSAL.test(e.code)) return true
  }
  return false
}
