/**
 * KeptProcess in kept mode (issue #27, src/server/local/keeper/keeper.ts and keeper-kept.ts), above the
 * wire (test/server/local/keeper/kept.test.ts is the wire): stdin writes answered once the keeper took
 * them, the synchronous last resort leaving a kept keeper alone, a hand-over that kills
 * nothing, and `KeptProcess.adopt` giving back an object that behaves as the spawned one
 * (output from the new channels, the writeIds taken, the exit, release).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { KeptProcess } from '../../../../src/server/local/keeper/keeper.js';

const dirs: string[] = [];
const procs: KeptProcess[] = [];

afterEach(() => {
  for (const proc of procs.splice(0)) proc.killTreeSync(true);
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

function socketPath(): string {
  const dir = mkdtempSync(join(tmpdir(), 'kp-'));
  dirs.push(dir);
  return join(dir, 'k.sock');
}

/** The text of stdout, and a wait for it to include something. */
function watch(proc: KeptProcess) {
  let text = '';
  const waiters = new Set<() => void>();
  proc.onOutput((_stream, data) => {
    text += data.toString();
    for (const w of [...waiters]) w();
  });
  proc.stdout.resume();
  return {
    text: () => text,
    includes: (part: string) =>
      new Promise<void>((resolve) => {
        const check = () => {
          if (!text.includes(part)) return;
          waiters.delete(check);
          resolve();
        };
        waiters.add(check);
        check();
      }),
  };
}

const ECHO = ['-c', 'echo ready; while read l; do echo "got $l"; done; exit 5'];

function spawnKept(path: string): KeptProcess {
  const proc = KeptProcess.spawn({
    file: 'sh',
    args: ECHO,
    cwd: '/',
    env: { PATH: process.env.PATH ?? '/usr/bin:/bin' },
    stdin: true,
    keep: { path, meta: Buffer.from('{"m":1}'), adoptMs: 10_000, capBytes: 1 << 20 },
  });
  procs.push(proc);
  return proc;
}

describe('KeptProcess in kept mode', () => {
  it('survives the last resort and a hand-over; an adopter gets the same process back: output, writeIds, exit, release', async () => {
    const path = socketPath();
    const proc = spawnKept(path);
    const out = watch(proc);
    await proc.started;
    await out.includes('ready\n');
    await proc.framedStdin!.write(Buffer.from('a\n'), 'w1');
    await out.includes('got a\n');
    // The synchronous last resort (an uncaught exception) must not kill a kept keeper…
    proc.killTreeSync();
    // …nor a kept stop: the channels go, the keeper waits for an adopter.
    const gone = new Promise<void>((resolve) => proc.once('gone', resolve));
    proc.kept!.handOver();
    await gone;
    expect(proc.exitCode).toBeNull();

    const { proc: adopted, dump } = await KeptProcess.adopt(path, 5_000, () => ({ tty: false, stdin: true }));
    procs.push(adopted);
    expect(dump).toMatchObject({ pid: proc.pid, keeperPid: proc.keeperPid, exited: null, ids: ['w1'], stdin: { taken: 1, eof: false } });
    expect(dump.meta.toString()).toBe('{"m":1}');
    // What was read before (no mark said a client saw it) is all retained.
    expect(dump.streams[1].data.toString()).toBe('ready\ngot a\n');
    const again = watch(adopted);
    const exited = new Promise<number | null>((resolve) => adopted.once('exit', (code) => resolve(code)));
    await adopted.started;
    await adopted.framedStdin!.write(Buffer.from('b\n'), 'w2');
    await again.includes('got b\n');
    adopted.framedStdin!.end();
    expect(await exited).toBe(5);
    // Released, the keeper ends once its tree is gone, as without keep.
    adopted.kept!.release();
    await adopted.whenGone;
  });

  it('killTreeSync(true) (a stop for good) kills a kept keeper and its tree', async () => {
    const proc = spawnKept(socketPath());
    const out = watch(proc);
    await proc.started;
    await out.includes('ready\n');
    proc.killTreeSync(true);
    await proc.whenGone;
    expect(proc.signalCode).not.toBeNull();
  });
});
