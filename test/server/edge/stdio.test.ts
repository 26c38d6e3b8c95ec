/**
 * `tether serve --listen stdio` and serveStdio (server/stdio-listener.ts): one connection on
 * a pair of streams, the same protocol as over a WebSocket, one JSON message a line; the end
 * of the input ends the connection and its session (processes killed); only protocol lines
 * on stdout. The framing was checked against Codex 0.171.0's `exec-server --listen stdio`.
 */
import { EventEmitter } from 'node:events';
import { createInterface } from 'node:readline';
import { PassThrough } from 'node:stream';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import type { TetherServer } from '../../../src/server/index.js';
import { serveStdio } from '../../../src/server/edge/stdio-listener.js';
import { startStdioServer } from '../../../src/server/server-start.js';
import { spawnTether } from '../../helpers/cli.js';
import { makeFifo, readFifo, untilHeldBack } from '../../helpers/fifo.js';
import { running } from '../../helpers/procs.js';
import { RawClientPool, type Frame } from '../../helpers/raw-client.js';
import { startTetherServer, type TetherTarget } from '../../helpers/tether.js';

const CWD = pathToFileURL(tmpdir()).href;
const ENV = { PATH: process.env.PATH ?? '/usr/bin:/bin' };

/** A JSON-RPC peer over two streams, one message a line (what a parent process does). */
class LinePeer extends EventEmitter {
  readonly frames: Frame[] = [];
  readonly lines: string[] = [];
  private nextId = 1;
  constructor(
    readonly toServer: NodeJS.WritableStream,
    fromServer: NodeJS.ReadableStream,
  ) {
    super();
    const lines = createInterface({ input: fromServer });
    lines.on('error', () => {}); // the stream failing is what some tests do on purpose
    lines.on('line', (line) => {
      this.lines.push(line);
      const frame = JSON.parse(line) as Frame;
      this.frames.push(frame);
      this.emit('frame', frame);
    });
  }
  sendLine(text: string): void {
    this.toServer.write(`${text}\n`);
  }
  call(method: string, params?: unknown): Promise<Frame> {
    const id = this.nextId++;
    const reply = this.waitFor((f) => f.id === id && f.method === undefined);
    this.sendLine(JSON.stringify({ id, method, params }));
    return reply;
  }
  async handshake(): Promise<string> {
    const reply = await this.call('initialize', { clientName: 'stdio-test' });
    this.sendLine(JSON.stringify({ method: 'initialized', params: {} }));
    return reply.result.sessionId as string;
  }
  waitFor(pred: (f: Frame) => boolean): Promise<Frame> {
    const found = this.frames.find(pred);
    if (found) return Promise.resolve(found);
    return new Promise((resolve) => {
      const onFrame = (f: Frame) => {
        if (!pred(f)) return;
        this.off('frame', onFrame);
        resolve(f);
      };
      this.on('frame', onFrame);
    });
  }
  output(processId: string): string {
    return Buffer.concat(
      this.frames
        .filter((f) => f.method === 'process/output' && f.params.processId === processId)
        .sort((a, b) => a.params.seq - b.params.seq)
        .map((f) => Buffer.from(f.params.chunk, 'base64')),
    ).toString();
  }
}

let server: TetherServer | undefined;
let wsTarget: TetherTarget | undefined;
const pool = new RawClientPool();
afterEach(async () => {
  await pool.dropAll();
  await server?.close();
  await wsTarget?.stop();
  server = undefined;
  wsTarget = undefined;
});

function stdioPair(opts: Parameters<typeof startStdioServer>[0] = {}) {
  server = startStdioServer(opts);
  const input = new PassThrough();
  const output = new PassThrough();
  const served = serveStdio(server, input, output);
  return { server, input, served, peer: new LinePeer(input, output) };
}

describe('serveStdio', () => {
  it('speaks the protocol over lines: initialize, process/start, output, exit, process/read', async () => {
    const { peer } = stdioPair();
    await peer.handshake();
    const started = await peer.call('process/start', { processId: 'p1', argv: ['sh', '-c', 'echo hello; exit 3'], cwd: CWD, env: ENV, tty: false });
    expect(started.result).toEqual({ processId: 'p1', sandboxType: 'none' });
    await peer.waitFor((f) => f.method === 'process/closed' && f.params.processId === 'p1');
    expect(peer.output('p1')).toBe('hello\n');
    expect(peer.frames.find((f) => f.method === 'process/exited')?.params.exitCode).toBe(3);
    const read = await peer.call('process/read', { processId: 'p1', afterSeq: 0 });
    expect(read.result).toMatchObject({ exited: true, exitCode: 3, closed: true });
    // The Codex dialect: no jsonrpc member unless the client sent one.
    expect(peer.frames.every((f) => f.jsonrpc === undefined)).toBe(true);
  });

  it('answers a bad line with the error a WebSocket client gets, and carries on; an empty line is ignored', async () => {
    wsTarget = await startTetherServer();
    const ws = await pool.connect(wsTarget.url);
    const bad = ['garbage', '[1,2]', '{"id":"x"}', '{"id":7,"method":42}'];
    const overWs: Frame[] = [];
    for (const text of bad) {
      ws.sendRaw(text);
      overWs.push(await ws.waitFor((f) => f.error !== undefined && !overWs.includes(f)));
    }
    const { peer } = stdioPair();
    for (const text of bad) peer.sendLine(text);
    peer.sendLine('');
    peer.sendLine('\r');
    await peer.handshake();
    const errors = peer.frames.filter((f) => f.error !== undefined);
    expect(errors).toEqual(overWs);
    expect(errors).toHaveLength(bad.length);
  });

  it('skips a line longer than the largest message with one error, and carries on', async () => {
    const { peer } = stdioPair({ maxMessageBytes: 1024 });
    peer.toServer.write(`{"id":1,"method":"initialize","params":{"clientName":"${'x'.repeat(600)}`);
    peer.toServer.write(`${'y'.repeat(600)}"}}\n`);
    const refused = await peer.waitFor((f) => f.error !== undefined);
    expect(refused).toMatchObject({ id: null, error: { code: -32600 } });
    expect(refused.error!.message).toMatch(/exceeds the server's 1 KiB limit/);
    await peer.handshake();
  });

  it('refuses the binaryOutput extension (a line carries no binary message)', async () => {
    const { peer } = stdioPair();
    const reply = await peer.call('initialize', { clientName: 't', tether: { version: 1, extensions: ['binaryOutput', 'acks'] } });
    expect(reply.result.tether?.extensions).toEqual(['acks']);
  });

  it('ends the connection and its session at the end of the input: every process killed', async () => {
    const { server, input, served, peer } = stdioPair();
    const sessionId = await peer.handshake();
    for (const id of ['a', 'b']) {
      await peer.call('process/start', { processId: id, argv: ['sh', '-c', 'echo up; exec sleep 1000'], cwd: CWD, env: ENV, tty: false });
      await peer.waitFor((f) => f.method === 'process/output' && f.params.processId === id);
    }
    const pids = server.childPids();
    expect(pids).toHaveLength(2);
    expect(pids.every(running)).toBe(true);
    const expired = new Promise<string>((resolve) => server.once('session-expired', resolve));
    input.end();
    await served;
    expect(await expired).toBe(sessionId);
    expect(server.sessionCount).toBe(0);
    expect(pids.filter(running)).toEqual([]);
  });
});

describe('serveStdio when the reader goes away', () => {
  it('ends the connection and its session when the output fails (EPIPE: the parent is gone)', async () => {
    server = startStdioServer();
    const input = new PassThrough();
    const output = new PassThrough();
    const served = serveStdio(server, input, output);
    const peer = new LinePeer(input, output);
    await peer.handshake();
    await peer.call('process/start', { processId: 'p', argv: ['sh', '-c', 'echo up; exec sleep 1000'], cwd: CWD, env: ENV, tty: false });
    await peer.waitFor((f) => f.method === 'process/output' && f.params.processId === 'p');
    const pids = server.childPids();
    expect(pids.every(running)).toBe(true);
    output.destroy(Object.assign(new Error('write EPIPE'), { code: 'EPIPE' }));
    await served;
    expect(server.sessionCount).toBe(0);
    expect(pids.filter(running)).toEqual([]);
  });
});

describe('serveStdio with a reader that stops reading', () => {
  it('holds the output back (the send buffer stays bounded) and drops the connection after the stall timeout', async () => {
    server = startStdioServer({ stallTimeoutMs: 300, backpressure: { highWaterBytes: 64 * 1024, lowWaterBytes: 16 * 1024 } });
    const input = new PassThrough();
    const output = new PassThrough();
    const served = serveStdio(server, input, output);
    const peer = new LinePeer(input, output);
    await peer.handshake();
    await peer.call('process/start', { processId: 'y', argv: ['yes', 'x'.repeat(100)], cwd: CWD, env: ENV, tty: false });
    await peer.waitFor((f) => f.method === 'process/output' && f.params.processId === 'y');
    const pids = server.childPids();
    output.pause(); // the parent stops reading its pipe
    await served;
    // Dropped as a stalled WebSocket would be: the session is over, `yes` is gone.
    expect(output.writableLength).toBeLessThan(256 * 1024); // about the high-water mark, not the process log
    expect(server.sessionCount).toBe(0);
    expect(pids.filter(running)).toEqual([]);
  });
});

describe('tether serve --listen stdio', () => {
  it('serves one connection on stdin/stdout: protocol lines only on stdout, logs on stderr, exit 0 at EOF with no orphan', async () => {
    const child = spawnTether(['serve', '--listen', 'stdio', '--log-level', 'debug'], { stdio: ['pipe', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout!.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
    const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
    const peer = new LinePeer(child.stdin!, child.stdout!);
    await peer.handshake();
    await peer.call('process/start', { processId: 'p', argv: ['sh', '-c', 'echo $$; exec sleep 1000'], cwd: CWD, env: ENV, tty: false });
    await peer.waitFor((f) => f.method === 'process/output' && f.params.processId === 'p');
    peer.sendLine('not json');
    await peer.waitFor((f) => f.error !== undefined);
    const pid = Number(peer.output('p').trim());
    expect(running(pid)).toBe(true);
    child.stdin!.end();
    expect(await exited).toBe(0);
    expect(running(pid)).toBe(false);
    // Every stdout line is one JSON message; nothing else was written there.
    expect(stdout.endsWith('\n')).toBe(true);
    const lines = stdout.slice(0, -1).split('\n');
    expect(lines.length).toBe(peer.lines.length);
    for (const line of lines) expect(() => JSON.parse(line)).not.toThrow();
    expect(stderr).toMatch(/tether serve on stdio/);
  });

  it('stops on SIGTERM with stdin still open, as tether serve does: its processes killed, exit 0', async () => {
    const child = spawnTether(['serve', '--listen', 'stdio'], { stdio: ['pipe', 'pipe', 'pipe'] });
    child.stderr!.resume();
    const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
    const peer = new LinePeer(child.stdin!, child.stdout!);
    await peer.handshake();
    await peer.call('process/start', { processId: 'p', argv: ['sh', '-c', 'echo $$; exec sleep 1000'], cwd: CWD, env: ENV, tty: false });
    await peer.waitFor((f) => f.method === 'process/output' && f.params.processId === 'p');
    const pid = Number(peer.output('p').trim());
    child.kill('SIGTERM');
    expect(await exited).toBe(0);
    expect(running(pid)).toBe(false);
    child.stdin!.destroy();
  });

  it('stops on SIGTERM while its client does not read stdout (the pipe full): exits 0, its processes killed', async () => {
    // The server's stdout is a FIFO: read by the test at first, then by nobody (see fifo.ts).
    const dir = mkdtempSync(path.join(tmpdir(), 'tether-stdio-full-'));
    const stdout = makeFifo(dir, 'stdout');
    const child = spawnTether(['serve', '--listen', 'stdio'], { stdio: ['pipe', stdout.fd, 'pipe'] });
    const reader = readFifo(stdout);
    try {
      let stderr = '';
      child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
      const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
      const peer = new LinePeer(child.stdin!, reader);
      await peer.handshake();
      await peer.call('process/start', { processId: 'y', argv: ['sh', '-c', 'echo $$; exec yes producer'], cwd: CWD, env: ENV, tty: false });
      await peer.waitFor((f) => f.method === 'process/output' && f.params.processId === 'y' && peer.output('y').includes('\n'));
      const pid = Number(peer.output('y').split('\n')[0]);
      reader.destroy(); // the client stops reading
      // The stdout pipe really full, then the producer asleep in write(2): the server holds it back.
      await untilHeldBack(stdout, pid);
      child.kill('SIGTERM');
      expect(await exited).toBe(0); // within the 10 s the docs promise (the test's timeout bounds it)
      expect(running(pid)).toBe(false);
      expect(stderr).toMatch(/stdout was not read for 2 s/);
    } finally {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      child.stdin!.destroy();
      reader.destroy();
      stdout.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('refuses options that only mean something on a port', async () => {
    const { parseServeArgs } = await import('../../../src/cli/serve/serve.js');
    expect(parseServeArgs(['--listen', 'stdio'], { TETHER_TOKEN: 'x' })).toMatchObject({ stdio: true, options: {} });
    expect(parseServeArgs(['--listen', 'stdio://'], {}).stdio).toBe(true);
    expect(() => parseServeArgs(['--listen', 'stdio', '--token-file', '/x'], {})).toThrow(/--token-file does not apply to --listen stdio/);
    expect(() => parseServeArgs(['--listen', 'stdio', '--allow-origin', 'x'], {})).toThrow(/--allow-origin does not apply/);
  });
});
