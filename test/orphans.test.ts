/**
 * No orphans, whatever ends the server or the session (issue 12). `tether serve` runs as a
 * separate process — as root and as nobody — and each ending (kill -9, SIGHUP, SIGTERM,
 * session expiry) must leave nothing of five kinds of escapees alive one second later:
 *   (a) `sh -c 'sleep N & sleep N & wait'`        background jobs of a script
 *   (b) `sh -i` on a pty running `sleep N &`      a job in a process group of its own
 *   (c) `setsid -f sleep N`                       a new session
 *   (d) a double fork                             orphaned to whatever reaps orphans
 *   (e) `nohup sleep N &` whose parent exited     (and, at expiry, whose process was already
 *                                                  closed and forgotten by the session)
 * plus `process/terminate` of a process whose child outlived it. Survivors are found by a
 * unique marker in their argv (the sleep duration), anywhere on the machine.
 */
import { randomInt } from 'node:crypto';
import { chownSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { RawClient } from './helpers/raw-client.js';
import { eventually, NOBODY, processesWithMarker, serverUsers, startServerProcess, type ServerProcess } from './helpers/server-process.js';

const CWD = 'file:///tmp';
const ENV = { PATH: process.env.PATH ?? '/usr/bin:/bin' };
const b64 = (s: string) => Buffer.from(s).toString('base64');

let servers: ServerProcess[] = [];
let clients: RawClient[] = [];
const stateDirs: string[] = [];
afterEach(async () => {
  for (const c of clients.splice(0)) await c.close().catch(() => {});
  for (const s of servers.splice(0)) await s.dispose();
  for (const d of stateDirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

/** A state dir the server's user creates itself (issue #27), in a parent of its own. */
function keptStateDir(user: 'self' | 'nobody'): string {
  const parent = mkdtempSync(join(tmpdir(), 'tether-orphans-'));
  stateDirs.push(parent);
  if (user === 'nobody') chownSync(parent, NOBODY, NOBODY);
  return join(parent, 'state');
}

async function serve(user: 'self' | 'nobody', args: string[] = []): Promise<{ server: ServerProcess; client: RawClient; sessionId: string }> {
  const server = await startServerProcess({ user, args });
  servers.push(server);
  const client = await RawClient.connect(server.url);
  clients.push(client);
  const { sessionId } = await client.handshake();
  return { server, client, sessionId };
}

/** A sleep duration no other process on the machine has in its argv. */
function markers(count: number): string[] {
  const base = randomInt(1000, 9000);
  const run = randomInt(1_000_000, 9_999_999);
  return Array.from({ length: count }, (_, i) => `${base + i}.${run}`);
}

const SCENARIOS = ['(a) background jobs', '(b) sh -i job', '(c) setsid -f', '(d) double fork', '(e) nohup, parent exited'] as const;

/** Starts the five escapees, one marker each; resolves once every marker runs. */
async function startEscapees(c: RawClient, marks: string[]): Promise<void> {
  const [a, b, cc, d, e] = marks as [string, string, string, string, string];
  const start = (processId: string, argv: string[], extra: object = {}) =>
    c.request('process/start', { processId, argv, cwd: CWD, env: ENV, tty: false, ...extra });
  await start('a', ['/bin/sh', '-c', `sleep ${a} & sleep ${a} & wait`]);
  await start('b', ['/bin/sh', '-i'], { tty: true });
  await c.request('process/write', { processId: 'b', chunk: b64(`sleep ${b} &\n`), writeId: 'b1' });
  await start('c', ['setsid', '-f', 'sleep', cc]);
  await start('d', ['/bin/sh', '-c', `(sleep ${d} &); exec sleep ${d}`]);
  await start('e', ['/bin/sh', '-c', `nohup sleep ${e} >/dev/null 2>&1 &`]);
  // The keepers' argv has most markers too: wait for the sleeps themselves.
  const running = await eventually(() => marks.every((m) => processesWithMarker(m, 'sleep').length > 0), 10_000);
  expect(running, 'every escapee is running').toBe(true);
}

/** Markers still found in some process's argv within a second (empty: nothing escaped). */
async function survivorsAfterASecond(marks: string[]): Promise<string[]> {
  const alive = () => marks.filter((m) => processesWithMarker(m).length > 0);
  await eventually(() => alive().length === 0, 1_000);
  const left = alive();
  return left.map((m) => `${SCENARIOS[marks.indexOf(m)] ?? m}: pids ${processesWithMarker(m).join(' ')}`);
}

describe.each(serverUsers())('no orphans (server runs as %s)', (user) => {
  for (const signal of ['SIGKILL', 'SIGHUP', 'SIGTERM'] as const) {
    it(`${signal} to the server kills every descendant of every session`, async () => {
      const { server, client } = await serve(user);
      const marks = markers(5);
      await startEscapees(client, marks);
      server.child.kill(signal);
      await server.exited;
      expect(await survivorsAfterASecond(marks)).toEqual([]);
    });
  }

  // With a state dir (issue #27) the same endings keep every tree for --adopt-within (for a
  // successor to adopt); with none coming, nothing is left a second after it.
  for (const signal of ['SIGKILL', 'SIGHUP', 'SIGTERM'] as const) {
    it(`with a state dir, ${signal} to the server: every descendant lives on until --adopt-within, then nothing is left`, async () => {
      const stateDir = keptStateDir(user);
      const { server, client } = await serve(user, ['--state-dir', stateDir, '--adopt-within', '1s']);
      const marks = markers(5);
      await startEscapees(client, marks);
      server.child.kill(signal);
      await server.exited;
      expect(marks.filter((m) => processesWithMarker(m, 'sleep').length === 0), 'escapees killed with the server').toEqual([]);
      const alive = () => marks.filter((m) => processesWithMarker(m).length > 0);
      await eventually(() => alive().length === 0, 2_000);
      expect(alive().map((m) => `${SCENARIOS[marks.indexOf(m)] ?? m}: pids ${processesWithMarker(m).join(' ')}`)).toEqual([]);
      expect(readdirSync(join(stateDir, 'k')), 'keeper sockets left').toEqual([]);
    });
  }

  // These endings are the server's own doing: the same with a state dir (issue #27).
  for (const kept of [false, true]) {
  const withDir = (args: string[]) => (kept ? [...args, '--state-dir', keptStateDir(user)] : args);
  const named = (name: string) => (kept ? `${name} (with a state dir)` : name);

  it(named('session expiry kills every descendant, also of a process already closed and forgotten'), async () => {
    const { server, client, sessionId } = await serve(user, withDir(['--session-ttl', '300ms', '--closed-retention', '100ms']));
    const marks = markers(5);
    await startEscapees(client, marks);
    // (e)'s shell has exited and its output is closed: once the server forgot the process,
    // only its keeper still knows about the nohup'ed sleep.
    await client.waitClosed('e');
    let unknown = false;
    for (let i = 0; i < 100 && !unknown; i++) {
      const reply = await client.call('process/read', { processId: 'e' });
      unknown = reply.error !== undefined;
      if (!unknown) await new Promise((r) => setTimeout(r, 50));
    }
    expect(unknown, 'the closed process was removed from the session').toBe(true);
    await client.drop();
    await server.waitForLog(new RegExp(`session ${sessionId.slice(0, 8)}\\S* expired`));
    expect(await survivorsAfterASecond(marks)).toEqual([]);
  });

  it(named('process/terminate kills what a process left behind after it exited'), async () => {
    const { client } = await serve(user, withDir([]));
    const [mark] = markers(1) as [string];
    await client.request('process/start', {
      processId: 'parent',
      argv: ['/bin/sh', '-c', `sleep ${mark} >/dev/null 2>&1 & setsid -f sleep ${mark} >/dev/null 2>&1; echo started`],
      cwd: CWD,
      env: ENV,
      tty: false,
    });
    await client.waitClosed('parent');
    expect(await eventually(() => processesWithMarker(mark, 'sleep').length === 2, 5_000)).toBe(true);
    // Codex semantics kept: the process itself had exited, so running is false.
    expect(await client.request('process/terminate', { processId: 'parent' })).toEqual({ running: false });
    expect(await survivorsAfterASecond([mark])).toEqual([]);
  });
  }
});
