/**
 * tether-only: `tether serve` flags, the URL as the first stdout line, and a graceful
 * SIGTERM that leaves no child behind.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { pathToFileURL } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { parseListen, parseServeArgs } from '../../../src/cli/serve/serve.js';
import { parseDuration, parseSize } from '../../../src/cli/units.js';
import { UsageError } from '../../../src/cli/usage.js';
import { RawClient } from '../../helpers/raw-client.js';

const BIN = join(import.meta.dirname, '..', '..', '..', 'bin', 'tether.js');
const children: ChildProcess[] = [];
afterEach(() => {
  for (const c of children.splice(0)) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
});

function serve(args: string[], env: NodeJS.ProcessEnv = {}): { child: ChildProcess; firstLine: Promise<string>; stderr: () => string } {
  // Today's behaviour (processes die with the server) unless a test asks for a state dir (issue #27).
  const stateDir = args.some((a) => a.startsWith('--state-dir')) || args.includes('--help') ? [] : ['--state-dir', 'none'];
  const child = spawn(process.execPath, [BIN, 'serve', ...args, ...stateDir], {
    env: { ...process.env, TETHER_TOKEN: '', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  children.push(child);
  let err = '';
  child.stderr!.on('data', (d: Buffer) => (err += d.toString()));
  const firstLine = new Promise<string>((resolve, reject) => {
    createInterface({ input: child.stdout! }).once('line', resolve);
    child.once('exit', (code) => reject(new Error(`exited ${code} before printing a URL: ${err}`)));
  });
  return { child, firstLine, stderr: () => err };
}

const exitOf = (child: ChildProcess) =>
  new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) resolve({ code: child.exitCode, signal: child.signalCode });
    else child.once('exit', (code, signal) => resolve({ code, signal }));
  });

const gone = (pid: number): boolean => {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).startsWith('Z');
  } catch {
    return true;
  }
};

describe('flag parsing', () => {
  it('parses durations and sizes, with errors naming the flag', () => {
    expect(parseDuration('--session-ttl', '30s')).toBe(30_000);
    expect(parseDuration('--session-ttl', '500ms')).toBe(500);
    expect(parseDuration('--session-ttl', '2m')).toBe(120_000);
    expect(parseDuration('--session-ttl', '1.5s')).toBe(1500);
    expect(parseDuration('--session-ttl', '1h')).toBe(3_600_000);
    // A bare number meant ms here and seconds to exec: every duration now carries its unit.
    expect(() => parseDuration('--session-ttl', '250')).toThrow("--session-ttl: '250' needs a unit (250s, 250ms, 250m…)");
    expect(() => parseDuration('--session-ttl', '3x')).toThrow(/--session-ttl: invalid duration '3x'/);
    expect(() => parseDuration('--session-ttl', '0s')).toThrow(/greater than zero/);
    expect(parseSize('--output-retention', '1MiB')).toBe(1024 * 1024);
    expect(parseSize('--output-retention', '64KiB')).toBe(65536);
    expect(parseSize('--output-retention', '2GiB')).toBe(2 * 1024 ** 3);
    expect(parseSize('--output-retention', '512B')).toBe(512);
    expect(parseSize('--output-retention', '4096')).toBe(4096);
    expect(() => parseSize('--output-retention', '1 parsec')).toThrow(/--output-retention: invalid size/);
    expect(() => parseSize('--output-retention', '-1MiB')).toThrow(UsageError);
  });

  it('parses --listen and refuses what it cannot serve', () => {
    expect(parseListen('ws://127.0.0.1:0')).toEqual({ host: '127.0.0.1', port: 0 });
    expect(parseListen('ws://[::1]:9000')).toEqual({ host: '::1', port: 9000 });
    expect(parseListen('ws://127.0.0.1')).toEqual({ host: '127.0.0.1', port: 8765 });
    expect(() => parseListen('http://127.0.0.1:1')).toThrow(/only ws:\/\/ or wss:\/\//);
    expect(() => parseServeArgs(['--listen', 'wss://127.0.0.1:1'], {})).toThrow(/needs --tls-cert and --tls-key/);
    expect(() => parseListen('nonsense')).toThrow(/--listen: invalid URL/);
  });

  it('maps every flag to a server option; the token comes from --token-file or TETHER_TOKEN', () => {
    const dir = mkdtempSync(join(tmpdir(), 'tether-cli-'));
    try {
      const file = join(dir, 'token');
      writeFileSync(file, 'from-file\n');
      const config = parseServeArgs(
        [
          '--listen', 'ws://127.0.0.1:0', '--session-ttl', '5s', '--token-file', file, '--output-retention', '2MiB',
          '--closed-retention', '1m', '--allow-origin', 'https://a', '--allow-origin', 'https://b', '--max-sessions', '7',
          '--max-processes', '3', '--max-message-size', '1MiB', '--max-connections', '9', '--stall-timeout', '10s',
          '--initialize-timeout', '2s',
        ],
        {},
      );
      expect(config.options).toEqual({
        host: '127.0.0.1', port: 0, sessionTtlMs: 5000, token: 'from-file', outputRetentionBytes: 2 * 1024 * 1024,
        closedRetentionMs: 60_000, allowedOrigins: ['https://a', 'https://b'], maxSessions: 7, maxProcessesPerSession: 3,
        maxMessageBytes: 1024 * 1024, maxConnections: 9, stallTimeoutMs: 10_000, initializeTimeoutMs: 2000,
        stateDir: null /* port 0: no successor could take it over */,
      });
      expect(parseServeArgs([], { TETHER_TOKEN: 'env-token' }).options.token).toBe('env-token');
      expect(() => parseServeArgs(['--token-file', join(dir, 'missing')], {})).toThrow(/--token-file: cannot read/);
      writeFileSync(file, '  \n');
      expect(() => parseServeArgs(['--token-file', file], {})).toThrow(/is empty/);
      // One token a line, each its own identity; an admin token; whole argv in audit lines.
      writeFileSync(file, 'alice\n\n  bob  \n');
      writeFileSync(join(dir, 'admin'), 'root\n');
      expect(parseServeArgs(['--token-file', file, '--admin-token-file', join(dir, 'admin'), '--audit-argv'], {}).options).toEqual({
        token: 'alice', tokens: ['bob'], adminToken: 'root', auditArgv: true, stateDir: expect.any(String),
      });
      expect(() => parseServeArgs(['--admin-token-file', file], {})).toThrow(/--admin-token-file: .* holds more than one token/);
      expect(() => parseServeArgs(['--max-sessions', 'lots'], {})).toThrow(/--max-sessions: expected a positive integer/);
      expect(() => parseServeArgs(['--bogus'], {})).toThrow(UsageError);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('tether serve --state-dir and --adopt-within', () => {
  it('defaults to the per-user state dir of its port (none on port 0), takes a path (made absolute) or none, and passes --adopt-within', () => {
    expect(parseServeArgs([], { XDG_STATE_HOME: '/xdg' }).options.stateDir).toBe('/xdg/tether/port-8765');
    expect(parseServeArgs(['--port', '9000'], { XDG_STATE_HOME: '/xdg' }).options.stateDir).toBe('/xdg/tether/port-9000');
    expect(parseServeArgs(['--listen', 'ws://127.0.0.1:9001'], { XDG_STATE_HOME: '/xdg' }).options.stateDir).toBe('/xdg/tether/port-9001');
    expect(parseServeArgs(['--port', '0'], { XDG_STATE_HOME: '/xdg' }).options.stateDir).toBeNull();
    expect(parseServeArgs(['--port', '0', '--state-dir', '/s'], {}).options.stateDir).toBe('/s');
    expect(parseServeArgs([], { HOME: '/nonexistent', XDG_RUNTIME_DIR: '/run/user/7' }).options.stateDir).toBe('/run/user/7/tether/port-8765');
    expect(parseServeArgs([], { HOME: '/nonexistent' }).options.stateDir).toBe(`/tmp/tether-${process.geteuid!()}/port-8765`);
    expect(parseServeArgs(['--state-dir', 'none'], {}).options.stateDir).toBeNull();
    expect(parseServeArgs(['--state-dir', 'rel/dir'], {}).options.stateDir).toBe(join(process.cwd(), 'rel/dir'));
    const opts = parseServeArgs(['--state-dir', '/s', '--adopt-within', '2m'], {}).options;
    expect([opts.stateDir, opts.adoptWithinMs]).toEqual(['/s', 120_000]);
    expect(parseServeArgs([], { XDG_STATE_HOME: '/xdg' }).options.adoptWithinMs).toBeUndefined();
    expect(() => parseServeArgs(['--state-dir', 'none', '--adopt-within', '5s'], {})).toThrow('--adopt-within needs a state dir (not --state-dir none');
    expect(() => parseServeArgs(['--adopt-within', 'soon'], {})).toThrow(/--adopt-within: /);
    expect(() => parseServeArgs(['--state-dir', ''], {})).toThrow('--state-dir: expected a directory or none');
    // One connection on stdio keeps nothing: no state dir, and the flags are refused.
    expect(parseServeArgs(['--listen', 'stdio'], {}).options.stateDir).toBeUndefined();
    expect(() => parseServeArgs(['--listen', 'stdio', '--state-dir', '/s'], {})).toThrow('--state-dir does not apply to --listen stdio');
  });
});

describe('tether serve', () => {
  it('exits 2 with a message on stderr (and nothing on stdout) for a bad flag', async () => {
    const child = spawn(process.execPath, [BIN, 'serve', '--session-ttl', 'soon'], { stdio: ['ignore', 'pipe', 'pipe'] });
    children.push(child);
    let out = '';
    let err = '';
    child.stdout!.on('data', (d: Buffer) => (out += d));
    child.stderr!.on('data', (d: Buffer) => (err += d));
    const { code } = await exitOf(child);
    expect(code).toBe(2);
    expect(out).toBe('');
    expect(err).toMatch(/--session-ttl: invalid duration 'soon'/);
  });

  it('prints --help on stdout', async () => {
    const child = spawn(process.execPath, [BIN, 'serve', '--help'], { stdio: ['ignore', 'pipe', 'pipe'] });
    children.push(child);
    let out = '';
    child.stdout!.on('data', (d: Buffer) => (out += d));
    expect((await exitOf(child)).code).toBe(0);
    expect(out).toMatch(/usage: tether serve/);
    expect(out).toMatch(/--session-ttl/);
  });

  // SIGHUP: the terminal running the server was closed; SIGQUIT: Ctrl-\\. All mean stop, cleanly.
  it.each(['SIGTERM', 'SIGHUP', 'SIGQUIT'] as const)('prints the bound URL first, serves, and on %s kills every child and exits 0', async (signal) => {
    const { child, firstLine, stderr } = serve(['--listen', 'ws://127.0.0.1:0']);
    const url = await firstLine;
    expect(url).toMatch(/^ws:\/\/127\.0\.0\.1:\d+$/);
    const c = await RawClient.connect(url);
    await c.handshake();
    await c.request('process/start', {
      processId: 'tree',
      argv: ['/bin/sh', '-c', 'sleep 300 & echo $$ $!; wait'],
      cwd: pathToFileURL(tmpdir()).href,
      env: { PATH: process.env.PATH ?? '/usr/bin:/bin' },
      tty: false,
    });
    await c.waitFor(() => /^\d+ \d+\n$/.test(c.output('tree')), 10_000, true);
    const pids = c.output('tree').trim().split(' ').map(Number);
    for (const p of pids) expect(gone(p)).toBe(false);
    child.kill(signal);
    const { code } = await exitOf(child);
    expect(code).toBe(0);
    const deadline = Date.now() + 5_000;
    while (pids.some((p) => !gone(p)) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    for (const p of pids) expect(gone(p), `pid ${p} outlived the server`).toBe(true);
    expect(stderr()).toMatch(new RegExp(`${signal}: shutting down`));
    await c.closed;
  });

  it('requires the token from TETHER_TOKEN', async () => {
    const { child, firstLine } = serve(['--listen', 'ws://127.0.0.1:0'], { TETHER_TOKEN: 'cli-secret' });
    const url = await firstLine;
    await expect(RawClient.connect(url)).rejects.toMatchObject({ status: 401, body: 'missing websocket bearer token' });
    const c = await RawClient.connect(url, { token: 'cli-secret' });
    await c.handshake();
    await c.close();
    child.kill('SIGINT');
    expect((await exitOf(child)).code).toBe(0);
  });
});
