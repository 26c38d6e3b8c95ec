/**
 * The process-wide handler (issue 11): an unhandled error on one stream is logged and the
 * server keeps serving; any other uncaught error kills every child and exits 1.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { tmpdir } from 'node:os';
import { pathToFileURL } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { classifyUnhandled } from '../../src/server/last-resort.js';
import { RawClient } from '../helpers/raw-client.js';

const errno = (code: string, syscall?: string) => Object.assign(new Error(`${syscall ?? ''} ${code}`), { code, syscall });

describe('classifyUnhandled', () => {
  it('survives I/O errors of one descriptor and ended streams', () => {
    for (const e of [errno('ECONNRESET', 'read'), errno('EPIPE', 'write'), errno('EIO', 'read'), errno('EBADF', 'write'), errno('ERR_STREAM_DESTROYED')]) {
      expect(classifyUnhandled(e), e.message).toBe('continue');
    }
  });

  it('exits on everything else: programming errors, non-I/O system errors, non-errors', () => {
    for (const e of [new TypeError('x is undefined'), new RangeError('Maximum call stack size exceeded'), errno('EMFILE', 'spawn'), errno('ENOMEM', 'read'), errno('ECONNRESET'), 'a string', null]) {
      expect(classifyUnhandled(e), String(e)).toBe('exit');
    }
  });
});

const children: ChildProcess[] = [];
afterEach(() => {
  for (const c of children.splice(0)) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
});

/** Running (a zombie waiting for a reaper counts as gone). */
const alive = (pid: number): boolean => {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return !stat.slice(stat.lastIndexOf(')') + 2).startsWith('Z');
  } catch {
    return false;
  }
};

describe('the last-resort handler in a real server process', () => {
  it('keeps serving after an unhandled stream error; exits 1 and kills the children on a bug', async () => {
    const child = spawn(process.execPath, ['--import', 'tsx', join(import.meta.dirname, '..', 'fixtures', 'last-resort-server.ts')], {
      cwd: join(import.meta.dirname, '..', '..'),
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    children.push(child);
    let stderr = '';
    child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
    const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
    const url = await new Promise<string>((resolve) => createInterface({ input: child.stdout! }).once('line', resolve));

    const c = await RawClient.connect(url);
    await c.handshake();
    await c.request('process/start', { processId: 's', argv: ['sleep', '60'], cwd: pathToFileURL(tmpdir()).href, env: {}, tty: false });
    const pid = pidOfSleep(child.pid!);

    child.stdin!.write('stream\n');
    // Still serving, on the same connection, with the child still running.
    const logged = new Promise<void>((resolve) => child.stderr!.on('data', () => stderr.includes('still serving') && resolve()));
    await logged;
    expect(stderr).toMatch(/uncaught exception on one stream, still serving: Error: read ECONNRESET/);
    expect(await c.request('environment/status', {})).toEqual({ status: 'ready' });
    expect(alive(pid)).toBe(true);

    child.stdin!.write('bug\n');
    expect(await exited).toBe(1);
    expect(stderr).toMatch(/uncaught exception, killing every child and exiting: TypeError/);
    await c.closed;
    // The keeper kills its tree when the server's end of its control socket closes: soon, not
    // necessarily before the exit event reaches us. No event tells a non-child's end: poll.
    const deadline = performance.now() + 5000;
    while (alive(pid) && performance.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    expect(alive(pid)).toBe(false);
  });
});

/** The pid of the `sleep` the server started (among its descendants: a keeper may stand between). */
function pidOfSleep(serverPid: number): number {
  const queue = [serverPid];
  while (queue.length) {
    const pid = queue.shift()!;
    for (const kid of readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean).map(Number)) {
      if (readFileSync(`/proc/${kid}/cmdline`, 'utf8').startsWith('sleep\0')) return kid;
      queue.push(kid);
    }
  }
  throw new Error(`no sleep among the descendants of ${serverPid}`);
}
