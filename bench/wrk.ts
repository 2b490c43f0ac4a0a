/**
 * wrk as the bench's load generator where it is installed (`BENCH_LOADGEN=autocannon` forces the
 * other): a process of its own, in C, so the load costs the machine far less than autocannon in
 * the harness's own process, which takes a core from the gateway on a 2-core box. Each scenario's
 * request stream is a Lua script; `done()` prints the figures the harness reads as one JSON line.
 */
import { execFile, execFileSync } from 'node:child_process'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'

/** Whether `wrk` is on PATH. */
export function wrkInstalled(): boolean {
  try {
    execFileSync('wrk', ['--version'], { stdio: 'ignore' })
    return true
  } catch (e) {
    // wrk --version exits 1 after printing its version
    return (e as { status?: number }).status === 1
  }
}

/**
 * One request stream: POST `body` to `paths` in turn, with `headers`; `key` adds a new
 * Idempotency-Key per request (`<key>-<n>`), `token` a Fencing-Token (the same one every time:
 * equal tokens are accepted, so 50 connections never race each other into a 412).
 */
export interface WrkStream {
  paths: readonly string[]
  headers: Record<string, string>
  body: string
  key?: string
  token?: string
}

/** What a run answered, in the shape the harness reads from autocannon. */
export interface WrkResult {
  requests: { average: number; total: number }
  latency: { p50: number; p99: number; p99_9: number }
  '2xx': number
  non2xx: number
  errors: number
  timeouts: number
  statusCodeStats: Record<string, { count: number }>
}

const lua = (s: string) => JSON.stringify(s) // a JSON string is a valid Lua string literal for these ASCII values

function script(stream: WrkStream): string {
  const headers = Object.entries(stream.headers).map(([k, v]) => `[${lua(k)}] = ${lua(v)}`).join(', ')
  return `local paths = { ${stream.paths.map(lua).join(', ')} }
local n = 0
local base = { ${headers} }
request = function()
  n = n + 1
  local h = {}
  for k, v in pairs(base) do h[k] = v end
  ${stream.key ? `h["Idempotency-Key"] = ${lua(stream.key)} .. "-" .. n` : ''}
  ${stream.token ? `h["Fencing-Token"] = ${lua(stream.token)}` : ''}
  return wrk.format("POST", paths[(n % #paths) + 1], h, ${lua(stream.body)})
end
-- response() runs in the thread's Lua state, done() in the main one: the counts are read back per thread
codes = {}
response = function(status) codes[status] = (codes[status] or 0) + 1 end
local threads = {}
setup = function(thread) threads[#threads + 1] = thread end
done = function(summary, latency, requests)
  local total = {}
  for _, t in ipairs(threads) do
    for code, count in pairs(t:get("codes")) do total[code] = (total[code] or 0) + count end
  end
  local parts = {}
  for code, count in pairs(total) do parts[#parts + 1] = string.format('"%d":%d', code, count) end
  io.write(string.format('\\nWRK {"requests":%d,"seconds":%f,"p50":%f,"p99":%f,"p999":%f,"connect":%d,"read":%d,"write":%d,"timeout":%d,"status":%d,"codes":{%s}}\\n',
    summary.requests, summary.duration / 1e6, latency:percentile(50) / 1000, latency:percentile(99) / 1000, latency:percentile(99.9) / 1000,
    summary.errors.connect, summary.errors.read, summary.errors.write, summary.errors.timeout, summary.errors.status, table.concat(parts, ",")))
end
`
}

/** Runs wrk -t1 with `connections` for `seconds` against `url` with `stream`. */
export async function wrkLoad(url: string, stream: WrkStream, seconds: number, connections: number): Promise<WrkResult> {
  const dir = mkdtempSync(join(tmpdir(), 'fg-wrk-'))
  try {
    writeFileSync(join(dir, 'stream.lua'), script(stream))
    const out = await new Promise<string>((ok, fail) => {
      execFile('wrk', ['-t1', `-c${connections}`, `-d${seconds}s`, '--timeout', '10s', '-s', join(dir, 'stream.lua'), url], { maxBuffer: 1 << 20 }, (e, stdout, stderr) => (e ? fail(new Error(`wrk failed: ${stderr || e.message}`)) : ok(stdout)))
    })
    const line = /^WRK (\{.*\})$/m.exec(out)
    if (!line) throw new Error(`wrk printed no summary: ${out.slice(-500)}`)
    const w = JSON.parse(line[1]) as { requests: number; seconds: number; p50: number; p99: number; p999: number; connect: number; read: number; write: number; timeout: number; codes: Record<string, number> }
    const statusCodeStats: Record<string, { count: number }> = {}
    let ok2xx = 0
    let other = 0
    for (const [code, count] of Object.entries(w.codes)) {
      statusCodeStats[code] = { count }
      if (code.startsWith('2')) ok2xx += count
      else other += count
    }
    return {
      requests: { average: w.requests / w.seconds, total: w.requests },
      latency: { p50: round(w.p50), p99: round(w.p99), p99_9: round(w.p999) },
      '2xx': ok2xx, non2xx: other, errors: w.connect + w.read + w.write, timeouts: w.timeout, statusCodeStats,
    }
  } finally {
    rmSync(dir, { recursive: true, force: true })
  }
}

const round = (ms: number) => Math.round(ms * 100) / 100
