/**
 * `tether serve --replace` (issue #27, src/server/restart/handover.ts): the new server takes the
 * running one's listening socket over its state dir's admin socket; the old one stops. A
 * client connecting in a loop the whole time is never refused, and the new server answers
 * afterwards. Nothing is timed: the loop runs until the old server has exited and the new
 * one has accepted a number of connections after that.
 */
import { mkdtempSync, mkdirSync, rmSync, statSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { ExecClient } from '../../../src/client/index.js';
import { parseCloseNotice } from '../../../src/protocol/close-reasons.js';
import { adminSocketPath, checkAdminDir, HandoverError } from '../../../src/server/restart/handover.js';
import { runTether } from '../../helpers/cli.js';
import { startServerProcess, type ServerProcess } from '../../helpers/server-process.js';

const servers: ServerProcess[] = [];
const dirs: string[] = [];
afterEach(async () => {
  for (const s of servers.splice(0)) await s.dispose();
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

function stateDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'tether-rp-')); // 0700, ours
  dirs.push(dir);
  return dir;
}

/** Connects to `port` one connection after another until stopped, counting what happened. */
function connectLoop(port: number) {
  const counts = { ok: 0, refused: 0, other: [] as string[] };
  let stopping = false;
  let waiter = null as { atLeast: number; resolve: () => void } | null;
  const done = (async () => {
    while (!stopping) {
      await new Promise<void>((resolve) => {
        const socket = net.connect(port, '127.0.0.1');
        socket.once('connect', () => {
          counts.ok++;
          socket.destroy();
          resolve();
        });
        socket.once('error', (err: NodeJS.ErrnoException) => {
          if (err.code === 'ECONNREFUSED') counts.refused++;
          else counts.other.push(err.code ?? err.message);
          resolve();
        });
      });
      if (waiter && counts.ok >= waiter.atLeast) {
        waiter.resolve();
        waiter = null;
      }
    }
  })();
  return {
    counts,
    /** Resolves once `more` further connections were accepted. */
    acceptedMore: (more: number) => new Promise<void>((resolve) => (waiter = { atLeast: counts.ok + more, resolve })),
    stop: async () => {
      stopping = true;
      await done;
    },
  };
}

describe('tether serve --replace', () => {
  it('hands the listening socket over: no connection refused meanwhile, the new server answers after', async () => {
    const dir = stateDir();
    const old = await startServerProcess({ args: ['--state-dir', dir, '--log-level', 'debug'] });
    servers.push(old);
    await old.waitForLog(/offering the listening socket to a successor/);
    expect(statSync(adminSocketPath(dir)).mode & 0o777).toBe(0o600);
    const port = Number(new URL(old.url).port);
    const loop = connectLoop(port);
    await loop.acceptedMore(20); // the loop is running against the old server

    // A client of the old server is told why its socket closes (stopped, or restarting once sessions are kept).
    const oldClient = new WebSocket(old.url);
    const told = new Promise<{ code: number; reason: string }>((resolve) => oldClient.once('close', (code, reason) => resolve({ code, reason: reason.toString() })));
    await new Promise((resolve) => oldClient.once('open', resolve));

    // The same command line as the old one's (as systemd's ExecReload would run it), plus --replace.
    const successor = await startServerProcess({ args: ['--listen', old.url, '--state-dir', dir, '--replace'] });
    servers.push(successor);
    expect(successor.url).toBe(old.url); // the same socket, so the same port
    expect(await old.exited).toMatchObject({ code: 0 });
    expect(old.stderr()).toMatch(/handing the listening socket over to a successor/);
    const close = await told;
    expect(parseCloseNotice(close.code, close.reason), `${close.code} ${close.reason}`).not.toBeNull();
    await loop.acceptedMore(50); // after the old one is gone: the new one accepts
    await loop.stop();
    expect(loop.counts.refused).toBe(0);
    expect(loop.counts.other).toEqual([]);
    expect(loop.counts.ok).toBeGreaterThanOrEqual(70);

    expect((await fetch(`http://127.0.0.1:${port}/readyz`)).status).toBe(200);
    const client = await ExecClient.connect(successor.url, { clientName: 'replace-test' });
    try {
      const proc = client.spawn(['sh', '-c', 'echo hello; exit 3']);
      let out = '';
      proc.stdout.on('data', (d: Buffer) => (out += d.toString()));
      await proc.closed;
      expect(out).toBe('hello\n');
      expect(proc.exitCode).toBe(3);
    } finally {
      await client.close();
    }
    // The successor offers the same handover in its turn.
    expect(statSync(adminSocketPath(dir)).isSocket()).toBe(true);
  }, 30_000);

  it('a server on a state dir that does not exist yet creates it (0700) and offers the handover there', async () => {
    const dir = join(stateDir(), 'new', 'state');
    const server = await startServerProcess({ args: ['--state-dir', dir, '--log-level', 'debug'] });
    servers.push(server);
    await server.waitForLog(/offering the listening socket to a successor/);
    expect(statSync(dir).mode & 0o777).toBe(0o700);
    expect(server.stderr()).not.toMatch(/ warn /);
  });

  it('with no server on the state dir: a clear error, exit 1', async () => {
    const dir = stateDir();
    const run = await runTether(['serve', '--port', '0', '--state-dir', dir, '--replace']);
    expect(run.code).toBe(1);
    expect(run.stderr).toContain(`tether serve: --replace: no server to replace: nothing listens on ${adminSocketPath(dir)}`);
    expect(run.stdout).toBe('');
  });

  it('without a state dir: refused as a usage error', async () => {
    const run = await runTether(['serve', '--port', '0', '--state-dir', 'none', '--replace']);
    expect(run.code).toBe(2);
    expect(run.stderr).toContain('--replace needs a state dir');
  });

  it('a state dir open to others, or not a directory, is refused before anything is sent or asked', () => {
    const dir = stateDir();
    const open = join(dir, 'open');
    mkdirSync(open, { mode: 0o755 });
    expect(() => checkAdminDir(adminSocketPath(open))).toThrow(HandoverError);
    expect(() => checkAdminDir(adminSocketPath(open))).toThrow(/open to others \(mode 755\): chmod 700/);
    expect(() => checkAdminDir(adminSocketPath(join(dir, 'missing')))).toThrow(HandoverError);
    expect(() => checkAdminDir(adminSocketPath(dir), process.geteuid!() + 1)).toThrow(/not to us/);
    expect(() => checkAdminDir(adminSocketPath(dir))).not.toThrow();
  });

  it('a second server on the same port is told the port is what conflicts, and how to take over or run beside it', async () => {
    const dir = stateDir();
    const first = await startServerProcess({ args: ['--state-dir', dir] });
    servers.push(first);
    // The same port, and so the same state dir (per port by default; here given).
    const same = await runTether(['serve', '--port', String(first.port), '--state-dir', dir]);
    expect(same.code).toBe(1);
    expect(same.stderr.trim()).toBe(
      `tether serve: port ${first.port} and state dir ${dir} are in use by another tether server (pid ${first.pid}): to take over from it, add --replace; ` +
        'to run a second server beside it, give another --port (or --listen) and another --state-dir',
    );
    // Another port on the same state dir: the state dir is what conflicts.
    const other = await runTether(['serve', '--port', '0', '--state-dir', dir]);
    expect(other.code).toBe(1);
    expect(other.stderr.trim()).toBe(
      `tether serve: state dir ${dir} is in use by another tether server (pid ${first.pid}): stop it, take over from it with --replace, or use --state-dir with another directory`,
    );
  });
});
