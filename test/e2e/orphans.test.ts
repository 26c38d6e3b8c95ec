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
 *
 * Every ending runs twice (issue #27): with `--state-dir none`, as above; and with a state
 * dir, where a server that dies or stops leaves its keepers running for `--adopt-within`
 * (2 s here): every escapee is alive right after the server exited, and with no successor
 * nothing is left one second after that time: no process, no keeper, no socket in DIR/k.
 */
import { randomInt } from 'node:crypto';
import { afterEach, describe, expect, it } from 'vitest';
import { RawClient } from '../helpers/raw-client.js';
import {
  disposeStateDir,
  eventually,
  isLive,
  keeperPids,
  keeperSocketFiles,
  makeStateDir,
  processesWithMarker,
  serverUsers,
  startServerProcess,
  type ServerProcess,
} from '../helpers/server-process.js';

const CWD = 'file:///tmp';
const ENV = { PATH: process.env.PATH ?? '/usr/bin:/bin' };
const b64 = (s: string) => Buffer.from(s).toString('base64');

/** How long keepers wait for an adopter in the state-dir runs. */
const ADOPT_WITHIN_MS = 2_000;

let servers: ServerProcess[] = [];
let clients: RawClient[] = [];
let stateDirs: string[] = [];
afterEach(async () => {
  for (const c of clients.splice(0)) await c.close().catch(() => {});
  for (const s of servers.splice(0)) await s.dispose();
  for (const d of stateDirs.splice(0)) await disposeStateDir(d);
});

/** 'none': `--state-dir none` (no keeper outlives its server); 'kept': a state dir of its own. */
type Mode = 'none' | 'kept';

async function serve(
  user: 'self' | 'nobody',
  mode: Mode,
  args: string[] = [],
): Promise<{ server: ServerProcess; client: RawClient; sessionId: string; stateDir: string }> {
  const stateDir = mode === 'none' ? 'none' : makeStateDir(user);
  if (mode === 'kept') stateDirs.push(stateDir);
  const modeArgs = mode === 'none' ? [] : ['--adopt-within', `${ADOPT_WITHIN_MS}ms`];
  const server = await startServerProcess({ user, stateDir, args: [...modeArgs, ...args] });
  servers.push(server);
  const client = await RawClient.connect(server.url);
  clients.push(client);
  const { sessionId } = await client.handshake();
  return { server, client, sessionId, stateDir };
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

/**
 * The kept run of a server's ending: every escapee alive once the server exited; all gone,
 * with their keepers and sockets, within a second after `--adopt-within` — and not before it.
 */
async function expectKeptThenGone(stateDir: string, marks: string[], signalledAt: number, exitedAt: number): Promise<void> {
  const missing = marks.filter((m) => processesWithMarker(m, 'sleep').length === 0);
  expect(missing.map((m) => SCENARIOS[marks.indexOf(m)]), 'escapees alive right after the server exited').toEqual([]);
  const keepers = keeperPids(stateDir);
  expect(keepers.length, 'keepers listening in DIR/k').toBeGreaterThanOrEqual(marks.length);
  const gone = () => marks.every((m) => processesWithMarker(m).length === 0) && keepers.every((pid) => !isLive(pid));
  const within = exitedAt + ADOPT_WITHIN_MS + 1_000 - Date.now();
  await eventually(gone, within, 10);
  const goneAt = Date.now();
  const left = marks.filter((m) => processesWithMarker(m).length > 0);
  expect(left.map((m) => `${SCENARIOS[marks.indexOf(m)]}: pids ${processesWithMarker(m).join(' ')}`)).toEqual([]);
  expect(keepers.filter(isLive), 'keepers alive').toEqual([]);
  expect(keeperSocketFiles(stateDir), 'sockets left in DIR/k').toEqual([]);
  // Not killed before the time was up (the countdown starts when the server is gone).
  expect(goneAt - signalledAt).toBeGreaterThanOrEqual(ADOPT_WITHIN_MS);
}


describe.each(serverUsers())('no orphans (server runs as %s)', (user) => {
  describe.each(['none', 'kept'] as const)('state dir: %s', (mode) => {
    for (const signal of ['SIGKILL', 'SIGHUP', 'SIGTERM'] as const) {
      const title =
        mode === 'none'
          ? `${signal} to the server kills every descendant of every session`
          : `${signal} to the server with no successor: everything lives until --adopt-within, then nothing is left`;
      it(title, async () => {
        const { server, client, stateDir } = await serve(user, mode);
        const marks = markers(5);
        await startEscapees(client, marks);
        const signalledAt = Date.now();
        server.child.kill(signal);
        await server.exited;
        const exitedAt = Date.now();
        if (mode === 'none') expect(await survivorsAfterASecond(marks)).toEqual([]);
        else await expectKeptThenGone(stateDir, marks, signalledAt, exitedAt);
      }, 15_000);
    }

    it('session expiry kills every descendant, also of a process already closed and forgotten', async () => {
      const { server, client, sessionId, stateDir } = await serve(user, mode, ['--session-ttl', '300ms', '--closed-retention', '100ms']);
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
      if (mode === 'kept') {
        // The expired session's keepers were released: they exit and take their sockets along.
        await eventually(() => keeperSocketFiles(stateDir).length === 0, 1_000);
        expect(keeperSocketFiles(stateDir), 'sockets left in DIR/k').toEqual([]);
      }
    });

    it('process/terminate kills what a process left behind after it exited', async () => {
      const { client } = await serve(user, mode);
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
  });
});
