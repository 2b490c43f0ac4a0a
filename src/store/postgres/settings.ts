/**
 * The PostgreSQL settings probe of `fencegate doctor` (../doctor/inspect.ts): synchronous_commit, fsync,
 * synchronous_standby_names and the standbys streaming (pg_stat_replication), pg_is_in_recovery(),
 * and the schema's loss note when a gateway left one (../state-loss/note.ts).
 */
import { shortfall } from './standbys.js'
import pg from 'pg'
import { pgConnection, storeTlsOptions } from '../shared/tls.js'
import type { Config } from '../../config/schema.js'
import type { Finding } from '../doctor/findings.js'
import { decodeNote } from '../state-loss/note.js'
import { lossFinding } from '../doctor/loss.js'
import { quoted } from './migrate.js'
import { queries } from './queries.js'

/** @throws Error when the server cannot be reached */
export async function postgresFindings(config: Config['store']): Promise<Finding[]> {
  const client = new pg.Client({ ...pgConnection(config.url!, storeTlsOptions(config)), connectionTimeoutMillis: Math.max(config.timeout, 1000), fallback_application_name: 'fencegate doctor' })
  client.on('error', () => {})
  await client.connect()
  try {
    const show = async (name: string) => String((await client.query(`SHOW ${name}`)).rows[0][name])
    const syncCommit = await show('synchronous_commit')
    const fsync = await show('fsync')
    const standbyNames = await show('synchronous_standby_names')
    const inRecovery = (await client.query('SELECT pg_is_in_recovery() AS r')).rows[0].r === true
    // rows are visible without privileges; a role without pg_monitor sees them with empty details
    const streaming = inRecovery ? 0 : Number((await client.query('SELECT count(*)::int AS n FROM pg_stat_replication').catch(() => ({ rows: [{ n: NaN }] }))).rows[0].n)
    const out: Finding[] = []
    out.push(inRecovery
      ? { id: 'recovery', status: 'risk', setting: 'pg_is_in_recovery() true', consequence: 'This PostgreSQL is a standby (read-only): every write fails, so fenced and idempotent requests fail closed (503). Point store.url at the primary.' }
      : { id: 'recovery', status: 'ok', setting: 'pg_is_in_recovery() false', consequence: 'A primary: it takes the writes.' })
    out.push(fsync === 'on'
      ? { id: 'fsync', status: 'ok', setting: 'fsync on', consequence: 'Committed data reaches the disk: a crash of the PostgreSQL host keeps every mark and record it acknowledged.' }
      : { id: 'fsync', status: 'risk', setting: `fsync ${fsync}`, consequence: 'PostgreSQL does not force its writes to disk: a crash or power loss of its host can lose or corrupt committed marks and records (a stale write can then pass, a retry be forwarded again).' })
    out.push(syncCommit === 'off'
      ? { id: 'synchronous_commit', status: 'risk', setting: 'synchronous_commit off', consequence: 'PostgreSQL answers a commit before it is on disk: a crash can lose the last moments of acknowledged marks and records (up to three times wal_writer_delay), and the loss is not detected.' }
      : { id: 'synchronous_commit', status: 'ok', setting: `synchronous_commit ${syncCommit}`, consequence: 'A commit is on disk (in the WAL) before PostgreSQL answers: a crash keeps every acknowledged mark and record.' })
    const waits = standbyNames !== '' && (syncCommit === 'on' || syncCommit === 'remote_write' || syncCommit === 'remote_apply')
    const short = config.replicas > 0 ? shortfall(config.replicas, standbyNames, syncCommit) : undefined
    if (inRecovery) {
      // a standby's own standbys say nothing about where the writes go
    } else if (short) {
      out.push({ id: 'standbys', status: 'risk', setting: `synchronous_standby_names '${standbyNames}', synchronous_commit ${syncCommit}, store.replicas ${config.replicas}`, consequence: `${short}: every fenced or idempotent request is refused with 503 until enough synchronous standbys are configured (the gateway reads the settings every minute).` })
    } else if (waits) {
      out.push({ id: 'standbys', status: 'ok', setting: `synchronous_standby_names '${standbyNames}', synchronous_commit ${syncCommit}`, consequence: `Commits wait for the synchronous standby${syncCommit === 'remote_write' ? ' to have them in memory (remote_write: not yet on its disk)' : ''}: a failover to it keeps every acknowledged mark and record.` })
    } else if (standbyNames !== '') {
      out.push({ id: 'standbys', status: 'risk', setting: `synchronous_standby_names '${standbyNames}', synchronous_commit ${syncCommit}`, consequence: `synchronous_commit ${syncCommit} does not wait for the standbys: a failover can lose the last commits, and a mark that falls back lets a stale write pass.` })
    } else if (streaming > 0) {
      out.push({ id: 'standbys', status: 'risk', setting: `synchronous_standby_names '', ${streaming} standby${streaming === 1 ? '' : 's'} streaming`, consequence: 'The standbys replicate asynchronously: a failover to one can lose the last commits — marks fall back (a stale write can pass), records vanish (a retry is forwarded again). fencegate treats the promotion (a new timeline) as state loss — 503 store-state-lost until accept-loss — and a store behind what a gateway saw refuses its writes; set store.replicas with synchronous standbys to fail over without loss.' })
    } else {
      out.push({ id: 'standbys', status: 'ok', setting: `synchronous_standby_names '', ${Number.isNaN(streaming) ? 'standbys not visible' : 'no standby streaming'}`, consequence: 'No standby to fail over to (none seen): nothing is lost to a failover; while PostgreSQL is down, fenced routes answer 503. If a standby is added later, make it synchronous.' })
    }
    // the schema's loss note (../state-loss/note.ts); a schema not made yet has none
    const noted = await client.query(queries(quoted(config.schema)).lossNote).catch(() => ({ rows: [] as { value: string }[] }))
    const note = decodeNote(noted.rows[0]?.value)
    if (note) out.push(lossFinding(note))
    return out
  } finally {
    await client.end().catch(() => {})
  }
}
