/**
 * CPU per request of two targets, paired: rounds alternate between them under the same load, and
 * the figure is the median of the rounds' ratios (B ÷ A), so a machine whose speed drifts over
 * minutes still compares them fairly. The load and the config are the shared benchmark's (wrk
 * -t1 -c50, a small JSON POST, nginx answering 201; a route without checks at /plain/*, one with
 * both at /accounts/:account/*); CPU is the target process's own user + system time, from /proc.
 *
 *   node dist/bench/cpu-pairs.js A B [--store memory|sqlite|redis|postgres] [--scenario plain|unique|replay]
 *        [--rounds 5] [--seconds 4] [--pin]
 *
 * A target is `floor` (./floor-proxy.ts), `answer:N` (./answer-floor.ts: a server answering the
 * upstream's 201 itself after N µs of its own work), `store-floor` (./store-floor.ts: the store's
 * work with no request path), `fencegate`, or either of the last two of another built checkout
 * as `fencegate:DIR`, `store-floor:DIR`; `fencegate-https` (or `fencegate-https:DIR`) is
 * fencegate with its proxy listener over TLS (`tls`, an EC P-256 certificate made by openssl)
 * and wrk speaking https to it, `floor-https` the floor over node:https with the same TLS
 * options: `fencegate fencegate-https` is what TLS costs fencegate a request, `floor floor-https`
 * what it costs Node itself. A fencegate target with `+settle` after its kind (`fencegate+settle`,
 * `fencegate+settle:DIR`, `fencegate-https+settle`) has the payments route settle unknown
 * outcomes (idempotency.settle, ./gateways.ts settleBlock): `fencegate fencegate+settle` is what
 * settle costs a request when nothing becomes unknown; with `+normal` (`fencegate+normal`) a SQLite
 * store runs with `synchronous: normal`: `fencegate+normal fencegate --store sqlite` is what the
 * durable default costs. `--pin` puts the targets on core 1 and wrk and nginx on
 * core 0 (taskset): steadier, but not how the shared benchmark runs. Needs wrk and nginx on PATH.
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process'
import { mkdtempSync, openSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import net from 'node:net'
import { settleBlock } from './gateways.js'

const here = resolve(fileURLToPath(import.meta.url), '../../..') // the checkout (dist/bench/ → ../..)
const argv = process.argv.slice(2)
const opt = (name: string, d: string) => { const i = argv.indexOf(`--${name}`); return i >= 0 ? argv[i + 1] : d }
const VALUED = new Set(['--store', '--scenario', '--rounds', '--seconds'])
const [targetA, targetB] = argv.filter((a, i) => !a.startsWith('--') && !VALUED.has(argv[i - 1]))
const store = opt('store', 'memory'), scenario = opt('scenario', 'unique')
const rounds = Number(opt('rounds', '5')), seconds = Number(opt('seconds', '4')), pin = argv.includes('--pin')
if (!targetA || !targetB) {
  process.stderr.write('usage: cpu-pairs A B [--store S] [--scenario plain|unique|replay] [--rounds N] [--seconds S] [--pin]\n')
  process.exit(2)
}

const dir = mkdtempSync(join(tmpdir(), 'fg-pairs-'))
const kids: ChildProcess[] = []
process.on('exit', () => {
  for (const k of kids) k.kill('SIGKILL')
  rmSync(dir, { recursive: true, force: true })
  if (store === 'redis') try { execFileSync('sh', ['-c', `redis-cli --scan --pattern '*fgpairs${process.pid}*' | xargs -r redis-cli del`], { stdio: 'ignore' }) } catch { /* gone */ }
})
const onCore = (core: number, cmd: string, args: string[]): [string, string[]] => (pin ? ['taskset', ['-c', String(core), cmd, ...args]] : [cmd, args])
const freePort = () => new Promise<number>((ok) => { const s = net.createServer().listen(0, '127.0.0.1', () => { const p = (s.address() as net.AddressInfo).port; s.close(() => ok(p)) }) })
async function waitPort(port: number): Promise<void> {
  for (let i = 0; i < 200; i++, await new Promise((r) => setTimeout(r, 100))) {
    if (await new Promise((ok) => { const c = net.connect(port, '127.0.0.1', () => { c.end(); ok(true) }); c.on('error', () => ok(false)) })) return
  }
  throw new Error(`nothing listens on ${port}`)
}
const cpuSeconds = (pid: number) => { const f = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' '); return (Number(f[11]) + Number(f[12])) / 100 }
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]

// the shared benchmark's request streams
const LUA: Record<string, string> = {
  plain: 'local n = 0\nrequest = function() n = n + 1\n return wrk.format("POST", "/plain/acct-" .. (n % 64) .. "/charges", { ["Content-Type"] = "application/json" }, \'{"amount":100,"currency":"eur"}\') end',
  unique: 'local n = 0\nlocal stamp = tostring(os.time()) .. "-" .. tostring(math.random(1000000))\nrequest = function() n = n + 1\n return wrk.format("POST", "/accounts/acct-" .. (n % 64) .. "/charges", { ["Content-Type"] = "application/json", ["Idempotency-Key"] = "k-" .. stamp .. "-" .. n, ["Fencing-Token"] = "7" }, \'{"amount":100,"currency":"eur"}\') end',
  replay: 'local n = 0\nrequest = function() n = n + 1\n local i = n % 64\n return wrk.format("POST", "/accounts/acct-" .. i .. "/charges", { ["Content-Type"] = "application/json", ["Idempotency-Key"] = "replay-" .. i, ["Fencing-Token"] = "7" }, \'{"amount":100,"currency":"eur"}\') end',
}
if (!LUA[scenario]) throw new Error(`--scenario must be plain, unique or replay, not ${scenario}`)
writeFileSync(join(dir, 'load.lua'), LUA[scenario])

interface Target { name: string; port: number; pid: number; scheme: 'http' | 'https' }

function load(t: Target, secs: number): { us: number; requests: number; non2xx: number } {
  const c0 = cpuSeconds(t.pid)
  const [cmd, args] = onCore(0, 'wrk', ['-t1', '-c50', `-d${secs}s`, '-s', join(dir, 'load.lua'), `${t.scheme}://127.0.0.1:${t.port}/`])
  const out = execFileSync(cmd, args, { encoding: 'utf8' })
  const requests = Number(/(\d+) requests in/.exec(out)?.[1] ?? 0)
  return { us: ((cpuSeconds(t.pid) - c0) * 1e6) / requests, requests, non2xx: Number(/Non-2xx or 3xx responses:\s+(\d+)/.exec(out)?.[1] ?? 0) }
}

async function startTarget(spec: string, tag: string, upstream: string): Promise<Target> {
  // KIND or KIND:ARG — a checkout's folder for fencegate and store-floor, µs of work for answer
  const colon = spec.indexOf(':')
  const head = colon < 0 ? spec : spec.slice(0, colon), arg = colon < 0 ? '' : spec.slice(colon + 1)
  // KIND+settle: the same target, its payments route with idempotency.settle
  // KIND+normal: the same target on SQLite with synchronous: normal (the risk accepted)
  const [kind, ...extras] = head.split('+')
  const settle = extras.includes('settle'), normal = extras.includes('normal')
  if (extras.some((e) => e !== 'settle' && e !== 'normal')) throw new Error(`a target's suffixes are +settle and +normal, not ${spec}`)
  if ((settle || normal) && kind !== 'fencegate' && kind !== 'fencegate-https') throw new Error(`+settle and +normal go with fencegate[:DIR] or fencegate-https[:DIR], not ${spec}`)
  const where = arg && kind !== 'answer' ? resolve(arg) : here
  const port = await freePort(), admin = await freePort()
  const storeBlock: Record<string, string> = {
    memory: 'kind: memory\n  maxRecords: 10000000', // a unique run never fills it: refusals would be cheaper than forwards
    sqlite: `kind: sqlite\n  path: ${join(dir, `${tag}.db`)}${normal ? '\n  synchronous: normal\n  acceptRisks: [synchronous]' : ''}`,
    redis: `kind: redis\n  url: redis://127.0.0.1:6379\n  keyPrefix: fgpairs${process.pid}${tag}`,
    postgres: 'kind: postgres\n  url: postgres://postgres@127.0.0.1:5432/test',
  }
  const https = kind === 'fencegate-https' || kind === 'floor-https'
  // the listener's certificate: EC P-256, as a cert-manager Certificate would issue by default
  if (https) execFileSync('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-keyout', join(dir, `${tag}-key.pem`), '-out', join(dir, `${tag}.pem`), '-days', '2', '-subj', '/CN=localhost', '-addext', 'subjectAltName=IP:127.0.0.1'], { stdio: 'ignore' })
  const tlsBlock = https ? `tls:\n  cert: ${join(dir, `${tag}.pem`)}\n  key: ${join(dir, `${tag}-key.pem`)}\n` : ''
  const yaml = join(dir, `${tag}.yaml`)
  writeFileSync(yaml, `listen: 127.0.0.1:${port}\n${tlsBlock}admin:\n  listen: 127.0.0.1:${admin}\nstore:\n  ${storeBlock[store]}\nroutes:
  - name: plain\n    match:\n      path: /plain/*\n    upstream:\n      url: ${upstream}
  - name: payments\n    match:\n      path: /accounts/:account/*\n    upstream:\n      url: ${upstream}\n    fencing:\n      resource: "account:{param.account}"\n    idempotency:\n      required: true\n${settle ? settleBlock('      ') : ''}`)
  const args = kind === 'floor' || kind === 'floor-https' ? [join(here, 'dist/bench/floor-proxy.js'), upstream, String(port)]
    : kind === 'answer' ? [join(here, 'dist/bench/answer-floor.js'), arg || '0', String(port)]
    : kind === 'store-floor' ? [join(where, 'dist/bench/store-floor.js'), yaml, upstream, String(port)]
      : kind === 'fencegate' || https ? [join(where, 'dist/src/cli.js'), '--config', yaml]
        : undefined
  if (!args) throw new Error(`a target is floor, answer[:WORK_US], store-floor[:DIR] or fencegate[+settle][:DIR], fencegate-https[+settle][:DIR] or floor-https, not ${spec}`)
  const [cmd, a] = onCore(1, process.execPath, args)
  const env = kind === 'floor-https' ? { ...process.env, FLOOR_TLS_CERT: join(dir, `${tag}.pem`), FLOOR_TLS_KEY: join(dir, `${tag}-key.pem`) } : process.env
  const child = spawn(cmd, a, { cwd: dir, env, stdio: ['pipe', 'ignore', openSync(join(dir, `${tag}.log`), 'w')] })
  kids.push(child)
  await waitPort(port)
  return { name: spec, port, pid: child.pid!, scheme: https ? 'https' : 'http' }
}

async function main(): Promise<void> {
  const up = await freePort()
  writeFileSync(join(dir, 'nginx.conf'), `master_process off; worker_processes 1; daemon off; pid ${dir}/nginx.pid; error_log ${dir}/nginx-error.log;
events { worker_connections 4096; }
http { access_log off; client_body_temp_path ${dir}/body; server { listen 127.0.0.1:${up}; keepalive_requests 1000000; location / { default_type application/json; return 201 '{"id":"ch_1","amount":100,"currency":"eur"}'; } } }`)
  const [ncmd, nargs] = onCore(0, 'nginx', ['-c', join(dir, 'nginx.conf')])
  kids.push(spawn(ncmd, nargs, { stdio: 'ignore' }))
  await waitPort(up)
  const a = await startTarget(targetA, 'A', `http://127.0.0.1:${up}`), b = await startTarget(targetB, 'B', `http://127.0.0.1:${up}`)
  load(a, 2); load(b, 2) // warm-up
  const ratios: number[] = [], usA: number[] = [], usB: number[] = []
  console.log(`${store} ${scenario}, ${rounds} rounds of ${seconds} s${pin ? ', pinned' : ''}: A = ${a.name}, B = ${b.name}`)
  for (let r = 0; r < rounds; r++) {
    // alternate which goes first, so neither always runs on a warmer or cooler machine
    const [x, y] = r % 2 === 0 ? [load(a, seconds), load(b, seconds)] : ((yb) => [load(a, seconds), yb])(load(b, seconds))
    usA.push(x.us); usB.push(y.us); ratios.push(y.us / x.us)
    console.log(`round ${r + 1}: A ${x.us.toFixed(1)} µs (${x.requests} requests, ${x.non2xx} not 2xx)  B ${y.us.toFixed(1)} µs (${y.requests}, ${y.non2xx})  B/A ${(y.us / x.us).toFixed(3)}`)
  }
  console.log(`median: A ${median(usA).toFixed(1)} µs, B ${median(usB).toFixed(1)} µs a request; B/A ${median(ratios).toFixed(3)}`)
}

main().then(() => process.exit(0), (e) => { console.error(`cpu-pairs: ${(e as Error).message}`); process.exit(1) })
