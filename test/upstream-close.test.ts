/**
 * An upstream that answers and closes the connection (HTTP/1.0 servers, `Connection: close`)
 * while the gateway is still writing the idempotency record: the answer must reach the client
 * and the gateway must live on. undici 7 crashes the process if its parser is paused when the
 * FIN comes (nodejs/undici#5360), so the gateway never pauses it while waiting on the store.
 * A shared store (Redis) makes the record write slow enough for the FIN to arrive during it.
 */
import { afterAll, beforeAll, describe, expect, test } from 'vitest'
import net from 'node:net'
import { randomBytes } from 'node:crypto'
import { Redis } from 'ioredis'
import { startTestGateway, type TestGateway } from './helpers/gateway.js'
import { expectProblem, send } from './helpers/http.js'
import { sleep } from './helpers/wait.js'
import { request, Agent } from 'undici'

const slow = new Agent({ pipelining: 0, keepAliveTimeout: 1 })

const REDIS_URL = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379'
const prefix = `test-close-${randomBytes(4).toString('hex')}`
const BODY = 'x'.repeat(4000)

let upstream: net.Server
let gw: TestGateway
let answered = 0
const BIG = 4 * 1024 * 1024

beforeAll(async () => {
  upstream = net.createServer((s) => {
    s.once('data', (d) => {
      answered++
      if (d.toString().startsWith('GET /big')) {
        s.write(`HTTP/1.1 200 OK\r\ncontent-type: application/octet-stream\r\ncontent-length: ${BIG}\r\nconnection: close\r\n\r\n`)
        s.end(Buffer.alloc(BIG, 'y'))
        return
      }
      s.end(`HTTP/1.1 201 Created\r\ncontent-type: text/plain\r\ncontent-length: ${BODY.length}\r\nconnection: close\r\n\r\n${BODY}`)
    })
  })
  await new Promise<void>((r) => upstream.listen(0, '127.0.0.1', r))
  const port = (upstream.address() as net.AddressInfo).port
  const url = `http://127.0.0.1:${port}`
  gw = await startTestGateway({
    store: { kind: 'redis', url: REDIS_URL, keyPrefix: prefix },
    routes: [
      { name: 'download', path: '/big', methods: ['GET'], upstream: url },
      { name: 'closing', path: '/*', upstream: url, idempotency: { maxResponseBytes: '1KiB' } },
    ],
  })
})

afterAll(async () => {
  await gw?.close()
  await new Promise((r) => upstream?.close(r))
  const redis = new Redis(REDIS_URL)
  const keys = await redis.keys(`{fg:${prefix}:*`)
  if (keys.length) await redis.del(...keys)
  redis.disconnect()
})

describe('an upstream that closes the connection after answering', () => {
  test('answers larger than maxResponseBytes reach the client whole, and repeats get 409 response-not-stored', async () => {
    for (let i = 0; i < 5; i++) {
      const r = await send(`${gw.url}/pay/${i}`, { method: 'POST', headers: { 'idempotency-key': `close-${i}`, 'content-type': 'text/plain' }, body: 'x' })
      expect(r.status).toBe(201)
      expect(r.body.length).toBe(BODY.length)
    }
    const again = await send(`${gw.url}/pay/0`, { method: 'POST', headers: { 'idempotency-key': 'close-0', 'content-type': 'text/plain' }, body: 'x' })
    expectProblem(again, { status: 409, type: 'response-not-stored' })
    expect(answered).toBe(5)
  })

  test('a 4 MiB answer streamed to a client that reads slowly arrives whole, and the gateway lives on', async () => {
    for (let round = 0; round < 3; round++) {
      const res = await request(`${gw.url}/big`, { dispatcher: slow, highWaterMark: 16 * 1024 })
      expect(res.statusCode).toBe(200)
      let size = 0
      let n = 0
      for await (const c of res.body) {
        size += (c as Buffer).length
        // a client that stops reading for a while: the gateway's socket to it fills up, and the
        // upstream has sent everything and closed in the meantime
        if (++n === 1) await sleep(300)
      }
      expect(size).toBe(BIG)
    }
    expect((await send(`${gw.adminUrl}/healthz`)).status).toBe(200)
  })
})
