import net from 'node:net';
import { once } from 'node:events';
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseChaosArgs, parseWindow } from '../../src/cli/chaos.js';
import { TETHER_BIN } from '../helpers/serve-process.js';

describe('tether chaos arguments', () => {
  it('turns each fault flag into a scheduled fault, in the order given', () => {
    const config = parseChaosArgs(
      [
        '--to', 'ws://127.0.0.1:8765',
        '--listen', '9000',
        '--latency', '80ms..120ms',
        '--bandwidth', '64KiB/s@10s..20s',
        '--reset-every', '2s..10s@30s..',
        '--reset-after', 'down:1MiB',
        '--blackhole',
        '--refuse', '@5s/30s',
        '--latency', '1s@0s..5s',
        '--blackhole', 'drop@1m..2m',
        '--seed', '42',
      ],
    );
    expect(config).toMatchObject({ targetHost: '127.0.0.1', targetPort: 8765, scheme: 'ws', listenHost: '127.0.0.1', listenPort: 9000, seed: 42 });
    if (config === 'help') throw new Error('unreachable');
    expect(config.plan).toEqual([
      { fault: { kind: 'latency', ms: 100, jitterMs: 20 }, window: { kind: 'always' } },
      { fault: { kind: 'bandwidth', bytesPerSecond: 65536 }, window: { kind: 'between', fromMs: 10_000, toMs: 20_000 } },
      { fault: { kind: 'reset', minMs: 2000, maxMs: 10_000 }, window: { kind: 'between', fromMs: 30_000, toMs: Infinity } },
      { fault: { kind: 'resetAfter', bytes: 1024 * 1024, direction: 'down' }, window: { kind: 'always' } },
      { fault: { kind: 'blackhole', mode: 'hold' }, window: { kind: 'always' } },
      { fault: { kind: 'refuse' }, window: { kind: 'periodic', forMs: 5000, everyMs: 30_000 } },
      { fault: { kind: 'latency', ms: 1000, jitterMs: 0 }, window: { kind: 'between', fromMs: 0, toMs: 5000 } },
      { fault: { kind: 'blackhole', mode: 'drop' }, window: { kind: 'between', fromMs: 60_000, toMs: 120_000 } },
    ]);
  });

  it('reads targets as URLs, HOST:PORT, [V6]:PORT or PORT', () => {
    const target = (to: string) => {
      const c = parseChaosArgs(['--to', to]);
      return c === 'help' ? c : [c.scheme, c.targetHost, c.targetPort];
    };
    expect(target('8765')).toEqual(['', '127.0.0.1', 8765]);
    expect(target('example.org:22')).toEqual(['', 'example.org', 22]);
    expect(target('[::1]:8765')).toEqual(['', '::1', 8765]);
    expect(target('wss://example.org')).toEqual(['wss', 'example.org', 443]);
    expect(parseChaosArgs(['-h'])).toBe('help');
  });

  it('rejects what it cannot mean, naming the flag', () => {
    const error = (...argv: string[]) => {
      try {
        parseChaosArgs(argv);
      } catch (err) {
        return (err as Error).message;
      }
      return 'accepted';
    };
    expect(error('--latency', '1s')).toMatch(/--to TARGET is required/);
    expect(error('--to', '1', '--latency', 'fast')).toMatch(/^--latency: invalid duration 'fast'/);
    expect(error('--to', '1', '--latency', '2s..1s')).toMatch(/^--latency: .*ends before it starts/);
    expect(error('--to', '1', '--blackhole', 'maybe')).toMatch(/^--blackhole: expected hold or drop/);
    expect(error('--to', '1', '--refuse', 'now')).toMatch(/^--refuse: takes only a window/);
    expect(error('--to', '1', '--refuse', '@30s/5s')).toMatch(/must last less than its period/);
    expect(error('--to', '1', '--reset-every', '0s')).toMatch(/greater than zero/);
    expect(error('--to', '1', '--bandwidth', '10@')).toMatch(/empty window/);
    expect(error('--to', 'nowhere')).toMatch(/^--to: expected ws:\/\/HOST:PORT/);
    expect(error('--to', '1', 'extra')).toBe("unexpected argument 'extra'");
    expect(parseWindow('--x', '20s..1m')).toEqual({ kind: 'between', fromMs: 20_000, toMs: 60_000 });
  });
});

/** The `tether chaos` process: its first stdout line, its stderr, and how it ended. */
function startChaos(args: string[]) {
  const child = spawn(process.execPath, [TETHER_BIN, 'chaos', ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  let stderr = '';
  let stdout = '';
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
  const exited = new Promise<number | null>((resolve) => child.on('close', (code) => resolve(code)));
  const address = new Promise<string>((resolve, reject) => {
    createInterface({ input: child.stdout }).once('line', resolve);
    child.once('exit', (code) => reject(new Error(`tether chaos exited ${code}: ${stderr}`)));
  });
  address.catch(() => {}); // awaited only by tests that expect it to start
  return { child, address, exited, stderr: () => stderr, stdout: () => stdout };
}

const portOf = (address: string) => Number(/:(\d+)$/.exec(address)![1]);

/** Bytes received until the socket closes. */
function drain(socket: net.Socket): Promise<number> {
  return new Promise((resolve) => {
    let bytes = 0;
    socket.on('data', (d: Buffer) => (bytes += d.length));
    socket.on('error', () => {});
    socket.on('close', () => resolve(bytes));
  });
}

describe('tether chaos', () => {
  let echo: net.Server;
  let echoPort: number;

  beforeAll(async () => {
    echo = net.createServer((s) => {
      s.on('error', () => {});
      s.pipe(s);
    });
    echo.listen(0, '127.0.0.1');
    await once(echo, 'listening');
    echoPort = (echo.address() as net.AddressInfo).port;
  });

  afterAll(() => new Promise((resolve) => echo.close(resolve)));

  it('prints where to connect, says what it does as it does it, and sums it up on Ctrl-C', async () => {
    const chaos = startChaos(['--to', `ws://127.0.0.1:${echoPort}`, '--reset-after', 'down:1000', '--seed', '5']);
    const address = await chaos.address;
    expect(address).toMatch(/^ws:\/\/127\.0\.0\.1:\d+$/);
    const socket = net.connect(portOf(address), '127.0.0.1');
    const received = drain(socket);
    socket.write(Buffer.alloc(5000, 1));
    expect(await received).toBe(1000);
    await expect.poll(chaos.stderr).toMatch(/#1 ended after its byte quota/);
    chaos.child.kill('SIGINT');
    expect(await chaos.exited).toBe(0);
    const log = chaos.stderr();
    expect(log).toMatch(/^tether chaos \+0\.\d{3}s proxying 127\.0\.0\.1:\d+ -> 127\.0\.0\.1:\d+ \(seed 5\)$/m);
    expect(log).toMatch(/faults: reset after 1000B down$/m);
    expect(log).toMatch(/\+\d+\.\d{3}s #1 open from 127\.0\.0\.1:\d+$/m);
    expect(log).toMatch(/#1 ended after its byte quota after \d+m?s: up 4\.9KiB, down 1000B/);
    expect(log).toMatch(/stopped \(SIGINT\), seed 5$/m);
    expect(log).toMatch(/: 1 connections \(peak 1 at once\), 0 refused, 0 reset by cuts, 1 ended after a byte quota, 0 could not reach the target$/m);
    expect(log).toMatch(/down \(target to client\): 1000B forwarded/);
    expect(chaos.stdout()).toBe(`${address}\n`); // stdout is for the address only
  });

  it('follows its schedule and reports in JSON lines, stopping after --duration', async () => {
    const chaos = startChaos(['--to', String(echoPort), '--refuse', '@0s..30s', '--duration', '1s', '--json']);
    const address = await chaos.address;
    expect(address).toMatch(/^127\.0\.0\.1:\d+$/);
    const socket = net.connect(portOf(address), '127.0.0.1');
    await drain(socket);
    expect(await chaos.exited).toBe(0);
    const events = chaos.stderr().trim().split('\n').map((line) => JSON.parse(line) as { event: string; [k: string]: unknown });
    expect(events.map((e) => e.event)).toEqual(['start', 'faults', 'refused', 'faults', 'stats']);
    expect(events[1]).toMatchObject({ faults: { refusing: true } });
    expect(events.at(-1)).toMatchObject({ reason: 'duration reached', refused: 1, accepted: 0 });
  });

  it('usage errors are one line (and where to read more) and exit 2; --help goes to stdout', async () => {
    const bad = startChaos(['--to', String(echoPort), '--latency', 'soon']);
    expect(await bad.exited).toBe(2);
    expect(bad.stderr()).toBe("tether chaos: --latency: invalid duration 'soon' (expected e.g. 500ms, 30s, 5m)\nrun 'tether chaos --help' for usage\n");
    const help = startChaos(['--help']);
    expect(await help.exited).toBe(0);
    expect(help.stdout()).toMatch(/^usage: tether chaos --to TARGET/);
  });
});
