// The layout's rules (docs/architecture.md), read from the source with the TypeScript compiler:
// every `import`, `import type`, `export … from` and `import('…')` type of every src/**/*.ts(x)
// counts as an edge, types included, since a type circle ties modules together as tightly for a
// reader as a value circle does for the runtime.
import { readdirSync, readFileSync } from 'node:fs'
import { join, posix, relative, resolve } from 'node:path'
import ts from 'typescript'
import { describe, expect, test } from 'vitest'

const ROOT = resolve(import.meta.dirname, '../..')
const SRC = join(ROOT, 'src')

/** The longest a file in src/ may be, in lines. */
const MAX_LINES = 300

/**
 * Files that hold only SQL or Lua text, exempt from MAX_LINES: the PostgreSQL store's plpgsql
 * functions (live and legacy) and the Redis store's Lua scripts.
 */
const TEXT_FILES = [
  /^src\/store\/postgres\/(functions|legacy-functions)\.ts$/,
  /^src\/store\/redis\/lua\.ts$/,
]

function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const p = join(dir, e.name)
    if (e.isDirectory()) return sources(p)
    return /\.tsx?$/.test(e.name) && !e.name.endsWith('.d.ts') ? [p] : []
  })
}

/** repo-relative path, with forward slashes */
const rel = (abs: string): string => relative(ROOT, abs).split('\\').join('/')

const files = sources(SRC).map(rel).sort()
const known = new Set(files)

/** What `spec` names from `from`: a file in src/, or undefined for a package. */
function target(from: string, spec: string): string | undefined {
  if (!spec.startsWith('.')) return undefined
  const base = posix.normalize(posix.join(posix.dirname(from), spec))
  const stem = base.replace(/\.(js|jsx|ts|tsx)$/, '')
  for (const c of [`${stem}.ts`, `${stem}.tsx`, `${base}/index.ts`, `${base}/index.tsx`]) if (known.has(c)) return c
  throw new Error(`${from}: '${spec}' names no file in src/`)
}

/** Every module specifier of a file: imports, re-exports, `import('…')` types and calls. */
function specifiers(file: string): string[] {
  const text = readFileSync(join(ROOT, file), 'utf8')
  const pre = ts.preProcessFile(text, true, true)
  const out = pre.importedFiles.map((f) => f.fileName)
  // preProcessFile finds `import('x')` calls; an `import('x')` in a type position is found here
  const source = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, false, file.endsWith('.tsx') ? ts.ScriptKind.TSX : ts.ScriptKind.TS)
  const visit = (n: ts.Node): void => {
    if (ts.isImportTypeNode(n) && ts.isLiteralTypeNode(n.argument) && ts.isStringLiteral(n.argument.literal)) out.push(n.argument.literal.text)
    ts.forEachChild(n, visit)
  }
  visit(source)
  return [...new Set(out)]
}

const edges = new Map<string, string[]>(files.map((f) => [f, specifiers(f).map((s) => target(f, s)).filter((t): t is string => t !== undefined)]))

/** One import cycle, as the files around it (first repeated last), or undefined when there is none. */
function findCycle(): string[] | undefined {
  const state = new Map<string, 'open' | 'done'>()
  const stack: string[] = []
  const visit = (f: string): string[] | undefined => {
    state.set(f, 'open')
    stack.push(f)
    for (const t of edges.get(f) ?? []) {
      if (state.get(t) === 'open') return [...stack.slice(stack.indexOf(t)), t]
      if (state.get(t) === undefined) {
        const c = visit(t)
        if (c) return c
      }
    }
    stack.pop()
    state.set(f, 'done')
    return undefined
  }
  for (const f of files) {
    if (state.get(f) !== undefined) continue
    const c = visit(f)
    if (c) return c
  }
  return undefined
}

const inStore = (f: string): boolean => f.startsWith('src/store/')

describe('the layout of src/ (docs/architecture.md)', () => {
  test('reads every source file and its imports', () => {
    expect(files.length).toBeGreaterThan(100)
    expect(edges.get('src/store/index.ts')).toContain('src/store/contract/store.ts')
    // a type-only import and an import('…') type are edges too
    expect(edges.get('src/audit/report.ts')).toContain('src/store/index.ts')
  })

  test('no import cycle in src/, type imports counted', () => {
    // a cycle is printed as its files, the first repeated last
    expect(findCycle() ?? []).toEqual([])
  })

  test('outside src/store/, the store is imported from its face (src/store/index.ts) only', () => {
    const deep = files.filter((f) => !inStore(f)).flatMap((f) => edges.get(f)!.filter((t) => inStore(t) && t !== 'src/store/index.ts').map((t) => `${f} → ${t}`))
    expect(deep).toEqual([])
  })

  test('src/store/ imports nothing from src/audit/, and from above itself only config/schema, log, outcomes, traceless-error and telemetry/', () => {
    const above = files.filter(inStore).flatMap((f) => edges.get(f)!.filter((t) => !inStore(t)).map((t) => `${f} → ${t}`))
    expect(above.filter((e) => e.includes('→ src/audit/'))).toEqual([])
    const allowed = /→ src\/(config\/schema|log|outcomes|traceless-error|telemetry\/[a-z-]+)\.ts$/
    expect(above.filter((e) => !allowed.test(e))).toEqual([])
  })

  test('inside src/store/, nothing imports the face: the face is for the rest of the gateway', () => {
    const back = files.filter((f) => inStore(f) && f !== 'src/store/index.ts').filter((f) => edges.get(f)!.includes('src/store/index.ts'))
    expect(back).toEqual([])
  })

  test('the pg and ioredis clients are imported only inside their engine folders', () => {
    const drivers: Record<string, RegExp> = { 'pg': /^src\/store\/postgres\//, 'ioredis': /^src\/store\/redis\//, 'better-sqlite3': /^src\/store\/sqlite\//, 'dataloader': /^src\/store\/postgres\// }
    const stray = files.flatMap((f) => specifiers(f).filter((s) => s in drivers && !drivers[s].test(f)).map((s) => `${f} → ${s}`))
    expect(stray).toEqual([])
  })

  test(`no file in src/ over ${MAX_LINES} lines, but the SQL and Lua text files`, () => {
    const long = files
      .filter((f) => !TEXT_FILES.some((p) => p.test(f)))
      .map((f) => ({ f, lines: readFileSync(join(ROOT, f), 'utf8').split('\n').length - 1 }))
      .filter((x) => x.lines > MAX_LINES)
      .map((x) => `${x.f}: ${x.lines} lines`)
    expect(long).toEqual([])
  })
})
