/**
 * A private PostgreSQL primary and streaming standby for the failover tests, in temp folders on
 * free ports, run as the `postgres` user (initdb refuses root). The gateways speak to one port;
 * a failover stops the primary and starts the promoted standby on that same port, as a moved
 * service address would. Binaries: /usr/lib/postgresql/15/bin (PG_BIN to override).
 */
import { appendFileSync, chmodSync, chownSync, mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs'
import { execFileSync } from 'node:child_process'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { run } from '../helpers/run.js'

const BIN = process.env.PG_BIN ?? '/usr/lib/postgresql/15/bin'
const uid = Number(execFileSync('id', ['-u', 'postgres']).toString().trim())
const gid = Number(execFileSync('id', ['-g', 'postgres']).toString().trim())

// initdb sends its helpers' output to /dev/null; where that is not writable by other users (some
// containers), it runs in a mount namespace of its own with a file of ours bound over it
const devNullShut = (statSync('/dev/null').mode & 0o002) === 0

/** Runs a PostgreSQL program as the postgres user. @throws Error naming its exit and stderr */
async function pg(program: string, args: string[], root?: string): Promise<string> {
  const argv = ['-u', 'postgres', '--', join(BIN, program), ...args]
  let r
  if (devNullShut && root) {
    const sink = join(root, 'devnull')
    writeFileSync(sink, '', { mode: 0o666 })
    chmodSync(sink, 0o666)
    r = await run('unshare', ['--mount', 'sh', '-c', 'mount --bind "$0" /dev/null && exec runuser "$@"', sink, ...argv], { timeout: 60_000 })
  } else {
    r = await run('runuser', argv, { timeout: 60_000 })
  }
  if (r.status !== 0) throw new Error(`${program} ${args.join(' ')} exited ${r.status}: ${r.stderr}${r.stdout}`)
  return r.stdout
}

export interface Node {
  dir: string
  port: number
}

export class PgPair {
  readonly root = mkdtempSync(join(tmpdir(), 'fg-pg-'))
  primary: Node
  standby: Node

  /** `port`: where the gateways connect (the primary's, later the promoted standby's) */
  constructor(readonly port: number, standbyPort: number) {
    chownSync(this.root, uid, gid)
    this.primary = { dir: join(this.root, 'primary'), port }
    this.standby = { dir: join(this.root, 'standby'), port: standbyPort }
  }

  get url(): string {
    return `postgres://postgres@127.0.0.1:${this.port}/postgres`
  }

  /** initdb, start the primary, base-backup and start the standby; `sync`: commits wait for it */
  async start(options: { sync: boolean }): Promise<void> {
    await pg('initdb', ['-D', this.primary.dir, '-A', 'trust', '-U', 'postgres', '--no-sync'], this.root)
    appendFileSync(join(this.primary.dir, 'postgresql.conf'), [
      "listen_addresses = '127.0.0.1'", `unix_socket_directories = '${this.root}'`, 'wal_level = replica', 'max_wal_senders = 4',
      'fsync = off', 'full_page_writes = off', 'shared_buffers = 16MB', 'max_connections = 40', "synchronous_commit = 'on'",
      options.sync ? "synchronous_standby_names = '*'" : "synchronous_standby_names = ''", '',
    ].join('\n'))
    await this.#start(this.primary)
    await pg('pg_basebackup', ['-h', '127.0.0.1', '-p', String(this.primary.port), '-U', 'postgres', '-D', this.standby.dir, '-R', '-X', 'stream', '--no-sync'])
    await this.#start(this.standby)
  }

  async #start(n: Node): Promise<void> {
    await pg('pg_ctl', ['-D', n.dir, '-o', `-p ${n.port}`, '-l', join(n.dir, 'log'), '-w', '-t', '30', 'start'])
  }

  /** Stops a node: `immediate` is a crash (no shutdown checkpoint, nothing more sent to the standby). */
  async stop(n: Node, mode: 'fast' | 'immediate' = 'fast'): Promise<void> {
    await pg('pg_ctl', ['-D', n.dir, '-m', mode, '-w', 'stop'])
  }

  /**
   * The failover: the primary crashes, the standby starts on the gateways' port (the standby was
   * stopped before, or is restarted there) and is promoted. Its primary_conninfo points at that
   * port, now its own: it streams nothing more.
   */
  async failover(): Promise<void> {
    await this.stop(this.primary, 'immediate').catch(() => { /* already down */ })
    await this.stop(this.standby, 'fast').catch(() => { /* already down */ })
    writeFileSync(join(this.standby.dir, 'postgresql.auto.conf'), "primary_conninfo = ''\n")
    chownSync(join(this.standby.dir, 'postgresql.auto.conf'), uid, gid)
    this.standby = { dir: this.standby.dir, port: this.port }
    await this.#start(this.standby)
    await pg('pg_ctl', ['-D', this.standby.dir, '-w', 'promote'])
  }

  /** A new standby of the promoted one, so that its synchronous commits have one to wait for. */
  async newStandby(port: number): Promise<void> {
    const n = { dir: join(this.root, 'standby2'), port }
    await pg('pg_basebackup', ['-h', '127.0.0.1', '-p', String(this.port), '-U', 'postgres', '-D', n.dir, '-R', '-X', 'stream', '--no-sync'])
    await this.#start(n)
    this.primary = n
  }

  /** Stops every node still running and removes the folders. */
  async close(): Promise<void> {
    for (const dir of ['primary', 'standby', 'standby2']) {
      await pg('pg_ctl', ['-D', join(this.root, dir), '-m', 'immediate', '-w', 'stop']).catch(() => {})
    }
    rmSync(this.root, { recursive: true, force: true })
  }
}

/** Runs a PostgreSQL program as the postgres user (for clusters other tests set up their own way). */
export const pgProgram = pg
export const pgOwner = { uid, gid }
