/**
 * Certificates made by `openssl` at test time (EC P-256, so each takes milliseconds): a CA,
 * certificates it signs (a server one for localhost and 127.0.0.1, client ones), a self-signed
 * one and an expired one. Files in a temp folder; `serial` is the certificate's serial number as
 * node:crypto writes it (upper-case hex).
 *
 * ```ts
 * const pki = makePki()
 * const server = pki.issue('server')                // SAN localhost, 127.0.0.1
 * const client = pki.issue('client', { client: true })
 * const old = pki.issue('old', { days: -1 })        // expired yesterday
 * ```
 */
import { execFileSync } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { tempDir } from './gateway.js'

/** A certificate and its key, as files and as PEM text. */
export interface Pem {
  cert: string
  key: string
  certPem: string
  keyPem: string
  serial: string
}

export interface IssueOptions {
  /** validity in days from now; negative: already expired (default 30) */
  days?: number
  /** subjectAltName (default DNS:localhost,IP:127.0.0.1) */
  san?: string
  /** a client certificate (extendedKeyUsage clientAuth) instead of a server one */
  client?: boolean
  /** the file name under the folder (default: the name); an existing file is overwritten */
  file?: string
}

export interface Pki {
  dir: string
  /** the CA, self-signed */
  ca: Pem
  /** a certificate signed by this CA */
  issue(name: string, opts?: IssueOptions): Pem
  /** a self-signed certificate (no CA) */
  selfSigned(name: string, opts?: IssueOptions): Pem
}

const openssl = (args: string[]) => execFileSync('openssl', args, { stdio: ['ignore', 'pipe', 'pipe'] })
const serialHex = () => `0x${randomBytes(8).toString('hex').replace(/^./, '1')}`

function read(cert: string, key: string, serial: string): Pem {
  return { cert, key, certPem: readFileSync(cert, 'utf8'), keyPem: readFileSync(key, 'utf8'), serial: BigInt(serial).toString(16).toUpperCase() }
}

function extensions(dir: string, name: string, opts: IssueOptions): string {
  const ext = join(dir, `${name}.ext`)
  writeFileSync(ext, [
    `subjectAltName=${opts.san ?? 'DNS:localhost,IP:127.0.0.1'}`,
    'basicConstraints=CA:FALSE',
    'keyUsage=digitalSignature,keyEncipherment',
    `extendedKeyUsage=${opts.client ? 'clientAuth' : 'serverAuth'}`,
  ].join('\n'))
  return ext
}

/** A new CA in a new temp folder (or `dir`). */
export function makePki(dir = tempDir('fg-pki-'), caName = 'Test CA'): Pki {
  const ca = (() => {
    const cert = join(dir, 'ca.pem')
    const key = join(dir, 'ca-key.pem')
    const serial = serialHex()
    openssl(['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-keyout', key, '-out', cert, '-days', '365', '-subj', `/CN=${caName}`, '-set_serial', serial,
      '-addext', 'basicConstraints=critical,CA:TRUE', '-addext', 'keyUsage=critical,keyCertSign,cRLSign'])
    return read(cert, key, serial)
  })()
  const issue = (name: string, opts: IssueOptions = {}): Pem => {
    const file = opts.file ?? name
    const cert = join(dir, `${file}.pem`)
    const key = join(dir, `${file}-key.pem`)
    const csr = join(dir, `${file}.csr`)
    const serial = serialHex()
    openssl(['req', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-keyout', key, '-out', csr, '-subj', `/CN=${name}`])
    openssl(['x509', '-req', '-in', csr, '-CA', ca.cert, '-CAkey', ca.key, '-set_serial', serial, '-days', String(opts.days ?? 30), '-extfile', extensions(dir, file, opts), '-out', cert])
    return read(cert, key, serial)
  }
  const selfSigned = (name: string, opts: IssueOptions = {}): Pem => {
    const file = opts.file ?? name
    const cert = join(dir, `${file}.pem`)
    const key = join(dir, `${file}-key.pem`)
    const serial = serialHex()
    openssl(['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-keyout', key, '-out', cert, '-days', String(opts.days ?? 30), '-subj', `/CN=${name}`, '-set_serial', serial,
      '-addext', `subjectAltName=${opts.san ?? 'DNS:localhost,IP:127.0.0.1'}`])
    return read(cert, key, serial)
  }
  return { dir, ca, issue, selfSigned }
}
