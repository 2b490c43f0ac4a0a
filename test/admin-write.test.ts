// Issue 15 §1: admin write actions (POST /resolve, POST /store/accept-loss) need their own
// token, admin.writeToken, and answer 403 without one configured; who and why go to the attempt
// log; an admin listener beyond loopback without admin.token is warned about at start.
import { rmSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { afterEach, describe, expect, test } from 'vitest'
import { gatewayConfig, startTestGateway, tempDir, type ConfigInput, type RouteSpec, type StoreInput, type TestGateway } from './helpers/gateway.js'
import { runCli } from './helpers/run.js'
import { expectProblem, send } from './helpers/http.js'

const cleanups: (() => Promise<void> | void)[] = []
afterEach(async () => { for (const c of cleanups.splice(0).reverse()) await c() })

// nothing is forwarded in these tests: nobody listens on the upstream's port
const routes: RouteSpec[] = [{ name: 'ledger', path: '/ledger/:res', upstream: 'http://127.0.0.1:9', fencing: { resource: '{param.res}' }, idempotency: {} }]

async function gateway(admin: ConfigInput['admin'], store: StoreInput = { kind: 'memory' }): Promise<TestGateway> {
  const gw = await startTestGateway({ admin, store, routes })
  cleanups.push(() => gw.close())
  return gw
}

const json = { 'content-type': 'application/json' }
const resolveBody = JSON.stringify({ route: 'ledger', key: 'k-1', as: 'failed', reason: 'checked the ledger' })

describe('admin write actions', () => {
  test('without admin.writeToken: 403 problem pointing at the CLI, whatever token is sent', async () => {
    const gw = await gateway({ token: 'read-secret' })
    for (const headers of [{}, { authorization: 'Bearer read-secret' }, { authorization: 'Bearer anything' }] as Record<string, string>[]) {
      for (const [path, body] of [['/resolve', resolveBody], ['/store/accept-loss', '{}']] as const) {
        const r = await send(`${gw.adminUrl}${path}`, { method: 'POST', headers: { ...json, ...headers }, body })
        expectProblem(r, {
          status: 403, type: 'forbidden', message: `${path} ${JSON.stringify(headers)}`,
          detail: ['admin.writeToken is not set', 'fencegate store accept-loss'], members: { error: { type: 'invalid_request_error' } },
        })
      }
    }
    // reads still work with the read token
    expect((await send(`${gw.adminUrl}/unknown`, { headers: { authorization: 'Bearer read-secret' } })).status).toBe(200)
  })

  test('with admin.writeToken: 401 without it, 403 with the read token, done with it; who and why in the attempt log', async () => {
    const gw = await gateway({ token: 'read-secret', writeToken: 'write-secret' })
    const none = await send(`${gw.adminUrl}/store/accept-loss`, { method: 'POST', headers: json, body: '{}' })
    expectProblem(none, { status: 401, type: 'unauthorized', headers: { 'www-authenticate': /^Bearer/ } })
    const wrong = await send(`${gw.adminUrl}/store/accept-loss`, { method: 'POST', headers: { ...json, authorization: 'Bearer nope' }, body: '{}' })
    expect(wrong.status).toBe(401)
    const read = await send(`${gw.adminUrl}/store/accept-loss`, { method: 'POST', headers: { ...json, authorization: 'Bearer read-secret' }, body: '{}' })
    expectProblem(read, { status: 403, type: 'forbidden', headers: { 'www-authenticate': /insufficient_scope/ } })
    // the write token does not open the read endpoints: each token does its own
    expect((await send(`${gw.adminUrl}/metrics`, { headers: { authorization: 'Bearer write-secret' } })).status).toBe(401)

    const ok = await send(`${gw.adminUrl}/store/accept-loss`, { method: 'POST', headers: { ...json, authorization: 'Bearer write-secret' }, body: JSON.stringify({ reason: 'redis restarted; workers took new leases', by: 'alice' }) })
    expect(ok.status).toBe(200)
    expect(ok.json().epoch).toEqual(expect.any(String))
    // a resolve reaches the record lookup (404: the key was never used)
    const resolve = await send(`${gw.adminUrl}/resolve`, { method: 'POST', headers: { ...json, authorization: 'Bearer write-secret' }, body: resolveBody })
    expectProblem(resolve, { status: 404, type: 'record-not-found' })

    await gw.audit.flush()
    const report = (await send(`${gw.adminUrl}/audit`, { headers: { authorization: 'Bearer read-secret' } })).json()
    expect(report.operatorActions).toEqual([
      expect.objectContaining({ kind: 'accept-loss', route: '*', reason: 'redis restarted; workers took new leases', by: 'admin-api:127.0.0.1 (alice)' }),
    ])
  })

  test('store accept-loss --reason on the command line: recorded with the user and host', async () => {
    const dir = tempDir('fg-write-')
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }))
    const file = join(dir, 'fencegate.yaml')
    writeFileSync(file, gatewayConfig({ store: { kind: 'sqlite', path: './fg.db' }, routes }))
    const accept = await runCli(['store', 'accept-loss', '--config', file, '--reason', 'replaced the disk'])
    expect(accept.stderr).toBe('')
    expect(accept.status).toBe(0)
    const audit = await runCli(['audit', '--config', file, '--json'])
    expect(JSON.parse(audit.stdout).operatorActions).toEqual([
      expect.objectContaining({ kind: 'accept-loss', reason: 'replaced the disk', by: expect.stringMatching(/^cli:.+@.+/) }),
    ])
    const text = await runCli(['audit', '--config', file])
    expect(text.stdout).toMatch(/store state loss accepted {2}by cli:.* {2}reason: replaced the disk/)
  })
})

describe('an admin listener beyond loopback', () => {
  test('without admin.token: a warning at start; with it, or on loopback: none', async () => {
    const open = await gateway({ listen: '0.0.0.0:0' })
    expect(open.logs.join('')).toContain('is reachable beyond this host and admin.token is not set')
    const guarded = await gateway({ listen: '0.0.0.0:0', token: 's3cret' })
    expect(guarded.logs.join('')).not.toContain('admin.token is not set')
    const local = await gateway({ listen: '127.0.0.1:0' })
    expect(local.logs.join('')).not.toContain('admin.token is not set')
  })
})
