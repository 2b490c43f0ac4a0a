// Every relative link in README.md and docs/*.md leads somewhere: the file exists and, for a
// Markdown target, the #anchor names one of its headings (GitHub's slugs). The README is a front
// page whose reader follows links into docs/; a page moved or a heading renamed must not leave
// a dead one behind.
import { existsSync, readFileSync, readdirSync } from 'node:fs'
import { dirname, join, relative, resolve } from 'node:path'
import { describe, expect, it } from 'vitest'

const root = resolve(import.meta.dirname, '..')
const pages = ['README.md', ...readdirSync(join(root, 'docs')).filter((f) => f.endsWith('.md')).map((f) => `docs/${f}`)]

/** the text outside fenced code blocks, where a `[x](y)` is not a link */
function prose(markdown: string): string {
  return markdown.replace(/^(```|~~~)[^\n]*\n[\s\S]*?^\1[^\n]*$/gm, '')
}

/** GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens, repeats numbered */
function anchors(markdown: string): Set<string> {
  const seen = new Map<string, number>()
  const out = new Set<string>()
  for (const [, text] of prose(markdown).matchAll(/^#{1,6}[ \t]+(.+?)[ \t#]*$/gm)) {
    const base = text.toLowerCase().replace(/[^\p{L}\p{N}_\- ]/gu, '').replace(/ /g, '-')
    const n = seen.get(base) ?? 0
    seen.set(base, n + 1)
    out.add(n === 0 ? base : `${base}-${n}`)
  }
  return out
}

/** [label](target) links whose target is in this repository */
function relativeLinks(markdown: string): string[] {
  return [...prose(markdown).matchAll(/\]\(([^)\s]+)\)/g)].map((m) => m[1]).filter((t) => !/^[a-z][a-z0-9+.-]*:/i.test(t))
}

describe('documentation links', () => {
  it('finds the pages and their links', () => {
    expect(pages).toContain('docs/configure.md')
    expect(relativeLinks(readFileSync(join(root, 'README.md'), 'utf8')).length).toBeGreaterThan(10)
  })

  it('reads GitHub anchors as GitHub makes them', () => {
    const a = anchors('# Worker processes: `--workers N`\n## Redis replicas and failover (`store.replicas`)\n## Redis\n## Redis\n```\n# not a heading\n```\n')
    expect([...a]).toEqual(['worker-processes---workers-n', 'redis-replicas-and-failover-storereplicas', 'redis', 'redis-1'])
  })

  for (const page of pages) {
    it(`${page}: every relative link and anchor resolves`, () => {
      const text = readFileSync(join(root, page), 'utf8')
      const dead: string[] = []
      for (const link of relativeLinks(text)) {
        const [path, anchor] = link.split('#', 2) as [string, string | undefined]
        const target = path === '' ? join(root, page) : resolve(dirname(join(root, page)), decodeURIComponent(path))
        if (!existsSync(target)) { dead.push(`${link}: no file ${relative(root, target)}`); continue }
        if (anchor !== undefined && target.endsWith('.md') && !anchors(readFileSync(target, 'utf8')).has(anchor)) dead.push(`${link}: no heading #${anchor} in ${relative(root, target)}`)
      }
      expect(dead).toEqual([])
    })
  }
})
