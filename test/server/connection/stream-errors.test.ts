/**
 * tether-only: a child's output stream that fails (read ECONNRESET on a reused descriptor,
 * an error on a pty) fails that process alone: it is killed, `process/read` says why in
 * `failure`, and the server keeps serving every other process, in the same session or not.
 */
import { tmpdir } from 'node:os';
import { pathToFileURL } from 'node:url';
import type { ChildProcess } from 'node:child_process';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import type { ManagedProcess } from '../../../src/server/output/process.js';
import { setKeeperLaunch } from '../../../src/server/local/keeper/keeper.js';
import { RawClientPool, b64, type RawClient } from '../../helpers/raw-client.js';
import { startTetherServer, type TetherTarget } from '../../helpers/tether.js';
import { serverInternals } from '../../../src/server/server.js';

// Keep a hand on every child's streams (the keeper's pipes), to make one fail as a reused
// descriptor would.
const spawned = vi.hoisted(() => [] as ChildProcess[]);
vi.mock('node:child_process', async (importOriginal) => {
  const original = await importOriginal<typeof import('node:child_process')>();
  const spawn = (...args: Parameters<typeof original.spawn>) => {
    const child = original.spawn(...args);
    spawned.push(child);
    return child;
  };
  return { ...original, default: { ...original, spawn }, spawn };
});

let target: TetherTarget;
const pool = new RawClientPool();

let launch: 'zygote' | 'spawn';
beforeAll(async () => {
  // Spawned keepers (not the zygote's, which Node does not spawn): their streams are at hand.
  launch = setKeeperLaunch('spawn');
  target = await startTetherServer({});
});
afterEach(() => pool.dropAll());
afterAll(async () => {
  await target?.stop();
  setKeeperLaunch(launch);
});

const cwd = pathToFileURL(tmpdir()).href;
const env = { PATH: process.env.PATH ?? '/usr/bin:/bin' };

async function session(): Promise<{ c: RawClient; sessionId: string }> {
  const c = await pool.connect(target.url);
  const { sessionId } = await c.handshake();
  return { c, sessionId };
}

function managed(sessionId: string, processId: string): ManagedProcess {
  const proc = serverInternals(target.server).sessions.get(sessionId)?.processes.get(processId);
  if (!proc) throw new Error(`no process ${processId} in session ${sessionId}`);
  return proc;
}

const reset = () => Object.assign(new Error('read ECONNRESET'), { code: 'ECONNRESET', errno: -104, syscall: 'read' });

/** A program that echoes each input line, so the test can show it is still served. */
const echoLines = ['/bin/sh', '-c', 'while read -r line; do echo "got $line"; done'];

describe('a failing child stream', () => {
  it.each([
    ['stdout', false],
    ['stderr', false],
    ['pty', true],
  ] as const)('on %s fails only that process; the server and the other processes carry on', async (stream, tty) => {
    const a = await session();
    const b = await session();
    const victimAt = spawned.length;
    await a.c.request('process/start', { processId: 'victim', argv: ['/bin/sh', '-c', 'echo ready; sleep 300'], cwd, env, tty });
    await a.c.request('process/start', { processId: 'sibling', argv: echoLines, cwd, env, tty: false, pipeStdin: true });
    await b.c.request('process/start', { processId: 'neighbour', argv: echoLines, cwd, env, tty: false, pipeStdin: true });
    await a.c.waitFor((f) => f.method === 'process/output' && f.params.processId === 'victim', 10_000, true);

    managed(a.sessionId, 'victim'); // the server has it
    const keeper = spawned[victimAt]!;
    (stream === 'stderr' ? keeper.stderr! : keeper.stdout!).destroy(reset());

    await a.c.waitClosed('victim');
    const read = await a.c.request('process/read', { processId: 'victim', afterSeq: 0 });
    expect(read).toMatchObject({ exited: true, exitCode: 137, closed: true, failure: expect.stringMatching(new RegExp(`^${stream}: read ECONNRESET`)) });

    for (const [c, id] of [[a.c, 'sibling'], [b.c, 'neighbour']] as const) {
      await c.request('process/write', { processId: id, chunk: b64('still here\n'), writeId: `${id}-1`, closeStdin: true });
      await c.waitClosed(id);
      expect(c.output(id)).toBe('got still here\n');
      expect((await c.request('process/read', { processId: id, afterSeq: 0 })).failure).toBeNull();
    }
  });
});
