/**
 * Loads a config file: YAML → `${ENV}` / `${ENV:-default}` interpolation in string values →
 * schema validation → checks across fields (unique route names, templates) → paths made
 * relative to the config file's folder.
 */
import { readFileSync } from 'node:fs'
import { dirname, isAbsolute, resolve } from 'node:path'
import { isMap, isScalar, isSeq, LineCounter, parseDocument, type Document } from 'yaml'
import { configSchema, type Config } from './schema.js'
import { compileTemplate, pathParams } from './template.js'

/** One mistake in a config: its YAML path (e.g. `routes[0].upstream.timeout`) and what is wrong. */
export interface ConfigProblem {
  path: string
  message: string
  /** 1-based line in the file, when the path exists there */
  line?: number
}

/** Thrown when a config cannot be used; `problems` has one entry per mistake. */
export class ConfigError extends Error {
  constructor(readonly file: string, readonly problems: ConfigProblem[]) {
    super(problems.map((p) => formatProblem(file, p)).join('\n'))
    this.name = 'ConfigError'
  }
}

export const formatProblem = (file: string, p: ConfigProblem): string =>
  `${file}${p.line ? `:${p.line}` : ''}: ${p.path || '(top level)'}: ${p.message}`

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
  if (doc.errors.length) {
    throw new ConfigError(file, doc.errors.map((e) => ({ path: '', message: `not valid YAML: ${e.message.split('\n')[0]}`, line: e.linePos?.[0]?.line })))
  }
  const problems: ConfigProblem[] = []
  interpolate(doc, env, problems, lines)
  if (problems.length) throw new ConfigError(file, problems)

  let data: unknown
  try {
    // an alias with no anchor, or an alias bomb (yaml's maxAliasCount), throws here
    data = doc.toJS({ maxAliasCount: 100 })
  } catch (e) {
    throw new ConfigError(file, [{ path: '', message: `not valid YAML: ${(e as Error).message.split('\n')[0]}` }])
  }
  const parsed = configSchema.safeParse(data ?? {})
  if (!parsed.success) {
    for (const issue of parsed.error.issues) {
      const keys = issue.code === 'unrecognized_keys' ? issue.keys : [undefined]
      for (const k of keys) {
        const path = k === undefined ? issue.path : [...issue.path, k]
        const message = k === undefined ? issue.message : 'unknown key'
        problems.push({ path: pathText(path), message, line: lineOf(path) })
      }
    }
    throw new ConfigError(file, problems)
  }
  const config = parsed.data
  const seen = new Map<string, number>()
  config.routes.forEach((r, i) => {
    const at = (...p: PropertyKey[]) => ({ path: pathText(['routes', i, ...p]), line: lineOf(['routes', i, ...p]) })
    if (seen.has(r.name)) problems.push({ ...at('name'), message: `route name "${r.name}" is already used by routes[${seen.get(r.name)}]` })
    else seen.set(r.name, i)
    const params = pathParams(r.match.path)
    const check = (text: string, ...p: PropertyKey[]) => {
      try { compileTemplate(text, params) } catch (e) { problems.push({ ...at(...p), message: (e as Error).message }) }
    }
    if (r.fencing) check(r.fencing.resource, 'fencing', 'resource')
    if (r.idempotency) {
      const { lease, ttl } = r.idempotency
      // a request still in flight past its lease is taken for crashed: its result would be lost
      if (lease < r.upstream.timeout) {
        problems.push({ ...at('idempotency', 'lease'), message: `lease (${lease} ms) must be at least upstream.timeout (${r.upstream.timeout} ms): a request still waiting for the upstream would be taken for crashed and its response lost` })
      }
      // an in-flight record that expires frees the key while the first request is still upstream
      if (ttl < lease) {
        problems.push({ ...at('idempotency', 'ttl'), message: `ttl (${ttl} ms) must be at least lease (${lease} ms): the key would be forgotten while its first request is still in flight` })
      }
    }
    if (r.idempotency) check(r.idempotency.scope, 'idempotency', 'scope')
  })
  const { store } = config
  if ((store.kind === 'redis' || store.kind === 'postgres') && !store.url) {
    problems.push({ path: 'store.url', message: `store.kind ${store.kind} needs store.url`, line: lineOf(['store']) })
  } else if (store.kind === 'redis' && !/^rediss?:\/\/./.test(store.url!)) {
    problems.push({ path: 'store.url', message: 'store.kind redis needs a redis:// or rediss:// URL', line: lineOf(['store', 'url']) })
  } else if (store.kind === 'postgres' && !/^postgres(ql)?:\/\/./.test(store.url!)) {
    problems.push({ path: 'store.url', message: 'store.kind postgres needs a postgres:// or postgresql:// URL', line: lineOf(['store', 'url']) })
  }
  if (problems.length) throw new ConfigError(file, problems)
  if (!isAbsolute(store.path)) store.path = resolve(dirname(resolve(file)), store.path)
  return config
}
