/**
 * Loads a config file: YAML → `${ENV}` / `${ENV:-default}` interpolation in string values →
 * schema validation → checks across fields (./checks.ts: names, templates, shadowed routes,
 * listeners, upstream URLs), on every field that validated (./salvage.ts) → the TLS files read
 * and parsed (src/tls/check.ts) → paths made relative to the config file's folder. Every problem is reported in one pass, in the config's own terms
 * (./messages.ts), each with its YAML path and line.
 */
import { readFileSync } from 'node:fs'
import { dirname, isAbsolute, resolve } from 'node:path'
import { isMap, isScalar, isSeq, LineCounter, parseDocument, type Document, type YAMLError } from 'yaml'
import { configSchema, type Config } from './schema.js'
import { crossFindings, leasePathFindings, type RouteParts } from './checks.js'
import { salvage, type Parts } from './salvage.js'
import { describeIssue } from './messages.js'
import { rawTlsBlocks, resolveTlsPaths, tlsFileFindings } from '../tls/check.js'

/** One mistake in a config: its YAML path (e.g. `routes[0].upstream.timeout`) and what is wrong. */
export interface ConfigProblem {
  path: string
  message: string
  /** 1-based line in the file, when the path exists there */
  line?: number
  /** 1-based column, for YAML syntax errors */
  column?: number
}

/** Thrown when a config cannot be used; `problems` has one entry per mistake. */
export class ConfigError extends Error {
  constructor(readonly file: string, readonly problems: ConfigProblem[]) {
    super(problems.map((p) => formatProblem(file, p)).join('\n'))
    this.name = 'ConfigError'
  }
}

export const formatProblem = (file: string, p: ConfigProblem): string =>
  `${file}${p.line ? `:${p.line}${p.column ? `:${p.column}` : ''}` : ''}: ${p.path || '(top level)'}: ${p.message}`

const pathText = (path: readonly PropertyKey[]): string =>
  path.reduce<string>((s, k) => (typeof k === 'number' ? `${s}[${k}]` : s ? `${s}.${String(k)}` : String(k)), '')

const ENV = /\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}/g

/** Replaces `${NAME}` and `${NAME:-default}` in every string scalar of the document. */
function interpolate(doc: Document, env: NodeJS.ProcessEnv, problems: ConfigProblem[], lines: LineCounter): void {
  const walk = (node: unknown, path: PropertyKey[]): void => {
    if (isMap(node)) for (const pair of node.items) walk(pair.value, [...path, isScalar(pair.key) ? String(pair.key.value) : '?'])
    else if (isSeq(node)) node.items.forEach((item, i) => walk(item, [...path, i]))
    else if (isScalar(node) && typeof node.value === 'string' && node.value.includes('${')) {
      node.value = node.value.replace(ENV, (_all, name: string, fallback: string | undefined) => {
        const v = env[name]
        if (v !== undefined && v !== '') return v
        if (fallback !== undefined) return fallback
        problems.push({ path: pathText(path), message: `environment variable ${name} is not set (write \${${name}:-default} for a default)`, line: node.range ? lines.linePos(node.range[0]).line : undefined })
        return ''
      })
    }
  }
  walk(doc.contents, [])
}

/**
 * Reads and validates a config file.
 * @returns the config, with `store.path` absolute
 * @throws ConfigError listing every problem found, each with its YAML path
 */
export function loadConfig(file: string, env: NodeJS.ProcessEnv = process.env): Config {
  let text: string
  try {
    text = readFileSync(file, 'utf8')
  } catch (e) {
    throw new ConfigError(file, [{ path: '', message: `cannot read the file: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}` }])
  }
  return parseConfig(text, file, env)
}

/**
 * The YAML path where a syntax error at `offset` sits: the deepest key or item that starts
 * before it ("" for the top level).
 */
function pathAt(doc: Document, offset: number): string {
  const at: PropertyKey[] = []
  const start = (n: unknown) => (n as { range?: [number, number, number] } | null)?.range?.[0] ?? Infinity
  let node: unknown = doc.contents
  for (let depth = 0; depth < 100 && node && start(node) <= offset; depth++) {
    if (isMap(node)) {
      const pair = node.items.filter((p) => start(p.key) <= offset).pop()
      if (!pair || !isScalar(pair.key)) break
      at.push(String(pair.key.value))
      node = pair.value
    } else if (isSeq(node)) {
      const i = node.items.filter((item) => start(item) <= offset).length - 1
      if (i < 0) break
      at.push(i)
      node = node.items[i]
    } else break
  }
  return pathText(at)
}

/** The YAML parser's first error, with line and column, in plain words. */
function yamlProblems(doc: Document, errors: readonly YAMLError[], lines: LineCounter): ConfigProblem[] {
  // the first only: one mistake (a tab, a missing bracket) makes the parser report several
  // errors after it, which go away with it
  const e = errors[0]
  const pos = lines.linePos(e.pos[0])
  const hint = YAML_HINTS.find(([re]) => re.test(e.message))?.[1]
  return [{ path: pathAt(doc, e.pos[0]), message: `not valid YAML: ${e.message.split('\n')[0]}${hint ? ` (${hint})` : ''}`, line: pos.line, column: pos.col }]
}

const YAML_HINTS: [RegExp, string][] = [
  [/Tabs are not allowed/, 'indent with spaces'],
  [/mapping items must start at the same column/, 'the keys of one mapping line up in one column'],
  [/Map keys must be unique/, 'a key may appear once per mapping'],
  [/Sequence item without - indicator/, 'each list item starts with "- " at the same column'],
  [/Missing closing/, 'close the quote on the same line'],
  [/must be sufficiently indented and end with a \]/, 'a [ list ] must be closed with ]'],
  [/Implicit map keys need to be followed by map values/, 'write "key: value", with a space after the colon'],
]

/** Validates config text; `file` names it in messages and anchors relative paths. */
export function parseConfig(text: string, file: string, env: NodeJS.ProcessEnv = process.env): Config {
  const lines = new LineCounter()
  const doc = parseDocument(text, { lineCounter: lines, prettyErrors: false, uniqueKeys: true })
  const lineOf = (path: readonly PropertyKey[]): number | undefined => {
    for (let n = path.length; n >= 0; n--) {
      const node = doc.getIn(path.slice(0, n) as unknown[], true) as { range?: [number, number] } | undefined
      if (node?.range) return lines.linePos(node.range[0]).line
    }
    return undefined
  }
  // a key's line is where the key is written (for a missing value, the line of its mapping)
  const keyLineOf = (path: readonly PropertyKey[]): number | undefined => {
    const parent = doc.getIn(path.slice(0, -1) as unknown[], true)
    if (isMap(parent)) {
      const pair = parent.items.find((p) => isScalar(p.key) && p.key.value === path[path.length - 1])
      const r = (pair?.key as { range?: [number, number] } | undefined)?.range
      if (r) return lines.linePos(r[0]).line
    }
    return lineOf(path)
  }
  if (doc.errors.length) throw new ConfigError(file, yamlProblems(doc, doc.errors, lines))
  const problems: ConfigProblem[] = []
  interpolate(doc, env, problems, lines)
  // a value left empty by an unset variable is reported once, as the variable
  const unset = new Set(problems.map((p) => p.path))

  let data: unknown
  try {
    // an alias with no anchor, or an alias bomb (yaml's maxAliasCount), throws here
    data = doc.toJS({ maxAliasCount: 100 })
  } catch (e) {
    throw new ConfigError(file, [{ path: '', message: `not valid YAML: ${(e as Error).message.split('\n')[0]}` }])
  }
  if (data !== undefined && data !== null && (typeof data !== 'object' || Array.isArray(data))) {
    throw new ConfigError(file, [{ path: '', message: `the file must be a mapping of keys (listen:, admin:, store:, routes:, ...), not ${Array.isArray(data) ? 'a list' : JSON.stringify(data)}`, line: 1 }])
  }
  const add = (path: readonly PropertyKey[], message: string, keyLine = false) => {
    const p = pathText(path)
    if (unset.has(p)) return
    problems.push({ path: p, message, line: keyLine ? keyLineOf(path) : lineOf(path) })
  }
  const parsed = configSchema.safeParse(data ?? {}, { reportInput: true })
  let config: Config | undefined
  if (parsed.success) {
    config = parsed.data
    for (const f of [...crossFindings({ listen: config.listen, adminListen: config.admin.listen, store: config.store, routes: config.routes.map((r, i) => [i, r]) }), ...leasePathFindings(config)]) add(f.path, f.message)
    // the TLS files are read and parsed now, so a config that validates can be served (contract §5b)
    resolveTlsPaths(config, dirname(resolve(file)))
    for (const f of tlsFileFindings(config)) add(f.path, f.message)
  } else {
    for (const issue of parsed.error.issues) {
      for (const d of describeIssue(issue, data)) add(d.path, d.message, issue.code === 'unrecognized_keys')
    }
    // what still can be checked: every field that validated, each route's and each section's
    const raw = (data ?? {}) as Record<string, unknown>
    const shape = configSchema.shape
    const routes: [number, RouteParts][] = []
    if (Array.isArray(raw.routes)) {
      raw.routes.forEach((r, i) => {
        const v = salvage(shape.routes.element, r) as RouteParts | null
        if (v) routes.push([i, v])
      })
    }
    const listen = salvage(shape.listen, raw.listen) as string | null
    const admin = salvage(shape.admin, raw.admin) as Parts<Config['admin']> | null
    const store = salvage(shape.store, raw.store) as Parts<Config['store']> | null
    const seen = new Set(problems.map((p) => `${p.path}: ${p.message}`))
    for (const f of crossFindings({ listen, adminListen: admin?.listen, store, routes })) {
      if (!seen.has(`${pathText(f.path)}: ${f.message}`)) add(f.path, f.message)
    }
    for (const f of tlsFileFindings(rawTlsBlocks(raw, dirname(resolve(file))))) add(f.path, f.message)
  }
  if (problems.length || !config) {
    problems.sort((a, b) => (a.line ?? 0) - (b.line ?? 0))
    throw new ConfigError(file, problems)
  }
  const { store } = config
  if (!isAbsolute(store.path)) store.path = resolve(dirname(resolve(file)), store.path)
  return config
}
