/**
 * Reads the command line: which command, its flags (strictly, with a suggestion for a misspelt
 * one), and which config file. Every mistake is an Exit 2 naming the right usage.
 */
import { parseArgs } from 'node:util'
import { existsSync } from 'node:fs'
import { loadConfig, ConfigError, formatProblem } from '../config/load.js'
import type { Config } from '../config/schema.js'
import { didYouMean } from '../suggest.js'
import { COMMANDS, FLAGS, STORE_SUBCOMMANDS, type Flag, type Options, type Values } from './commands.js'
import { Exit, usageError } from './exit.js'

/** Splits argv into the command's name and the rest; throws Exit for an unknown command. */
export function commandOf(argv: string[]): { name: string; rest: string[] } {
  // positionals as a loose parse sees them (so a flag's value is not taken for a command)
  const loose = parseArgs({ args: argv, options: FLAGS, strict: false, allowPositionals: true, tokens: true })
  const positionals = loose.tokens.filter((t) => t.kind === 'positional')
  const first = positionals[0]
  if (!first) return { name: 'start', rest: argv }
  // "--confg x.yaml": x.yaml is the value of a misspelt flag, not a command; the strict parse names the flag
  const before = loose.tokens.find((t) => t.index === first.index - 1)
  if (!COMMANDS[first.value] && first.value !== 'store' && before?.kind === 'option' && !(before.name in FLAGS) && before.inlineValue === undefined) return { name: 'start', rest: argv }
  const without = (...idx: number[]) => argv.filter((_, i) => !idx.includes(i))
  if (first.value === 'store') {
    const sub = positionals[1]
    if (!sub) return { name: 'store', rest: without(first.index) }
    if (!STORE_SUBCOMMANDS.includes(sub.value)) {
      throw usageError(`unknown store command "${sub.value}"${didYouMean(sub.value, STORE_SUBCOMMANDS)}`, `store commands: ${STORE_SUBCOMMANDS.join(', ')} (fencegate help store ${STORE_SUBCOMMANDS[0]})`)
    }
    return { name: `store ${sub.value}`, rest: without(first.index, sub.index) }
  }
  if (COMMANDS[first.value]) return { name: first.value, rest: without(first.index) }
  const names = Object.keys(COMMANDS).filter((c) => !c.includes(' ')).concat(['store'])
  throw usageError(`unknown command "${first.value}"${didYouMean(first.value, names)}`, 'fencegate help lists the commands')
}

/** Parses a command's flags strictly; a flag the command does not take is a usage error with a suggestion. */
export function flagsOf(name: string, rest: string[]): { values: Values; positionals: string[] } {
  const allowed: Flag[] = [...COMMANDS[name].flags, 'help', 'version']
  const options = Object.fromEntries(allowed.map((f) => [f, FLAGS[f]])) as Options
  try {
    const r = parseArgs({ args: rest, options, allowPositionals: name === 'help', strict: true })
    return { values: r.values as Values, positionals: r.positionals }
  } catch (e) {
    const err = e as Error & { code?: string }
    const hint = `usage: ${COMMANDS[name].usage.join('\n       ')}\n(fencegate help ${name})`
    const unknown = /^Unknown option '(-{1,2})([^']+)'/.exec(err.message)
    if (unknown) {
      const flag = unknown[2]
      const near = didYouMean(flag, allowed, (s) => `--${s}`)
      const elsewhere = flag in FLAGS && !near ? `; --${flag} is a flag of ${Object.entries(COMMANDS).filter(([, c]) => c.flags.includes(flag as Flag)).map(([n]) => n).join(', ')}` : ''
      throw usageError(`${name} has no flag ${unknown[1]}${flag}${near}${elsewhere}`, hint)
    }
    const positional = /^Unexpected argument '([^']+)'/.exec(err.message)
    if (positional) throw usageError(`${name} takes no argument "${positional[1]}"`, hint)
    const missing = /^Option '(-\w, )?(--[\w-]+) <value>' argument missing/.exec(err.message)
    if (missing) throw usageError(`${missing[2]} needs ${valueOf(missing[2])}`, hint)
    const ambiguous = /^Option '(-\w, )?(--[\w-]+)' argument is ambiguous/.exec(err.message)
    if (ambiguous) throw usageError(`${ambiguous[2]} needs ${valueOf(ambiguous[2])}, and what follows it is another flag (a value that starts with "-" is written ${ambiguous[2]}=-VALUE)`, hint)
    throw usageError(err.message, hint)
  }
}

/** What a flag's value is, for the message when it is missing. */
const valueOf = (flag: string): string =>
  flag === '--with-sample' ? 'the sample\'s module (the bundled one: --with-sample dist/examples/payments/server.js)' : 'a value'

/** The config file: --config, else $FENCEGATE_CONFIG, else ./config/fencegate.yaml if it exists. */
export function configFile(values: Values): string {
  const file = values.config ?? process.env.FENCEGATE_CONFIG ?? (existsSync('config/fencegate.yaml') ? 'config/fencegate.yaml' : undefined)
  if (!file) throw new Exit(2, 'usage', ['fencegate: no config: pass --config PATH or set FENCEGATE_CONFIG'])
  return file
}

/** Loads and validates the config; every problem, one line each, is an Exit 2. */
export function readConfig(file: string): Config {
  try {
    return loadConfig(file)
  } catch (e) {
    if (e instanceof ConfigError) throw new Exit(2, 'config', e.problems.map((p) => formatProblem(file, p)), e.problems, file)
    throw e
  }
}
