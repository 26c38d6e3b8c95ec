/**
 * How faithful `tether chaos` is, against a loopback echo server: the latency it adds
 * against the latency asked, the bandwidth measured against the cap, the bytes delivered
 * before a quota ends the connection, and what the proxy costs on a clean link (throughput
 * through it over throughput direct, in the same run).
 */
import net from 'node:net';
import { once } from 'node:events';
import { performance } from 'node:perf_hooks';
import { ChaosProxy } from '../src/chaos/proxy.js';
import { seededRandom } from '../src/chaos/random.js';
import { table } from './lib/stats.js';

async function echoServer(): Promise<net.Server> {
  const server = net.createServer((s) => {
    s.on('error', () => {});
    s.pipe(s);
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return server;
}

async function connect(port: number): Promise<net.Socket> {
  const socket = net.connect({ port, host: '127.0.0.1', noDelay: true });
  await once(socket, 'connect');
  return socket;
}

/** Median round trip (ms) of one-byte pings. */
async function medianRtt(socket: net.Socket, count = 21): Promise<number> {
  const times: number[] = [];
  for (let i = 0; i < count; i++) {
    const start = performance.now();
    const reply = once(socket, 'data');
    socket.write('p');
    await reply;
    times.push(performance.now() - start);
  }
  return times.sort((a, b) => a - b)[count >> 1]!;
}

/** Bytes per second received back, first byte to last, for `total` bytes echoed. */
async function echoRate(socket: net.Socket, total: number): Promise<number> {
  let received = 0;
  let first = 0;
  let firstChunk = 0;
  const done = new Promise<number>((resolve) =>
    socket.on('data', (d: Buffer) => {
      const now = performance.now();
      if (received === 0) [first, firstChunk] = [now, d.length];
      received += d.length;
      if (received >= total) resolve(now);
    }),
  );
  socket.write(Buffer.alloc(total, 1));
  const last = await done;
  socket.removeAllListeners('data');
  // The clock starts when the first chunk is in: it is not part of what is timed.
  return ((total - firstChunk) * 1000) / Math.max(1e-3, last - first);
}

export async function run(): Promise<void> {
  const echo = await echoServer();
  const port = (echo.address() as net.AddressInfo).port;
  const proxy = await ChaosProxy.start({ targetPort: port, random: seededRandom(1) });
  const rows: string[][] = [];
  try {
    const through = await connect(proxy.port);
    const direct = await connect(port);
    const base = await medianRtt(through);
    for (const ms of [10, 50, 100]) {
      proxy.setLatency(ms);
      const added = (await medianRtt(through)) - base;
      rows.push([`latency ${ms} ms each way`, `${(added / 2).toFixed(1)} ms each way`, `${((added / 2 / ms) * 100).toFixed(1)} %`]);
    }
    proxy.setLatency(0);
    for (const rate of [64 * 1024, 256 * 1024, 1024 * 1024]) {
      proxy.setBandwidth(rate);
      const measured = await echoRate(through, Math.max(3 * 65536, rate * 2));
      rows.push([`bandwidth ${rate / 1024} KiB/s`, `${(measured / 1024).toFixed(1)} KiB/s`, `${((measured / rate) * 100).toFixed(1)} %`]);
    }
    proxy.setBandwidth(0);
    for (const quota of [1000, 100_000]) {
      proxy.cutAfterBytes(quota, { direction: 'down' });
      const socket = await connect(proxy.port);
      let got = 0;
      socket.on('data', (d: Buffer) => (got += d.length));
      socket.on('error', () => {});
      const closed = once(socket, 'close');
      socket.write(Buffer.alloc(quota * 3, 2));
      await closed;
      rows.push([`reset after ${quota} B down`, `${got} B delivered`, `${((got / quota) * 100).toFixed(1)} %`]);
    }
    const size = 64 * 1024 * 1024;
    const viaProxy = await echoRate(through, size);
    const straight = await echoRate(direct, size);
    rows.push(['clean link, 64 MiB echoed', `${(viaProxy / 1024 / 1024).toFixed(0)} MiB/s (direct ${(straight / 1024 / 1024).toFixed(0)} MiB/s)`, `${((viaProxy / straight) * 100).toFixed(0)} % of direct`]);
    through.destroy();
    direct.destroy();
  } finally {
    await proxy.close();
    echo.close();
  }
  console.log('\n## tether chaos: asked vs measured (loopback echo server)\n');
  console.log(table([['fault', 'measured', 'ratio'], ...rows]));
}
