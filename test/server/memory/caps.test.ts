/**
 * Caps derived from the machine refuse cleanly (issue 13): past the server-wide process cap
 * (derived from RLIMIT_NOFILE) or the pty cap, process/start is answered -32603 with the
 * reason, never EMFILE or ENOSPC from deep inside a spawn, and the server keeps serving.
 */
import { tmpdir } from 'node:os';
import { pathToFileURL } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { ErrorCode } from '../../../src/protocol/index.js';
import { RawClient, RawClientPool } from '../../helpers/raw-client.js';
import { spawnServe, type ServeProcess } from '../../helpers/serve-process.js';
import { startTetherServer, type TetherTarget } from '../../helpers/tether.js';

const CWD = pathToFileURL(tmpdir()).href;
const ENV = { PATH: process.env.PATH ?? '/usr/bin:/bin' };

let target: TetherTarget | undefined;
let served: ServeProcess | undefined;
const pool = new RawClientPool();
afterEach(async () => {
  await served?.stop();
  served = undefined;
  await pool.dropAll();
  await target?.stop();
  target = undefined;
});

const start = (c: RawClient, processId: string, extra: object = {}) =>
  c.call('process/start', { processId, argv: ['sleep', '60'], cwd: CWD, env: ENV, tty: false, ...extra });

describe('machine-derived caps', () => {
  it('derives the process cap from the descriptor limit, says so at start, and refuses the next process with -32603 naming it', async () => {
    // 256 descriptors: 64 for connections, 32 for the server, 32 + 8 for fs, 16 for outgoing http; (256-64-32-40-16)/4 = 26 processes.
    served = await spawnServe(['--listen', 'ws://127.0.0.1:0'], { unprivileged: true, nofile: 256 });
    expect(served.stderr()).toMatch(/limits: memory budget .*; 26 processes \(its descriptor limit of 256 \(RLIMIT_NOFILE\) less 64 for connections/);
    const c = await RawClient.connect(served.url);
    await c.handshake();
    for (let i = 0; i < 26; i++) {
      // Pipes with stdin (the dearest: 4 descriptors) and terminals, alternately.
      const r = await start(c, `p${i}`, i % 2 ? { tty: true } : { pipeStdin: true });
      expect(r.error, `start ${i}`).toBeUndefined();
    }
    const refused = await start(c, 'one-too-many');
    expect(refused.error).toEqual({
      code: ErrorCode.InternalError,
      message: expect.stringMatching(/^too many processes on this server: it runs at most 26 at once \(--max-server-processes; derived from its descriptor limit of 256/),
    });
    // Room comes back once a process and its keeper are gone.
    await c.request('process/terminate', { processId: 'p0' });
    await c.waitClosed('p0');
    let again = await start(c, 'again');
    for (let i = 0; i < 100 && again.error; i++) {
      await new Promise((r) => setTimeout(r, 20)); // the keeper's exit is seen just after the close
      again = await start(c, 'again');
    }
    expect(again.error).toBeUndefined();
    // Connections are still admitted and served.
    const other = await RawClient.connect(served.url);
    await other.handshake();
    expect(await other.request('environment/status', {})).toEqual({ status: 'ready' });
    await Promise.all([c.drop(), other.drop()]);
    expect(served.stderr()).not.toMatch(/EMFILE|ENOSPC|too many open files/i);
  });

  it('refuses a tty process past the pty cap with -32603 naming it, and still starts pipes', async () => {
    target = await startTetherServer({ maxPtys: 2 });
    const c = await pool.connect(target.url);
    await c.handshake();
    expect((await start(c, 't1', { tty: true })).error).toBeUndefined();
    expect((await start(c, 't2', { tty: true })).error).toBeUndefined();
    const refused = await start(c, 't3', { tty: true });
    expect(refused.error).toEqual({
      code: ErrorCode.InternalError,
      message: expect.stringMatching(/^no pseudo-terminal for a tty process: this server runs at most 2 at once \(--max-ptys; derived from its configuration\); .*without tty/),
    });
    expect((await start(c, 'pipe')).error).toBeUndefined();
    for (const id of ['t1', 't2', 'pipe']) await c.request('process/terminate', { processId: id });
  });
});
