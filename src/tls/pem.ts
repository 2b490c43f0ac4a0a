/**
 * PEM files as the TLS keys name them (contract §5b): read, parsed with node:crypto, and every
 * problem said against the YAML path that names the file (`tls.cert: cannot read /x.pem: no
 * such file`).
 */
import { readFileSync } from 'node:fs'
import { createPrivateKey, X509Certificate, type KeyObject } from 'node:crypto'

/** A TLS file that cannot be used: `path` is its YAML path (`routes[0].upstream.tls.ca`). */
export class TlsFileError extends Error {
  constructor(readonly path: string, message: string) {
    super(message)
    this.name = 'TlsFileError'
  }
}

const READ_ERRORS: Record<string, string> = {
  ENOENT: 'no such file',
  EACCES: 'permission denied',
  EPERM: 'permission denied',
  EISDIR: 'is a directory',
  ENOTDIR: 'a folder on its path is a file',
}

/** The file's text. @throws TlsFileError `cannot read <file>: no such file` (or why) */
export function readPem(at: string, file: string): string {
  try {
    return readFileSync(file, 'utf8')
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code ?? ''
    throw new TlsFileError(at, `cannot read ${file}: ${READ_ERRORS[code] ?? code ?? (e as Error).message}`)
  }
}

/** An instant as the messages write it: 2026-01-01T00:00:00Z. */
export const isoSecond = (d: Date): string => d.toISOString().replace(/\.\d{3}Z$/, 'Z')

/** A certificate's notAfter as a Date (X509Certificate.validTo is text, e.g. "Jan  1 00:00:00 2026 GMT"). */
export const notAfter = (c: X509Certificate): Date => new Date(c.validTo)

const BLOCK = /-----BEGIN CERTIFICATE-----[\s\S]*?-----END CERTIFICATE-----/g

/**
 * The certificates of a PEM text, in file order (a chain: the leaf first).
 * @throws TlsFileError `holds no certificate`, or one that cannot be parsed
 */
export function certificates(at: string, file: string, text: string): X509Certificate[] {
  const blocks = text.match(BLOCK) ?? []
  if (!blocks.length) throw new TlsFileError(at, `${file} holds no certificate (a PEM "-----BEGIN CERTIFICATE-----" block)`)
  return blocks.map((b, i) => {
    try {
      return new X509Certificate(b)
    } catch (e) {
      throw new TlsFileError(at, `${file}: certificate ${i + 1} cannot be parsed: ${(e as Error).message}`)
    }
  })
}

/** The private key of a PEM text. @throws TlsFileError when there is none, or it is encrypted */
export function privateKey(at: string, file: string, text: string): KeyObject {
  try {
    return createPrivateKey(text)
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code
    if (code === 'ERR_MISSING_PASSPHRASE' || /passphrase|encrypted/i.test((e as Error).message)) {
      throw new TlsFileError(at, `${file} holds an encrypted key: fencegate reads unencrypted PEM keys (protect the file's permissions instead)`)
    }
    throw new TlsFileError(at, `${file} holds no private key that can be read (a PEM "-----BEGIN PRIVATE KEY-----" block): ${(e as Error).message}`)
  }
}

/** @throws TlsFileError `expired on <notAfter>` when the leaf certificate has expired at `now` */
export function notExpired(at: string, leaf: X509Certificate, now = Date.now()): void {
  const end = notAfter(leaf)
  if (end.getTime() <= now) throw new TlsFileError(at, `expired on ${isoSecond(end)}`)
}

/** @throws TlsFileError when every certificate of a CA file has expired */
export function someValid(at: string, cas: X509Certificate[], now = Date.now()): void {
  const ends = cas.map((c) => notAfter(c).getTime())
  if (ends.every((t) => t <= now)) throw new TlsFileError(at, `every certificate in it has expired (the last on ${isoSecond(new Date(Math.max(...ends)))})`)
}
