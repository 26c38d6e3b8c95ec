/**
 * `tether relay` from its command line: the listen URL is the first line of stdout; the
 * downstream token is generated into a 0600 file (and required); --insecure-no-token only on
 * loopback; --to is required; --listen stdio says plainly it is not in this build.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { createServer, type AddressInfo } from 'node:net';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ExecClient } from '../../src/client/index.js';
import { startServer, type TetherServer } from '../../src/server/index.js';
import { runTether, tetherArgs } from '../helpers/cli.js';
import { collect } from '../helpers/client-util.js';
import { makeFifo, readFifo, untilHeldBack } from '../helpers/fifo.js';
import { waitGone } from '../helpers/procs.js';
import { serverInternals } from '../../src/server/server.js';

let upstream: TetherServer;
let dir: string;

beforeAll(async () => {
  upstream = await startServer({ port: 0 });
  dir = mkdtempSync(join(tmpdir(), 'tether-relay-cli-'));
});

afterAll(async () => {
  await upstream?.close();
  rmSync(dir, { recursive: true, force: true });
});

/** Starts `tether relay args…`; resolves with its first stdout line and a stop function. */
async function relay(args: string[]): Promise<{ url: string; stderr: () => string; stop: () => Promise<void> }> {
  const child = spawn(process.execPath, tetherArgs(['relay', ...args]), { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, TETHER_TOKEN: '' } });
  let err = '';
  child.stderr.on('data', (d: Buffer) => (err += d.toString()));
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const url = await new Promise<string>((resolve, reject) => {
    createInterface({ input: child.stdout }).once('line', resolve);
    child.once('exit', (code) => reject(new Error(`tether relay exited ${code}: ${err}`)));
  });
  return {
    url,
    stderr: () => err,
    stop: async () => {
      child.kill('SIGTERM');
      await exited;
    },
  };
}

describe('tether relay (CLI)', () => {
  it('prints its loopback URL first, writes a 0600 token file and requires the token', async () => {
    const tokenFile = join(dir, 'sub', 'relay.token');
    const r = await relay(['--to', upstream.url, '--listen-token-file', tokenFile]);
    try {
      expect(r.url).toMatch(/^ws:\/\/127\.0\.0\.1:\d+$/);
      expect(statSync(tokenFile).mode & 0o777).toBe(0o600);
      expect(r.stderr()).toContain(tokenFile);
      const token = readFileSync(tokenFile, 'utf8').trim();
      await expect(ExecClient.connect(r.url, { clientName: 'no-token', recoveryDeadlineMs: 1000 })).rejects.toThrow(/401/);
      const client = await ExecClient.connect(r.url, { clientName: 'relay-cli', token });
      const proc = client.spawn(['sh', '-c', 'echo through the relay']);
      expect(await collect(proc.stdout)).toBe('through the relay\n');
      await client.close();
    } finally {
      await r.stop();
    }
  });

  it('reuses a token file it is given, and refuses one others can read', async () => {
    const given = join(dir, 'given.token');
    writeFileSync(given, 'my-own-token\n', { mode: 0o600 });
    const r = await relay(['--to', upstream.url, '--listen-token-file', given]);
    try {
      const client = await ExecClient.connect(r.url, { clientName: 'relay-cli', token: 'my-own-token' });
      await client.close();
    } finally {
      await r.stop();
    }
    const open = join(dir, 'open.token');
    writeFileSync(open, 'x\n', { mode: 0o644 });
    const refused = await runTether(['relay', '--to', upstream.url, '--listen-token-file', open]);
    expect(refused.code).toBe(2);
    expect(refused.stderr).toMatch(/can be read by other users/);
  });

  it('--insecure-no-token: none needed on loopback, refused elsewhere and with stdio; --to required', async () => {
    const r = await relay(['--to', upstream.url, '--insecure-no-token']);
    try {
      const client = await ExecClient.connect(r.url, { clientName: 'relay-cli' });
      await client.close();
    } finally {
      await r.stop();
    }
    const wide = await runTether(['relay', '--to', upstream.url, '--insecure-no-token', '--listen', 'ws://0.0.0.0:0']);
    expect(wide.code).toBe(2);
    expect(wide.stderr.trim().split('\n')).toHaveLength(1);
    expect(wide.stderr).toMatch(/loopback listener only/);
    const missing = await runTether(['relay']);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toMatch(/--to URL is required/);
    const stdio = await runTether(['relay', '--to', upstream.url, '--listen', 'stdio', '--insecure-no-token']);
    expect(stdio.code).toBe(2);
    expect(stdio.stderr).toMatch(/does not apply to --listen stdio/);
  });

  it('--listen stdio: one client on stdin/stdout; stdin EOF closes the upstream session at once, its processes killed', async () => {
    const child = spawn(process.execPath, tetherArgs(['relay', '--to', upstream.url, '--listen', 'stdio']), { stdio: ['pipe', 'pipe', 'pipe'] });
    let err = '';
    child.stderr!.on('data', (d: Buffer) => (err += d.toString()));
    const lines = createInterface({ input: child.stdout! });
    const replies: Array<Record<string, any>> = [];
    const waiters: Array<() => void> = [];
    lines.on('line', (line) => {
      replies.push(JSON.parse(line) as Record<string, any>);
      waiters.splice(0).forEach((w) => w());
    });
    const reply = async (id: number) => {
      for (;;) {
        const found = replies.find((r) => r.id === id);
        if (found) return found;
        await new Promise<void>((resolve) => waiters.push(resolve));
      }
    };
    const send = (message: object) => child.stdin!.write(`${JSON.stringify(message)}\n`);
    send({ id: 1, method: 'initialize', params: { clientName: 'stdio-relay' } });
    expect((await reply(1)).result).toHaveProperty('sessionId');
    send({ method: 'initialized', params: {} });
    send({ id: 2, method: 'process/start', params: { processId: 'p', argv: ['sleep', '60'], cwd: 'file:///', env: {}, tty: false } });
    expect((await reply(2)).result).toEqual({ processId: 'p', sandboxType: 'none' });
    const upstreamSession = [...serverInternals(upstream).sessions.values()].find((s) => s.processes.has('p'))!;
    const upstreamProc = upstreamSession.processes.get('p')!;
    const gone = new Promise<void>((resolve) => upstream.on('session-expired', (id: string) => id === upstreamSession.id && resolve()));
    const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
    child.stdin!.end();
    await gone; // the upstream session was closed, not left detached for its TTL
    await upstreamProc.whenClosed;
    expect(upstreamProc.exitCode).toBe(137);
    expect(await exited).toBe(0);
    expect(err).toMatch(/upstream session was closed/);
  });
  it('--listen stdio: stops on SIGTERM while its client does not read stdout (the pipe full): exits 0, the upstream process killed', async () => {
    // The relay's stdout is a FIFO: read by the test at first, then by nobody (see fifo.ts).
    const stdout = makeFifo(dir, 'relay-stdout');
    const child = spawn(process.execPath, tetherArgs(['relay', '--to', upstream.url, '--listen', 'stdio']), { stdio: ['pipe', stdout.fd, 'pipe'] });
    const reader = readFifo(stdout);
    try {
      let err = '';
      child.stderr!.on('data', (d: Buffer) => (err += d.toString()));
      const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
      let out = '';
      let firstLine: (line: string) => void = () => {};
      const pidLine = new Promise<string>((resolve) => (firstLine = resolve));
      const lines = createInterface({ input: reader });
      lines.on('line', (line) => {
        const frame = JSON.parse(line) as Record<string, any>;
        if (frame.method !== 'process/output') return;
        out += Buffer.from(frame.params.chunk as string, 'base64').toString();
        if (out.includes('\n')) firstLine(out.split('\n')[0]!);
      });
      const send = (message: object) => child.stdin!.write(`${JSON.stringify(message)}\n`);
      send({ id: 1, method: 'initialize', params: { clientName: 'stdio-relay' } });
      send({ method: 'initialized', params: {} });
      send({ id: 2, method: 'process/start', params: { processId: 'y', argv: ['sh', '-c', 'echo $$; exec yes producer'], cwd: 'file:///', env: { PATH: '/usr/bin:/bin' }, tty: false } });
      const pid = Number(await pidLine);
      lines.close();
      reader.destroy(); // the client stops reading
      // The stdout pipe really full, then the producer asleep in write(2): held back upstream.
      await untilHeldBack(stdout, pid);
      child.kill('SIGTERM');
      expect(await exited).toBe(0); // within the 10 s the docs promise (the test's timeout bounds it)
      expect(err).toMatch(/stdout was not read for 2 s/);
      expect(await waitGone([pid], 10_000)).toEqual([]); // its upstream session closed
    } finally {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      child.stdin!.destroy();
      reader.destroy();
      stdout.close();
    }
  });
  it('says at once that it cannot reach its upstream, and keeps saying it while it retries', async () => {
    // An upstream that is down: it takes each connection and drops it at once.
    const down = createServer((socket) => socket.destroy());
    await new Promise<void>((resolve) => down.listen(0, '127.0.0.1', resolve));
    const url = `ws://127.0.0.1:${(down.address() as AddressInfo).port}`;
    const child = spawn(process.execPath, tetherArgs(['relay', '--to', url, '--insecure-no-token']), { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, TETHER_TOKEN: '' } });
    const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
    const stderr = createInterface({ input: child.stderr! });
    const seen: string[] = [];
    const line = (pattern: RegExp) =>
      new Promise<string>((resolve) => {
        const found = seen.find((l) => pattern.test(l));
        if (found) return resolve(found);
        const onLine = (l: string) => pattern.test(l) && (stderr.off('line', onLine), resolve(l));
        stderr.on('line', onLine);
      });
    stderr.on('line', (l) => seen.push(l));
    try {
      // Within a second by hand (docs/relay.md); here the test's timeout bounds the wait.
      expect(await line(/cannot reach/)).toContain(`cannot reach ${url} (`);
      expect(await line(/still cannot reach/)).toMatch(/still cannot reach the upstream .* after \d+s; retrying for up to \d+m\d+s more/);
    } finally {
      child.kill('SIGTERM');
      await exited;
      down.close();
    }
  });
});
