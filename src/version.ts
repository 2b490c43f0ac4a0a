import { readFileSync } from 'node:fs'

/** The package version, for `fencegate_build_info` and `--version`. */
export const VERSION: string = (() => {
  try {
    return JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')).version
  } catch {
    return 'unknown'
  }
})()
