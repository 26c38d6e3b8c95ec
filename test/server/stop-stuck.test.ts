/**
 * SIGTERM ends the server even with a thread-pool thread stuck in a system call (issue 22): a
 * graceful stop cannot finish (Node's exit joins every thread-pool thread), so after its
 * deadline (10 s) the server kills every child and dies of the signal itself.
 *
 * The stuck thread is made by a preloaded fixture (test/fixtures/stuck-thread.mjs): on SIGUSR2
 * it opens a FIFO without a writer in blocking mode. Ordered by events: the fixture's line on
 * stderr, then SIGTERM, then the exit event (no clock; the test timeout is the bound).
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, expect, it } from 'vitest';
import { requireProgram } from '../helpers/prerequisites.js';
import { waitGone } from '../helpers/procs.js';
import { RawClient } from '../helpers/raw-client.js';
import { spawnServe, type ServeProcess } from '../helpers/serve-process.js';

const FIXTURE = join(import.meta.dirname, '..', 'fixtures', 'stuck-thread.mjs');
let served: ServeProcess | undefined;
let dir: string | undefined;

afterEach(async () => {
  await served?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

it('SIGTERM stops the server, and its children, while a thread-pool thread is stuck in a system call', async () => {
  requireProgram('pgrep');
  dir = mkdtempSync(join(tmpdir(), 'tether-stuck-'));
  const fifo = join(dir, 'fifo');
  execFileSync('mkfifo', [fifo]);
  served = await spawnServe(['--listen', 'ws://127.0.0.1:0', '--log-level', 'info'], {
    env: { NODE_OPTIONS: `--import=${FIXTURE}`, TETHER_TEST_FIFO: fifo },
  });
  const child = served.child;
  // A session with a running process: the stop must end it too.
  const c = await RawClient.connect(served.url);
  await c.handshake('stuck-test');
  const start = await c.request('process/start', { processId: 'sleeper', argv: ['sleep', '601.4'], cwd: 'file:///', env: {}, tty: false });
  expect(start).toBeDefined();
  const listed = execFileSync('pgrep', ['-f', '^sleep 601.4$'], { encoding: 'utf8' }).trim().split('\n').map(Number);
  expect(listed.length).toBeGreaterThan(0);

  const stuck = new Promise<void>((resolve) => {
    const onData = (d: Buffer) => {
      if (d.toString().includes('stuck-thread:')) {
        child.stderr!.off('data', onData);
        resolve();
      }
    };
    child.stderr!.on('data', onData);
  });
  child.kill('SIGUSR2');
  await stuck;
  const exited = new Promise<NodeJS.Signals | number | null>((resolve) => child.once('exit', (code, signal) => resolve(signal ?? code)));
  child.kill('SIGTERM');
  // Dies of the signal it was sent, by itself (the helper's SIGKILL comes only from stop()).
  expect(await exited).toBe('SIGTERM');
  expect(served.stderr()).toMatch(/shutdown did not finish within 10 s: killing every child and exiting/);
  // Its children are gone with it.
  expect(await waitGone(listed)).toEqual([]);
  await c.drop();
}, 30_000);

it('a second SIGTERM while a thread-pool thread is stuck ends the server at once, its children with it', async () => {
  requireProgram('pgrep');
  dir = mkdtempSync(join(tmpdir(), 'tether-stuck-'));
  const fifo = join(dir, 'fifo');
  execFileSync('mkfifo', [fifo]);
  served = await spawnServe(['--listen', 'ws://127.0.0.1:0', '--log-level', 'info', '--state-dir', 'none'], {
    env: { NODE_OPTIONS: `--import=${FIXTURE}`, TETHER_TEST_FIFO: fifo },
  });
  const child = served.child;
  const c = await RawClient.connect(served.url);
  await c.handshake('stuck-again');
  expect(await c.request('process/start', { processId: 'sleeper', argv: ['sleep', '602.4'], cwd: 'file:///', env: {}, tty: false })).toBeDefined();
  const listed = execFileSync('pgrep', ['-f', '^sleep 602.4$'], { encoding: 'utf8' }).trim().split('\n').map(Number);
  expect(listed.length).toBeGreaterThan(0);

  const line = (text: string) =>
    new Promise<void>((resolve) => {
      const onData = () => {
        if (served!.stderr().includes(text)) {
          child.stderr!.off('data', onData);
          resolve();
        }
      };
      child.stderr!.on('data', onData);
      onData();
    });
  child.kill('SIGUSR2');
  await line('stuck-thread:');
  const exited = new Promise<NodeJS.Signals | number | null>((resolve) => child.once('exit', (code, signal) => resolve(signal ?? code)));
  child.kill('SIGTERM');
  await line('SIGTERM: shutting down');
  // The impatient second signal: before the fix it called process.exit, which joined the stuck
  // thread and never returned (the 10 s deadline's timer could not run either).
  child.kill('SIGTERM');
  expect(await exited).toBe('SIGTERM');
  expect(served.stderr()).toMatch(/SIGTERM again: killing every child now/);
  expect(served.stderr()).not.toMatch(/shutdown did not finish within 10 s/);
  expect(await waitGone(listed)).toEqual([]);
  await c.drop();
}, 30_000);
