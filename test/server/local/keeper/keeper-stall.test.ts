/**
 * Issue 22 item 11, end to end: a keeper zygote stopped by a same-user process (SIGSTOP) hung
 * every later process/start forever. Against `tether serve` with default options and a
 * bounded heap: the start waiting on it fails with a clear error after the default 5 s
 * deadline (the error arriving is the event waited for), other requests are served meanwhile,
 * the next start runs on a new zygote, and SIGTERM still stops the server.
 */
import { tmpdir } from 'node:os';
import { pathToFileURL } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { ErrorCode } from '../../../../src/protocol/index.js';
import { childrenOf, running } from '../../../helpers/procs.js';
import { RawClientPool } from '../../../helpers/raw-client.js';
import { eventually } from '../../../helpers/server-process.js';
import { spawnServe, type ServeProcess } from '../../../helpers/serve-process.js';

const CWD = pathToFileURL(tmpdir()).href;
const ENV = { PATH: process.env.PATH ?? '/usr/bin:/bin' };

let served: ServeProcess | undefined;
const stoppedGroups: number[] = [];
const pool = new RawClientPool();
afterEach(async () => {
  // Whatever happened, nothing stays stopped behind us.
  for (const pgid of stoppedGroups.splice(0)) {
    for (const signal of ['SIGCONT', 'SIGKILL'] as const) {
      try {
        process.kill(-pgid, signal);
      } catch {
        /* already gone: replaced, as it should be */
      }
    }
  }
  await pool.dropAll();
  await served?.stop();
  served = undefined;
});


describe('a stopped keeper zygote', () => {
  it('fails the waiting start with a clear error, keeps serving, and the next start works', async () => {
    served = await spawnServe(['--listen', 'ws://127.0.0.1:0'], { env: { NODE_OPTIONS: '--max-old-space-size=512' } });
    const c = await pool.connect(served.url);
    await c.handshake();
    const [zygote] = childrenOf(served.child.pid!, '--zygote');
    expect(zygote).toBeGreaterThan(0);
    // The zygote and the idle keeper it forked ahead (its process group): nothing answers.
    process.kill(-zygote!, 'SIGSTOP');
    stoppedGroups.push(zygote!);

    const stuck = c.call('process/start', { processId: 'stuck', argv: ['true'], cwd: CWD, env: ENV, tty: false });
    // Meanwhile the server serves: another client, and this one.
    const other = await pool.connect(served.url);
    await other.handshake();
    expect(await other.request('environment/status', {})).toEqual({ status: 'ready' });

    expect((await stuck).error).toMatchObject({
      code: ErrorCode.InternalError,
      message: expect.stringMatching(new RegExp(`keeper zygote \\(pid ${zygote}\\) did not answer within 5000 ms .*replaced.*try again`)),
    });
    expect(await eventually(() => !running(zygote!), 2_000)).toBe(true); // SIGKILLed: gone once the kernel is done

    const next = await c.call('process/start', { processId: 'next', argv: ['echo', 'after'], cwd: CWD, env: ENV, tty: false });
    expect(next.error).toBeUndefined();
    await c.waitClosed('next');
    expect(c.output('next')).toBe('after\n');

    const exited = new Promise<number | null>((resolve) => served!.child.once('exit', (code) => resolve(code)));
    served.child.kill('SIGTERM');
    expect(await exited).toBe(0);
  });
});
