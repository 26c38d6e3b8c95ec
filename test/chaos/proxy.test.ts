import net from 'node:net';
import { once } from 'node:events';
import { performance } from 'node:perf_hooks';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ChaosProxy, type CloseReason, type ConnectionReport } from '../../src/chaos/proxy.js';
import { seededRandom } from '../../src/chaos/random.js';

/** A loopback echo server: every byte comes back; it counts what it received per connection. */
async function startEcho(): Promise<{ server: net.Server; received: number[] }> {
  const received: number[] = [];
  const server = net.createServer((socket) => {
    const index = received.push(0) - 1;
    socket.on('error', () => {});
    socket.on('data', (d: Buffer) => (received[index]! += d.length));
    socket.pipe(socket);
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return { server, received };
}

/** Resolves on 'close' (events.once would reject on the 'error' a reset emits). */
const closeOf = (socket: net.Socket) => new Promise<void>((resolve) => socket.once('close', () => resolve()));

async function connect(proxy: ChaosProxy): Promise<net.Socket> {
  const socket = net.connect(proxy.port, '127.0.0.1');
  socket.setNoDelay(true);
  await once(socket, 'connect');
  return socket;
}

function readBytes(socket: net.Socket, n: number): Promise<Buffer> {
  return new Promise((resolve) => {
    const parts: Buffer[] = [];
    let have = 0;
    const onData = (chunk: Buffer) => {
      parts.push(chunk);
      have += chunk.length;
      if (have >= n) {
        socket.off('data', onData);
        resolve(Buffer.concat(parts));
      }
    };
    socket.on('data', onData);
  });
}

/** Everything a socket receives until it closes, and how it closed. */
function drain(socket: net.Socket): Promise<{ bytes: number; error?: string }> {
  return new Promise((resolve) => {
    let bytes = 0;
    let error: string | undefined;
    socket.on('data', (d: Buffer) => (bytes += d.length));
    socket.on('error', (err: NodeJS.ErrnoException) => (error = err.code));
    socket.on('close', () => resolve({ bytes, error }));
  });
}

/** Round-trip times (ms) of `count` one-byte pings, one at a time. */
async function pingTimes(socket: net.Socket, count: number): Promise<number[]> {
  const times: number[] = [];
  for (let i = 0; i < count; i++) {
    const reply = readBytes(socket, 1);
    const sent = performance.now();
    socket.write('p');
    await reply;
    times.push(performance.now() - sent);
  }
  return times;
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

describe('chaos proxy', () => {
  let echo: { server: net.Server; received: number[] };
  let proxy: ChaosProxy;

  beforeEach(async () => {
    echo = await startEcho();
    proxy = await ChaosProxy.start({ targetPort: (echo.server.address() as net.AddressInfo).port, random: seededRandom(7) });
  });

  afterEach(async () => {
    await proxy.close();
    await new Promise((resolve) => echo.server.close(resolve));
  });

  it('forwards bytes both ways on loopback', async () => {
    expect(proxy.url).toMatch(/^ws:\/\/127\.0\.0\.1:\d+$/);
    const socket = await connect(proxy);
    const reply = readBytes(socket, 5);
    socket.write('hello');
    expect((await reply).toString()).toBe('hello');
    socket.destroy();
  });

  it('cutAll resets every live connection, counts the cuts and reports what each had in flight', async () => {
    const a = await connect(proxy);
    const b = await connect(proxy);
    a.on('error', () => {});
    b.on('error', () => {});
    // Round trips make sure the proxy has registered both connections.
    for (const s of [a, b]) {
      const r = readBytes(s, 1);
      s.write('x');
      await r;
    }
    expect(proxy.activeConnections).toBe(2);
    // Bytes still on their way when the cut comes are lost, and reported as such.
    proxy.setLatency(10_000);
    a.write(Buffer.alloc(1000));
    await expect.poll(() => proxy.stats().up.held).toBe(1000);
    const reports: ConnectionReport[][] = [];
    proxy.on('cut', (_count, r) => reports.push(r));
    const closed = Promise.all([closeOf(a), closeOf(b)]);
    expect(proxy.cutAll()).toBe(2);
    await closed;
    expect(proxy.cuts).toBe(2);
    expect(proxy.activeConnections).toBe(0);
    const [first] = reports;
    expect(first!.map((r) => [r.up.forwarded, r.up.held, r.down.forwarded])).toEqual([
      [1, 1000, 1],
      [1, 0, 1],
    ]);
  });

  it('adds the latency it is given to each direction (a round trip gains twice as much)', async () => {
    const socket = await connect(proxy);
    const baseline = median(await pingTimes(socket, 10));
    proxy.setLatency(40);
    const delayed = await pingTimes(socket, 10);
    const added = median(delayed) - baseline;
    // Never less than asked (timers do not fire early); the upper bound only catches a
    // proxy that delays twice or queues behind something, not a slow machine.
    expect(Math.min(...delayed)).toBeGreaterThanOrEqual(80 - 1);
    expect(added).toBeGreaterThanOrEqual(79);
    expect(added).toBeLessThan(80 + 60);
    socket.destroy();
  });

  it('jitters within latency ± jitter, never reordering bytes', async () => {
    const socket = await connect(proxy);
    proxy.setLatency(30, 20);
    const times = await pingTimes(socket, 20);
    expect(Math.min(...times)).toBeGreaterThanOrEqual(2 * 10 - 1);
    // A seeded spread: the delays really vary (a constant delay would give ~60 ms every time).
    expect(Math.max(...times) - Math.min(...times)).toBeGreaterThan(15);
    const bytes = Buffer.from(Array.from({ length: 200 }, (_, i) => i));
    const reply = readBytes(socket, bytes.length);
    for (let i = 0; i < bytes.length; i += 10) socket.write(bytes.subarray(i, i + 10));
    expect((await reply).equals(bytes)).toBe(true);
    socket.destroy();
  });

  it('delivers exactly the byte quota, then ends the connection (down, up, both)', async () => {
    const closes: [ConnectionReport, CloseReason][] = [];
    proxy.on('close', (report, reason) => closes.push([report, reason]));

    // down: the client gets exactly 10 000 of the 50 000 bytes it sent.
    proxy.cutAfterBytes(10_000, { direction: 'down' });
    let socket = await connect(proxy);
    let result = drain(socket);
    socket.write(Buffer.alloc(50_000, 1));
    expect((await result).bytes).toBe(10_000);

    // One shot: the next connection is not cut.
    socket = await connect(proxy);
    const echoed = readBytes(socket, 50_000);
    socket.write(Buffer.alloc(50_000, 2));
    expect((await echoed).length).toBe(50_000);
    socket.destroy();

    // up, on every connection: the target gets exactly 7 000 bytes on each.
    proxy.cutAfterBytes(7_000, { direction: 'up', repeat: true });
    for (let i = 0; i < 2; i++) {
      socket = await connect(proxy);
      result = drain(socket);
      socket.write(Buffer.alloc(20_000, 3));
      expect((await result).bytes).toBeLessThanOrEqual(7_000);
    }
    expect(echo.received.slice(-2)).toEqual([7_000, 7_000]);

    // both: what crossed in the two directions adds up to the quota.
    proxy.cutAfterBytes(9_000, { direction: 'both' });
    socket = await connect(proxy);
    result = drain(socket);
    socket.write(Buffer.alloc(20_000, 4));
    await result;
    await expect.poll(() => closes.length).toBe(5);
    const [last, reason] = closes.at(-1)!;
    expect(reason).toBe('quota');
    expect(last.up.forwarded + last.down.forwarded).toBe(9_000);
    expect(closes.map(([, r]) => r)).toEqual(['quota', 'client', 'quota', 'quota', 'quota']);
    expect(proxy.stats().quotaCuts).toBe(4);
  });

  it('caps the bandwidth within 10 %', async () => {
    const rate = 256 * 1024;
    proxy.setBandwidth(rate);
    const socket = await connect(proxy);
    const total = 384 * 1024;
    let first = 0;
    let last = 0;
    let received = 0;
    const done = new Promise<void>((resolve) =>
      socket.on('data', (d: Buffer) => {
        const now = performance.now();
        if (received === 0) first = now;
        received += d.length;
        last = now;
        if (received >= total) resolve();
      }),
    );
    socket.write(Buffer.alloc(total, 5));
    await done;
    // Measured between the first and the last byte received (the first slice is not timed).
    const firstSlice = Math.floor(rate / 100);
    const measured = ((total - firstSlice) * 1000) / (last - first);
    expect(measured).toBeGreaterThan(rate * 0.9);
    expect(measured).toBeLessThan(rate * 1.1);
    socket.destroy();
  });

  it('black hole holds bytes without closing, and releases them when lifted', async () => {
    const socket = await connect(proxy);
    const first = readBytes(socket, 1);
    socket.write('1');
    await first;
    proxy.blackhole(true);
    let received = '';
    socket.on('data', (d: Buffer) => (received += d.toString()));
    socket.write('held');
    // Nothing can arrive while the hole is open; a round trip through a second, timer-free
    // path (setImmediate chains) gives the proxy every chance to forward if it were broken.
    for (let i = 0; i < 50; i++) await new Promise((r) => setImmediate(r));
    expect(received).toBe('');
    expect(socket.destroyed).toBe(false);
    const released = new Promise<void>((resolve) => socket.on('data', () => received.length >= 4 && resolve()));
    proxy.blackhole(false);
    await released;
    expect(received).toBe('held');
    socket.destroy();
  });

  it('a dropping black hole loses what crosses it and keeps the connection open', async () => {
    const socket = await connect(proxy);
    proxy.blackhole(true, 'drop');
    let received = '';
    socket.on('data', (d: Buffer) => (received += d.toString()));
    socket.write('lost');
    await expect.poll(() => proxy.stats().up.dropped).toBe(4);
    proxy.blackhole(false);
    const reply = readBytes(socket, 4);
    socket.write('kept');
    await reply;
    expect(received).toBe('kept');
    expect(echo.received[0]).toBe(4);
    socket.destroy();
  });

  it('refuse resets new connections, and counts them', async () => {
    const refused: string[] = [];
    proxy.on('refused', (remote) => refused.push(remote));
    proxy.refuse(true);
    const socket = net.connect(proxy.port, '127.0.0.1');
    const result = drain(socket);
    expect((await result).error).toBe('ECONNRESET');
    expect(refused).toEqual([expect.stringMatching(/^127\.0\.0\.1:\d+$/)]);
    proxy.refuse(false);
    const ok = await connect(proxy);
    ok.destroy();
    expect(proxy.stats()).toMatchObject({ refused: 1, accepted: 1 });
  });

  it('cutEvery cuts at a fixed interval', async () => {
    const socket = await connect(proxy);
    socket.on('error', () => {});
    const times: number[] = [];
    const start = performance.now();
    const three = new Promise<void>((resolve) =>
      proxy.on('cut', () => {
        times.push(performance.now() - start);
        if (times.length === 3) resolve();
      }),
    );
    proxy.cutEvery(40);
    await three;
    proxy.stopCutting();
    expect(times[0]).toBeGreaterThanOrEqual(39);
    expect(times[1]! - times[0]!).toBeGreaterThanOrEqual(39);
    expect(times[2]! - times[1]!).toBeGreaterThanOrEqual(39);
    expect(proxy.cuts).toBe(1); // only the one live connection, cut once
  });

  it('cutRandomly cuts repeatedly until stopped', async () => {
    const controller = new AbortController();
    let cutEvents = 0;
    const cutThreeTimes = new Promise<void>((resolve) =>
      proxy.on('cut', () => {
        cutEvents++;
        if (cutEvents === 3) {
          controller.abort();
          resolve();
        }
      }),
    );
    proxy.cutRandomly({ minMs: 5, maxMs: 15, signal: controller.signal });
    await cutThreeTimes;
    expect(cutEvents).toBe(3);
    expect(proxy.faults().cutting).toBe(false);
  });

  it('heal lifts every fault; stats add up what every connection did', async () => {
    proxy.setLatency(5, 2);
    proxy.setBandwidth(1e6);
    proxy.refuse(true);
    proxy.cutEvery(10_000);
    proxy.cutAfterBytes(100);
    proxy.blackhole(true);
    proxy.heal();
    expect(proxy.faults()).toEqual({ latencyMs: 0, jitterMs: 0, bandwidth: 0, blackhole: false, refusing: false, cutting: false, quota: false });
    for (let i = 0; i < 2; i++) {
      const socket = await connect(proxy);
      const reply = readBytes(socket, 300);
      socket.write(Buffer.alloc(300));
      await reply;
      const closed = closeOf(socket);
      socket.end();
      await closed;
    }
    await expect.poll(() => proxy.stats().active).toBe(0);
    expect(proxy.stats()).toMatchObject({ accepted: 2, peakActive: 1, up: { forwarded: 600, held: 0 }, down: { forwarded: 600 } });
  });

  it('reports a target that cannot be reached', async () => {
    const reasons: CloseReason[] = [];
    proxy.on('close', (_r, reason) => reasons.push(reason));
    const closedPort = (echo.server.address() as net.AddressInfo).port;
    await new Promise((resolve) => echo.server.close(resolve));
    echo.server = net.createServer().listen(0, '127.0.0.1'); // for afterEach
    proxy.setTarget(closedPort);
    const socket = net.connect(proxy.port, '127.0.0.1');
    await drain(socket);
    expect(reasons).toEqual(['target-unreachable']);
    expect(proxy.stats().targetFailures).toBe(1);
  });
});
