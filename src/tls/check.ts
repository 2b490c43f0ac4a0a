/**
 * Every TLS block of a config (contract §5b) with its YAML path, its relative paths made
 * absolute, and its files read and checked: what start-up, `fencegate check-config` and a
 * SIGHUP reload all go through (src/config/load.ts calls `tlsFileFindings`).
 */
import { isAbsolute, resolve } from 'node:path'
import type { Config } from '../config/schema.js'
import { listenerTls, storeTls, upstreamTls } from '../config/tls.js'
import { loadTls, TlsFilesError, type TlsFiles } from './material.js'

/** One TLS block: its YAML path as keys (`['routes', 0, 'upstream', 'tls']`) and as text, and its files. */
export interface TlsBlock { path: PropertyKey[]; at: string; files: TlsFiles & { servername?: string } }

const text = (path: PropertyKey[]) => path.reduce<string>((s, k) => (typeof k === 'number' ? `${s}[${k}]` : s ? `${s}.${String(k)}` : String(k)), '')

/** The config's TLS blocks, in file order: tls, admin.tls, store.tls, routes[i].upstream.tls. */
export function tlsBlocks(config: Config): TlsBlock[] {
  const out: TlsBlock[] = []
  const add = (path: PropertyKey[], files: TlsFiles | undefined) => { if (files) out.push({ path, at: text(path), files }) }
  add(['tls'], config.tls)
  add(['admin', 'tls'], config.admin.tls)
  add(['store', 'tls'], config.store.tls)
  config.routes.forEach((r, i) => add(['routes', i, 'upstream', 'tls'], r.upstream.tls))
  return out
}

const FILE_KEYS = ['cert', 'key', 'ca', 'clientCa'] as const

/** Makes every TLS file path absolute against `base` (the config file's folder), in place. */
export function resolveTlsPaths(config: Config, base: string): void {
  for (const { files } of tlsBlocks(config)) {
    for (const k of FILE_KEYS) {
      const f = files[k]
      if (f !== undefined && !isAbsolute(f)) files[k] = resolve(base, f)
    }
  }
}

/**
 * The TLS blocks of a config that did not validate as a whole: each block that validates on its
 * own, its paths made absolute against `base`, so check-config reports the files' problems in
 * the same pass as the rest.
 */
export function rawTlsBlocks(raw: unknown, base: string): TlsBlock[] {
  const r = (raw ?? {}) as Record<string, any>
  const out: TlsBlock[] = []
  const add = (path: PropertyKey[], schema: typeof listenerTls | typeof upstreamTls | typeof storeTls, value: unknown) => {
    if (value === undefined) return
    const parsed = schema.safeParse(value)
    if (!parsed.success) return
    const files: TlsBlock['files'] = { ...parsed.data }
    for (const k of FILE_KEYS) if (files[k] !== undefined && !isAbsolute(files[k]!)) files[k] = resolve(base, files[k]!)
    out.push({ path, at: text(path), files })
  }
  add(['tls'], listenerTls, r.tls)
  add(['admin', 'tls'], listenerTls, r.admin?.tls)
  add(['store', 'tls'], storeTls, r.store?.tls)
  if (Array.isArray(r.routes)) r.routes.forEach((route: any, i: number) => add(['routes', i, 'upstream', 'tls'], upstreamTls, route?.upstream?.tls))
  return out
}

/**
 * Reads and checks every TLS file of the blocks (default: the config's).
 * @returns one finding per problem, its path the YAML path of the key naming the file
 */
export function tlsFileFindings(config: Config | TlsBlock[], now = Date.now()): { path: PropertyKey[]; message: string }[] {
  const out: { path: PropertyKey[]; message: string }[] = []
  for (const b of Array.isArray(config) ? config : tlsBlocks(config)) {
    try {
      loadTls(b.at, b.files, now)
    } catch (e) {
      if (!(e instanceof TlsFilesError)) throw e
      for (const p of e.problems) out.push({ path: [...b.path, p.path.slice(b.at.length + 1)], message: p.message })
    }
  }
  return out
}
