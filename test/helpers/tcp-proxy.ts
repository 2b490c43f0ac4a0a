/**
 * A TCP proxy of the tests' own (node:net) between a gateway and its store, to lose what a
 * network loses: `mode` decides what happens to the bytes from now on —
 *   pass         both ways, as they come;
 *   delay        both ways, each chunk `delayMs` late;
 *   blackhole    nothing either way (held back, never delivered; the connections stay open);
 *   drop-replies the requests reach the store, its replies are thrown away;
 *   reset-reply  each request reaches the store, then the client's connection is reset before
 *                any reply: the store ran the command, the gateway never hears of it.
 * `reset()` destroys every connection (both sides see a reset); new ones follow `mode`.
 */
import net from 'node:net'

export type ProxyMode = 'pass' | 'delay' | 'blackhole' | 'drop-replies' | 'reset-reply'

export interface TcpProxy {
  port: number
  mode: ProxyMode
  delayMs: number
  /** connections made through it so far */
  connections: number
  reset(): void
  close(): Promise<void>
}

export async function startTcpProxy(target: { host: string; port: number }): Promise<TcpProxy> {
  const pairs = new Set<[net.Socket, net.Socket]>()
  const proxy: TcpProxy = {
    port: 0, mode: 'pass', delayMs: 0, connections: 0,
    reset: () => { for (const [c, s] of pairs) { c.resetAndDestroy(); s.resetAndDestroy() } pairs.clear() },
    close: () => new Promise((ok) => { proxy.reset(); server.close(() => ok()) }),
  }
  const server = net.createServer((client) => {
    proxy.connections++
    const store = net.connect(target)
    const pair: [net.Socket, net.Socket] = [client, store]
    pairs.add(pair)
    // the store's side ends (what it was sent still reaches it), then goes
    const drop = () => { pairs.delete(pair); client.destroy(); store.end(); setTimeout(() => store.destroy(), 200).unref() }
    client.on('error', drop).on('close', drop)
    store.on('error', drop).on('close', drop)
    const send = (to: net.Socket, chunk: Buffer) => {
      if (proxy.mode === 'delay') setTimeout(() => { if (!to.destroyed) to.write(chunk) }, proxy.delayMs)
      else to.write(chunk)
    }
    client.on('data', (chunk: Buffer) => {
      if (proxy.mode === 'blackhole') return
      send(store, chunk)
      if (proxy.mode === 'reset-reply') { pairs.delete(pair); client.resetAndDestroy() }
    })
    store.on('data', (chunk: Buffer) => {
      if (proxy.mode === 'blackhole' || proxy.mode === 'drop-replies' || proxy.mode === 'reset-reply') return
      send(client, chunk)
    })
  })
  await new Promise<void>((ok) => server.listen(0, '127.0.0.1', ok))
  proxy.port = (server.address() as net.AddressInfo).port
  return proxy
}
