import { realpathSync } from 'node:fs'
import { fileURLToPath } from 'node:url'

/**
 * True when the module at `moduleUrl` (its `import.meta.url`) is the script node was started
 * with, following symlinks (npm's bin links): run its `main` then, not when it is imported.
 */
export function isMain(moduleUrl: string): boolean {
  if (!process.argv[1]) return false
  try {
    return realpathSync(process.argv[1]) === realpathSync(fileURLToPath(moduleUrl))
  } catch {
    return false
  }
}
