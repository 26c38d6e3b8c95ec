/**
 * At the disk quota a process pauses, losing nothing (output beyond the window goes to disk):
 * `tether serve` with a state dir, a 1 MiB window and 4 MiB of disk per session. A client
 * that reads but never acknowledges runs `seq` (15 MB): once its window and its disk are
 * full the producer pauses, alive, and session/list and /metrics say why
 * ("output-disk-quota"). Meanwhile another token's session streams a producer to the end and
 * starts more processes. When the first client acknowledges, the producer resumes and every
 * byte arrives once, in order. Today (no spill) the listing has no such reason.
 *
 * A full filesystem: the state dir on an 8 MiB tmpfs (root only: mounting needs it; the test
 * says so and skips otherwise): the producer pauses with "output-disk-full", the server lives,
 * and once the client reads, every byte it had numbered and the rest arrive once, in order.
 */
import { execSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { RawClientPool, type Frame, type RawClient } from '../../helpers/raw-client.js';
import { spawnServe, type ServeProcess } from '../../helpers/serve-process.js';
import { disposeStateDir, makeStateDir } from '../../helpers/server-process.js';

const CWD = pathToFileURL(tmpdir()).href;
const ENV = { PATH: process.env.PATH ?? '/usr/bin:/bin' };
const COUNT = 2_000_000;
const EXPECTED = execSync(`seq 1 ${COUNT}`, { maxBuffer: 64 * 1024 * 1024 }).toString();

let served: ServeProcess | undefined;
const pool = new RawClientPool();
const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  await pool.dropAll();
  await served?.stop();
  served = undefined;
  for (const c of cleanups.splice(0).reverse()) await c();
});

async function metrics(url: string, token: string): Promise<string> {
  const res = await fetch(`${url.replace(/^ws/, 'http')}/metrics`, { headers: { authorization: `Bearer ${token}` } });
  return res.text();
}

/** A client that reads and never acknowledges (acks, sessionList), with `token` if given. */
async function asleep(url: string, token?: string): Promise<RawClient> {
  const c = await pool.connect(url, token === undefined ? undefined : { token });
  await c.request('initialize', { clientName: 'asleep', tether: { version: 1, extensions: ['acks', 'sessionList'] } });
  c.notify('initialized', {});
  return c;
}

/** Its process as session/list shows it, once paused by `reason` (each listing waits for its answer; bounded). */
async function untilPausedBy(c: RawClient, reason: string): Promise<any> {
  let listed: any;
  for (let i = 0; i < 5000; i++) {
    listed = (await c.request('session/list', {})).sessions.find((s: { current: boolean }) => s.current).processes[0];
    if (listed.pausedBy === reason) break;
  }
  return listed;
}

/** From now on the client acknowledges every output and close, those already received first. */
function acknowledgeAll(c: RawClient): void {
  const ack = (f: Frame) => {
    if (f.method === 'process/output' || f.method === 'process/closed') c.notify('process/ack', { processId: f.params.processId, seq: f.params.seq });
  };
  for (const f of c.notifications) ack(f);
  c.on('notification', ack);
}

describe.each([false, true])('the output disk quota (unprivileged server: %s)', (unprivileged) => {
  it('pauses the producer at the quota with the reason, another token streams and starts processes meanwhile, and after the client reads the producer resumes and loses nothing', async () => {
    const stateDir = makeStateDir(unprivileged ? 'nobody' : 'self');
    cleanups.push(() => disposeStateDir(stateDir));
    const tokens = { a: 'token-a-0123456789abcdef0123456789', b: 'token-b-0123456789abcdef0123456789' };
    const files = { a: join(stateDir, '..', `${process.pid}-a.token`), b: join(stateDir, '..', `${process.pid}-b.token`) };
    writeFileSync(files.a, tokens.a, { mode: 0o644 });
    writeFileSync(files.b, tokens.b, { mode: 0o644 });
    cleanups.push(() => void execSync(`rm -f ${files.a} ${files.b}`));
    served = await spawnServe(
      ['--port', '0', '--state-dir', stateDir, '--token-file', files.a, '--admin-token-file', files.b, '--output-window', '1MiB', '--output-disk', '4MiB', '--output-disk-total', '64MiB'],
      { unprivileged },
    );
    const url = served.url;

    // The client that reads and never acknowledges.
    const hoarder = await asleep(url, tokens.a);
    expect((await hoarder.call('process/start', { processId: 'p', argv: ['seq', '1', String(COUNT)], cwd: CWD, env: ENV, tty: false })).error).toBeUndefined();
    // Ordered by what the server says (each listing waits for its answer; bounded).
    let listed = await untilPausedBy(hoarder, 'output-disk-quota');
    expect(listed).toMatchObject({ state: 'running', paused: true, pausedBy: 'output-disk-quota' });
    expect(listed.spilledBytes).toBeGreaterThan(3 * 1024 * 1024);
    expect(await metrics(url, tokens.b)).toMatch(/^tether_output_disk_paused_processes\{reason="output-disk-quota"\} 1$/m);

    // Another token's session streams to the end and starts processes meanwhile.
    const other = await pool.connect(url, { token: tokens.b });
    await other.handshake('awake');
    expect((await other.call('process/start', { processId: 'q', argv: ['seq', '1', String(COUNT / 4)], cwd: CWD, env: ENV, tty: false })).error).toBeUndefined();
    await other.waitClosed('q', 60_000);
    expect(other.output('q')).toBe(EXPECTED.slice(0, EXPECTED.indexOf(`\n${COUNT / 4 + 1}\n`) + 1));
    expect((await other.call('process/start', { processId: 'e', argv: ['echo', 'hi'], cwd: CWD, env: ENV, tty: false })).error).toBeUndefined();
    await other.waitClosed('e', 20_000);
    expect(other.output('e')).toBe('hi\n');

    // Still paused, not killed.
    listed = (await hoarder.request('session/list', {})).sessions.find((s: { current: boolean }) => s.current).processes[0];
    expect(listed).toMatchObject({ state: 'running', pausedBy: 'output-disk-quota' });

    // The client reads at last: the producer resumes, every byte arrives once, in order.
    acknowledgeAll(hoarder);
    await hoarder.waitClosed('p', 60_000);
    expect(hoarder.output('p')).toBe(EXPECTED);
  }, 120_000);

  it.skipIf(process.getuid?.() !== 0)('a full filesystem (the state dir on an 8 MiB tmpfs; root only: mounting needs it): the producer pauses with output-disk-full, the server lives, nothing is lost', async () => {
    const stateDir = makeStateDir(unprivileged ? 'nobody' : 'self');
    const owner = unprivileged ? 65534 : 0;
    try {
      execSync(`mount -t tmpfs -o size=8m,mode=0700,uid=${owner},gid=${owner} tmpfs ${stateDir}`);
    } catch (err) {
      console.warn(`skipped: cannot mount a tmpfs here (${(err as Error).message.split('\n')[0]})`);
      return;
    }
    cleanups.push(async () => {
      await disposeStateDir(stateDir).catch(() => {});
      execSync(`umount ${stateDir} && rmdir ${stateDir}`);
    });
    // An explicit total past the filesystem: the disk fills before any quota.
    served = await spawnServe(['--port', '0', '--state-dir', stateDir, '--output-window', '1MiB', '--output-disk', '1GiB', '--output-disk-total', '1GiB'], { unprivileged });
    const client = await asleep(served.url);
    expect((await client.call('process/start', { processId: 'p', argv: ['seq', '1', String(COUNT)], cwd: CWD, env: ENV, tty: false })).error).toBeUndefined();
    const listed = await untilPausedBy(client, 'output-disk-full');
    expect(listed).toMatchObject({ state: 'running', paused: true, pausedBy: 'output-disk-full' });
    acknowledgeAll(client);
    await client.waitClosed('p', 60_000);
    expect(client.output('p')).toBe(EXPECTED);
    expect(served.child.exitCode).toBe(null);
  }, 120_000);
});
