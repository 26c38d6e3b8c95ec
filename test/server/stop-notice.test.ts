/**
 * A server that stops tells its clients why (issue #27, docs/protocol.md "When the server
 * stops"): close 1001 with tether's "stopped" reason, and the client fails at once with the
 * true sentence instead of waiting out its recovery deadline; close 1012 with the
 * "restarting" reason, and the client reconnects at once. Every recovery deadline here is
 * 60 s and every test's timeout far below it: a client that waited would fail the test by
 * timing out, so nothing is measured by the clock.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { ExecClient, ServerStoppedError, SessionLostError, type RestartingEvent, type StateChange } from '../../src/client/index.js';
import type { Connection } from '../../src/server/connection/connection.js';
import { restartingReason } from '../../src/protocol/close-reasons.js';
import { spawnTether } from '../helpers/cli.js';
import { startServerProcess, type ServerProcess } from '../helpers/server-process.js';
import { startTetherServer, type TetherTarget } from '../helpers/tether.js';
import { collect, waitFor } from '../helpers/client-util.js';
import { serverInternals } from '../../src/server/server.js';

const DEADLINE_MS = 60_000;
const TEST_TIMEOUT_MS = 20_000;

/** Numbered lines, one every 50 ms, for as long as it lives. */
const PACED = ['sh', '-c', 'i=0; while :; do i=$((i+1)); echo "line $i"; sleep 0.05; done'];

const servers: ServerProcess[] = [];
const targets: TetherTarget[] = [];
const clients: ExecClient[] = [];

afterEach(async () => {
  for (const client of clients.splice(0)) await client.close().catch(() => {});
  for (const server of servers.splice(0)) await server.dispose();
  for (const target of targets.splice(0)) await target.stop();
});

describe('a server that stops (SIGTERM) tells its clients', () => {
  it(
    'tether exec exits 255 with "server stopped; process killed" long before its recovery deadline',
    async () => {
      const server = await startServerProcess();
      servers.push(server);
      const cli = spawnTether(['exec', '--url', server.url, '--recovery-deadline', '60s', ...PACED], { stdio: ['ignore', 'pipe', 'pipe'] });
      let stdout = '';
      let stderr = '';
      cli.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
      const exited = new Promise<number | null>((resolve) => cli.once('close', (code) => resolve(code)));
      await new Promise<void>((resolve) => {
        cli.stdout!.on('data', (d: Buffer) => {
          stdout += d.toString();
          if (stdout.includes('line 3\n')) resolve();
        });
      });
      server.child.kill('SIGTERM');
      const code = await exited;
      expect(code).toBe(255);
      expect(stderr).toContain('tether exec: server stopped; process killed');
      expect(stderr).not.toMatch(/reconnecting|TTL/);
      expect(stdout).toMatch(/^line 1\nline 2\nline 3\n/);
      expect(await server.exited).toMatchObject({ code: 0 });
    },
    TEST_TIMEOUT_MS,
  );

  it(
    'an ExecClient fails at once: the process handle errors with ServerStoppedError, no recovery is tried',
    async () => {
      const server = await startServerProcess();
      servers.push(server);
      const client = await ExecClient.connect(server.url, { clientName: 'stop-notice-test', recoveryDeadlineMs: DEADLINE_MS });
      clients.push(client);
      const states: StateChange[] = [];
      client.on('state', (s) => states.push(s));
      const proc = client.spawn(PACED);
      const errored = new Promise<Error>((resolve) => proc.once('error', resolve));
      await waitFor<Buffer>(proc.stdout, 'data');
      server.child.kill('SIGTERM');
      const error = await errored;
      expect(error).toBeInstanceOf(ServerStoppedError);
      expect(error).toBeInstanceOf(SessionLostError);
      expect((error as SessionLostError).reason).toBe('stopped');
      expect(error.message).toMatch(/server stopped/);
      await expect(proc.closed).rejects.toBe(error);
      expect(client.state).toBe('failed');
      expect(states.map((s) => s.state)).toEqual(['failed']); // never 'recovering'
    },
    TEST_TIMEOUT_MS,
  );
});

describe('a close that says "restarting" (1012, the server keeps the session)', () => {
  /** An in-process server whose first connection the test closes as a restarting server would. */
  async function serverClosingFirstConnection(code: number, reason: string) {
    const target = await startTetherServer();
    targets.push(target);
    const connections: Connection[] = [];
    serverInternals(target.server).onConnection((conn) => connections.push(conn));
    return { target, closeFirst: () => connections[0]!.ws.close(code, reason) };
  }

  it(
    'the client reconnects at once, says "restarting" as a typed event, and loses nothing',
    async () => {
      const { target, closeFirst } = await serverClosingFirstConnection(1012, restartingReason(30_000));
      const client = await ExecClient.connect(target.url, { clientName: 'restart-notice-test', recoveryDeadlineMs: DEADLINE_MS });
      clients.push(client);
      const events: string[] = [];
      const restarting = new Promise<RestartingEvent>((resolve) => client.once('restarting', resolve));
      client.on('restarting', () => events.push('restarting'));
      client.on('state', (s) => events.push(s.state));
      const proc = client.spawn(['sh', '-c', 'read line; for i in 1 2 3; do echo "line $i"; done; exit 7'], { pipeStdin: true });
      const output = collect(proc.stdout);
      await waitFor(proc, 'spawn');
      closeFirst();
      expect(await restarting).toEqual({ generation: 1, keptMs: 30_000 });
      await waitFor(client, 'recovered');
      proc.stdin!.end('go\n');
      expect(await output).toBe('line 1\nline 2\nline 3\n');
      expect(await proc.closed.then(() => proc.exitCode)).toBe(7);
      expect(events).toEqual(['restarting', 'recovering', 'connected']);
    },
    TEST_TIMEOUT_MS,
  );

  it(
    'tether exec says "server restarting; session kept for 30 s; reconnecting" and carries on',
    async () => {
      const { target, closeFirst } = await serverClosingFirstConnection(1012, restartingReason(30_000));
      const cli = spawnTether(['exec', '--url', target.url, '--recovery-deadline', '60s', 'sh', '-c', 'echo ready; read l; echo "got $l"'], {
        stdio: ['pipe', 'pipe', 'pipe'],
      });
      let stdout = '';
      let stderr = '';
      const exited = new Promise<number | null>((resolve) => cli.once('close', (code) => resolve(code)));
      await new Promise<void>((resolve) => {
        cli.stdout!.on('data', (d: Buffer) => {
          stdout += d.toString();
          if (stdout.includes('ready\n')) resolve();
        });
      });
      await new Promise<void>((resolve) => {
        cli.stderr!.on('data', (d: Buffer) => {
          stderr += d.toString();
          if (stderr.includes('reconnected')) resolve();
        });
        closeFirst();
      });
      cli.stdin!.end('x\n');
      expect(await exited).toBe(0);
      expect(stdout).toBe('ready\ngot x\n');
      expect(stderr).toContain('tether exec: server restarting; session kept for 30 s; reconnecting\n');
      expect(stderr).not.toContain('connection lost');
    },
    TEST_TIMEOUT_MS,
  );

  it(
    "a 1001 or 1012 without tether's reason (a proxy's) is a plain drop: recovered, no restart or stop told",
    async () => {
      for (const [code, reason] of [
        [1001, 'proxy going away'],
        [1012, ''],
      ] as const) {
        const { target, closeFirst } = await serverClosingFirstConnection(code, reason);
        const client = await ExecClient.connect(target.url, { clientName: 'proxy-close-test', recoveryDeadlineMs: DEADLINE_MS });
        clients.push(client);
        const told: string[] = [];
        client.on('restarting', () => told.push('restarting'));
        const proc = client.spawn(['sh', '-c', 'read line; echo done'], { pipeStdin: true });
        const output = collect(proc.stdout);
        await waitFor(proc, 'spawn');
        closeFirst();
        await waitFor(client, 'recovered');
        proc.stdin!.end('go\n');
        expect(await output).toBe('done\n');
        expect(told).toEqual([]);
      }
    },
    TEST_TIMEOUT_MS,
  );
});
