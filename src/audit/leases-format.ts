/**
 * The lease report in words for people (`fencegate leases`): per route the numbers, then the
 * advice and the warnings. The figures and the advice are leases.ts's.
 */
import type { Config } from '../config/schema.js'
import { formatDuration } from '../config/units.js'
import { formatBrokerSettings } from './broker-settings.js'
import { human } from './human.js'
import type { LeaseReport } from './leases.js'

/** The report for people: per route, the numbers, then the advice and the warnings. */
export function formatLeases(report: LeaseReport, config?: Config): string {
  const out: string[] = [`fencegate leases  ${report.since} .. ${report.until}`, '']
  if (!report.routes.length) out.push(`(no fenced route${config ? ` in the config: routes ${config.routes.map((r) => r.name).join(', ')} have no fencing` : ''})`, '')
  const ms = (v: number | undefined) => (v === undefined ? '-' : human(v))
  for (const r of report.routes) {
    out.push(`route ${r.route}   (upstream.timeout ${formatDuration(r.configured.upstreamTimeoutMs)}${r.configured.idempotencyLeaseMs !== undefined ? `, idempotency.lease ${formatDuration(r.configured.idempotencyLeaseMs)}` : ''})`)
    const e = r.effects
    out.push(`  effects      ${e.count} answered, ${e.unanswered} unanswered   p50 ${ms(e.p50Ms)}  p99 ${ms(e.p99Ms)}  p99.9 ${ms(e.p999Ms)}  max ${ms(e.maxMs)}`)
    const g = r.generations
    out.push(`  generations  ${g.total} on ${g.resources} resource${g.resources === 1 ? '' : 's'}, ${g.handovers} handover${g.handovers === 1 ? '' : 's'} (${g.handoversPerHour}/h), median tenure ${ms(g.medianTenureMs)}`)
    const s = r.stale
    out.push(`  stale        ${s.count} (lateness measured for ${s.measured})   p50 ${ms(s.latenessP50Ms)}  p99 ${ms(s.latenessP99Ms)}  max ${ms(s.latenessMaxMs)}`)
    if (r.advice.minimumLeaseMs !== undefined) out.push(`  advice       lease ≥ ${formatDuration(r.advice.minimumLeaseMs)}, renew every ${formatDuration(r.advice.renewalIntervalMs!)}`)
    for (const l of r.advice.lines) out.push(`    - ${l}`)
    for (const w of r.advice.warnings) out.push(`    ! ${w}`)
    if (r.advice.brokers) out.push('  in the broker\'s words (the advised lease and renewal as each one\'s setting):', ...formatBrokerSettings(r.advice.brokers))
    out.push('')
  }
  out.push('how:')
  for (const m of report.method) out.push(`  - ${m}`)
  return out.join('\n')
}
