/**
 * The TLS material of one config block, read and checked: a listener's certificate, key and
 * client CA (`tls`, `admin.tls`), or a client side's CA, certificate and key (`upstream.tls`,
 * `store.tls`). Every problem is collected with its YAML path, so check-config names them all.
 */
import { createSecureContext, type SecureContextOptions } from 'node:tls'
import type { X509Certificate } from 'node:crypto'
import { certificates, notExpired, privateKey, readPem, someValid, TlsFileError } from './pem.js'

/** PEM texts ready for node:tls, and the certificate they present (undefined: none presented). */
export interface TlsMaterial {
  /** the certificate chain presented, PEM */
  cert?: string
  key?: string
  /** the CAs trusted (the listener's clients', or the peer's), PEM */
  ca?: string
  /** the presented leaf certificate (its notAfter feeds fencegate_tls_certificate_expiry_seconds) */
  leaf?: X509Certificate
}

/** The TLS files a block names; `at` is the block's YAML path (`tls`, `routes[0].upstream.tls`). */
export interface TlsFiles { cert?: string; key?: string; ca?: string; clientCa?: string }

/** The problems found in a block's files, each one `TlsFileError` with its YAML path. */
export class TlsFilesError extends Error {
  constructor(readonly problems: TlsFileError[]) {
    super(problems.map((p) => `${p.path}: ${p.message}`).join('\n'))
    this.name = 'TlsFilesError'
  }
}

/**
 * Reads and checks the files of one block: each file readable and parsed, the key matching the
 * certificate, the certificate not expired, a CA file holding a certificate not all expired,
 * and node:tls accepting the whole (`createSecureContext`).
 * @param at the block's YAML path
 * @throws TlsFilesError listing every problem, each with its YAML path
 */
export function loadTls(at: string, files: TlsFiles, now = Date.now()): TlsMaterial {
  const problems: TlsFileError[] = []
  const attempt = <T>(f: () => T): T | undefined => {
    try { return f() } catch (e) {
      if (e instanceof TlsFileError) problems.push(e)
      else throw e
      return undefined
    }
  }
  const out: TlsMaterial = {}
  const caKey = files.clientCa !== undefined ? 'clientCa' : 'ca'
  const caFile = files.clientCa ?? files.ca
  if (caFile !== undefined) {
    const path = `${at}.${caKey}`
    const text = attempt(() => readPem(path, caFile))
    if (text !== undefined) {
      const cas = attempt(() => certificates(path, caFile, text))
      if (cas) attempt(() => someValid(path, cas, now))
      out.ca = text
    }
  }
  if (files.cert !== undefined && files.key !== undefined) {
    const certPath = `${at}.cert`
    const keyPath = `${at}.key`
    const certText = attempt(() => readPem(certPath, files.cert!))
    const chain = certText === undefined ? undefined : attempt(() => certificates(certPath, files.cert!, certText))
    const keyText = attempt(() => readPem(keyPath, files.key!))
    const key = keyText === undefined ? undefined : attempt(() => privateKey(keyPath, files.key!, keyText))
    if (chain) {
      attempt(() => notExpired(certPath, chain[0], now))
      if (key && !chain[0].checkPrivateKey(key)) problems.push(new TlsFileError(keyPath, `does not match ${certPath} (${files.key} is not the key of the certificate in ${files.cert})`))
    }
    out.cert = certText
    out.key = keyText
    out.leaf = chain?.[0]
  }
  if (!problems.length) {
    // what node:tls itself refuses (an unsupported key type, a chain it cannot load)
    attempt(() => {
      try { createSecureContext({ cert: out.cert, key: out.key, ca: out.ca }) } catch (e) {
        throw new TlsFileError(out.cert ? `${at}.cert` : `${at}.${caKey}`, `node:tls cannot use it: ${(e as Error).message}`)
      }
    })
  }
  if (problems.length) throw new TlsFilesError(problems)
  return out
}

/** The options node:tls takes for this material. */
export const contextOptions = (m: TlsMaterial): SecureContextOptions => ({
  ...(m.cert ? { cert: m.cert, key: m.key } : {}),
  ...(m.ca ? { ca: m.ca } : {}),
})
