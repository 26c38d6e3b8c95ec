/**
 * The binary stream of the tether client against its Node floor (bench/stream.ts,
 * bench/floors.ts): `head -c N /dev/zero` on the server, its output through an ExecClient (as
 * `tether exec` drives it) into a pipe to `wc -c`; and the floor, the same work with nothing but
 * ws and a pipe (floor-server.ts: child pipe → one ws binary frame per read → this client).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { performance } from 'node:perf_hooks';
import type { Writable } from 'node:stream';
import WebSocket from 'ws';
import type { ExecClient, ExecClientOptions } from '../../src/client/index.js';
import { withTimeout as within } from './measure.js';
import { benchNodeArgs } from './servers.js';

const MiB = 1024 * 1024;
const STEP_TIMEOUT_MS = 120_000;
const repoRoot = fileURLToPath(new URL('../../', import.meta.url));

/** What `tether exec` asks of its client (src/cli/exec.ts), less what a bench has no use for. */
export const EXEC_LIKE: ExecClientOptions = { clientName: 'tether-bench-stream', outputHighWaterMark: 8 * MiB };

export const withTimeout = <T>(promise: Promise<T>, what: string): Promise<T> => within(promise, what, STEP_TIMEOUT_MS);

/** A local consumer at the end of a pipe (`wc -c`), as a shell pipeline after `tether exec` would be. */
export function pipeConsumer(): { stdin: Writable; count: Promise<number> } {
  const wc = spawn('wc', ['-c'], { stdio: ['pipe', 'pipe', 'ignore'] });
  let out = '';
  wc.stdout!.on('data', (c: Buffer) => (out += c.toString()));
  const count = new Promise<number>((resolve, reject) => {
    wc.once('error', reject);
    wc.once('close', () => resolve(Number(out.trim())));
  });
  return { stdin: wc.stdin!, count };
}

/** One `head -c bytes /dev/zero` through an ExecClient into a pipe; ms from spawn to the consumer's last byte. */
export async function execOnce(client: ExecClient, bytes: number): Promise<number> {
  const consumer = pipeConsumer();
  const started = performance.now();
  const proc = client.spawn(['head', '-c', String(bytes), '/dev/zero'], { stdout: consumer.stdin, env: { PATH: '/usr/bin:/bin' } });
  const code = await withTimeout(proc.exited, 'exec');
  await withTimeout(proc.closed, 'exec close');
  await new Promise<void>((resolve) => consumer.stdin.end(resolve));
  const got = await consumer.count;
  const elapsed = performance.now() - started;
  if (code !== 0 || got !== bytes) throw new Error(`exec: exit ${code}, ${got} of ${bytes} bytes`);
  return elapsed;
}

/** The Node floor: the same work with nothing but ws and a pipe. */
export class FloorClient {
  private constructor(private readonly ws: WebSocket) {}

  static async connect(url: string): Promise<FloorClient> {
    const ws = new WebSocket(url, { perMessageDeflate: false, maxPayload: 256 * MiB });
    await new Promise((resolve, reject) => {
      ws.once('open', resolve);
      ws.once('error', reject);
    });
    return new FloorClient(ws);
  }

  async once(bytes: number): Promise<number> {
    const consumer = pipeConsumer();
    const ws = this.ws;
    const started = performance.now();
    const done = new Promise<void>((resolve) => {
      const resume = (): void => ws.resume();
      const onMessage = (data: Buffer, isBinary: boolean): void => {
        if (!isBinary) {
          ws.off('message', onMessage);
          // Paused by the last bytes with "done" already read: the pipe is ended next, and an
          // ended pipe emits no 'drain', so resume now or the next run never starts.
          consumer.stdin.off('drain', resume);
          if (ws.isPaused) ws.resume();
          resolve();
          return;
        }
        // One pause and one resume at a time (ws may still deliver messages it already had).
        if (!consumer.stdin.write(data) && !ws.isPaused) {
          ws.pause();
          consumer.stdin.once('drain', resume);
        }
      };
      ws.on('message', onMessage);
    });
    ws.send(String(bytes));
    await withTimeout(done, 'floor');
    await new Promise<void>((resolve) => consumer.stdin.end(resolve));
    const got = await consumer.count;
    const elapsed = performance.now() - started;
    if (got !== bytes) throw new Error(`floor: ${got} of ${bytes} bytes`);
    return elapsed;
  }

  close(): void {
    this.ws.close();
  }
}

export async function startFloorServer(): Promise<{ url: string; child: ChildProcess; stop(): void }> {
  const child = spawn(process.execPath, [...benchNodeArgs(), '--import', 'tsx', 'bench/lib/floor-server.ts'], { cwd: repoRoot, stdio: ['ignore', 'pipe', 'inherit'] });
  // However the bench ends (a crash goes through process.exit), the floor server goes with it.
  const stopOnExit = (): void => void child.kill('SIGTERM');
  process.once('exit', stopOnExit);
  child.once('exit', () => process.off('exit', stopOnExit));
  const url = await new Promise<string>((resolve, reject) => {
    createInterface({ input: child.stdout! }).once('line', (line) => resolve(line.trim()));
    child.once('exit', (code) => reject(new Error(`floor server exited with ${code}`)));
  });
  return { url, child, stop: () => child.kill('SIGTERM') };
}

