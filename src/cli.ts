#!/usr/bin/env node
/**
 * The `fencegate` command: reads the command line and runs one command. Every command's usage
 * is in cli/commands.ts (`fencegate help COMMAND`, `fencegate COMMAND --help`); the config comes
 * from --config, else $FENCEGATE_CONFIG, else ./config/fencegate.yaml. start is in cli/start.ts,
 * check-config in cli/check-config.ts, the commands that read the store in audit/cli.ts.
 *
 * Exit codes, the same for every command: 0 ok; 1 runtime failure (the store cannot answer, a
 * record cannot be resolved, an unexpected error); 2 usage or config mistake (a misspelt
 * command or flag, a config that does not validate, a port that cannot be had, a SQLite path
 * that cannot be opened). With --json, an error is printed as one JSON object on stdout:
 * {"error": {"type": "usage" | "config" | "runtime", "message", "problems"?}}.
 */
// first: starts tracing when OTEL_* asks for it, before the gateway serves anything
import './telemetry/bootstrap.js'
import { formatProblem } from './config/load.js'
import { migrateStore } from './store/index.js'
import { VERSION } from './version.js'
import { acceptLossCommand, auditCommand, doctorCommand, leasesCommand, resolveCommand, unknownCommand } from './audit/cli.js'
import { didYouMean } from './suggest.js'
import { COMMANDS, commandHelp, overview, storeOverview } from './cli/commands.js'
import { commandOf, configFile, flagsOf, readConfig } from './cli/args.js'
import { done, Exit, finish, usageError } from './cli/exit.js'
import { checkConfig } from './cli/check-config.js'
import { start } from './cli/start.js'

async function main(argv: string[]): Promise<void> {
  if (argv[0] === '-v' || argv[0] === '--version') { process.stdout.write(`fencegate ${VERSION}\n`); return }
  if (argv.length === 1 && (argv[0] === '-h' || argv[0] === '--help')) { process.stdout.write(`${overview()}\n`); return }
  const { name, rest } = commandOf(argv)
  if (name === 'store') { process.stdout.write(`${storeOverview()}\n`); return }
  const { values, positionals } = flagsOf(name, rest)
  if (values.version) { process.stdout.write(`fencegate ${VERSION}\n`); return }
  if (name === 'help') {
    const topic = positionals.join(' ')
    if (!topic) { process.stdout.write(`${overview()}\n`); return }
    if (topic === 'store') return main(['store'])
    if (!COMMANDS[topic]) throw usageError(`no command "${topic}"${didYouMean(topic, Object.keys(COMMANDS))}`, 'fencegate help lists the commands')
    process.stdout.write(`${commandHelp(topic)}\n`)
    return
  }
  if (values.help) { process.stdout.write(`${commandHelp(name)}\n`); return }

  const file = configFile(values)
  const config = readConfig(file)
  switch (name) {
    case 'check-config': return checkConfig(config, file, values)
    case 'audit': return done(await auditCommand(config, values))
    case 'resolve': return done(await resolveCommand(config, values))
    case 'unknown': return done(await unknownCommand(config, values))
    case 'leases': return done(await leasesCommand(config, values))
    case 'doctor': {
      const r = await doctorCommand(config, values, file)
      for (const w of r.warnings) process.stderr.write(`${w}\n`)
      if (r.stdout) process.stdout.write(r.stdout)
      if (r.code === 0) return
      // the report is out: a refusal says why on stderr (in --json the report's "refused" does)
      if (!r.stdout) throw new Exit(r.code, 'runtime', r.stderr ?? [])
      if (!values.json) for (const l of r.stderr ?? []) process.stderr.write(`${l}\n`)
      process.exitCode = r.code
      return
    }
    case 'store accept-loss': return done(await acceptLossCommand(config, values))
    case 'migrate': {
      try {
        process.stdout.write(`${file}: ${await migrateStore(config.store)}\n`)
      } catch (e) {
        throw new Exit(1, 'runtime', [formatProblem(file, { path: 'store', message: (e as Error).message })])
      }
      return
    }
    case 'start': return start(config, file, values)
  }
}

const argv = process.argv.slice(2)
main(argv).catch((e) => {
  const json = argv.includes('--json')
  if (e instanceof Exit) finish(e, json)
  finish(new Exit(1, 'runtime', [`fencegate: ${(e as Error).message}`]), json)
})
