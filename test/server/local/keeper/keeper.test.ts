/**
 * tether-keeper through its server-side wrapper (src/server/local/keeper/keeper.ts): how a command is
 * started (errors told apart, exact environment, nothing inherited), signals, resize, and the
 * tree dying with the keeper's control socket.
 */
import { randomInt } from 'node:crypto';
import { readdirSync } from 'node:fs';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { KeptProcess, setKeeperLaunch, type KeeperSpawnOptions } from '../../../../src/server/local/keeper/keeper.js';
import { childrenOf, running } from '../../../helpers/procs.js';
import { eventually, processesWithMarker } from '../../../helpers/server-process.js';

const ENV = { PATH: process.env.PATH ?? '/usr/bin:/bin' };

function start(file: string, args: string[], extra: Partial<KeeperSpawnOptions> = {}): KeptProcess {
  return KeptProcess.spawn({ file, args, cwd: '/tmp', env: ENV, stdin: false, ...extra });
}

function outputOf(proc: KeptProcess): () => string {
  let text = '';
  proc.onOutput((_stream, d) => (text += d.toString('latin1')));
  proc.stdout.resume();
  proc.stderr?.resume();
  return () => text;
}

const closed = (proc: KeptProcess) =>
  new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => proc.once('close', (code, signal) => resolve({ code, signal })));

// The server launches keepers through the zygote on Linux, by spawning them elsewhere: both.
describe.each(['zygote', 'spawn'] as const)('tether-keeper (launched by %s)', (mode) => {
  let previous: 'zygote' | 'spawn';
  beforeAll(() => void (previous = setKeeperLaunch(mode)));
  afterAll(() => void setKeeperLaunch(previous));

  it('tells a missing program from a missing directory (both ENOENT, as the OS says)', async () => {
    const noProgram = start('/no/such/program', []);
    await expect(noProgram.started).rejects.toMatchObject({ code: 'ENOENT', syscall: 'spawn /no/such/program', path: '/no/such/program' });
    const noDir = start('/bin/true', [], { cwd: '/no/such/dir' });
    await expect(noDir.started).rejects.toMatchObject({ code: 'ENOENT', syscall: 'chdir' });
    const notDir = start('/bin/true', [], { cwd: '/etc/hostname' });
    await expect(notDir.started).rejects.toMatchObject({ code: 'ENOTDIR', syscall: 'chdir' });
    const noTty = start('/no/such/program', [], { tty: { cols: 80, rows: 24 } });
    await expect(noTty.started).rejects.toMatchObject({ code: 'ENOENT' });
  });

  it('runs the command with exactly its environment, argv0, cwd and descriptors 0-2 only', async () => {
    const proc = start('/bin/sh', ['-c', 'echo "$0"; pwd; env | sort; exec ls -l /proc/self/fd/'], { env: { ...ENV, ONLY: 'this' }, argv0: 'custom-name' });
    const out = outputOf(proc);
    await proc.started;
    expect(await closed(proc)).toEqual({ code: 0, signal: null });
    const [arg0, cwd, ...rest] = out().split('\n');
    expect(arg0).toBe('custom-name');
    expect(cwd).toBe('/tmp');
    const env = rest.filter((l) => /^[A-Z_]+=/.test(l));
    expect(env).toEqual([`ONLY=this`, `PATH=${ENV.PATH}`, 'PWD=/tmp']); // PWD: set by sh itself
    const fds = rest.filter((l) => / \d+ -> /.test(l)).map((l) => Number(/ (\d+) -> /.exec(l)![1]));
    expect(fds).toEqual([0, 1, 2, 3]); // 3: the directory ls is listing
  });

  it('gives a tty command a controlling terminal of the requested size, and resizes it', async () => {
    const proc = start('/bin/sh', ['-c', 'stty size; read x; stty size; tty >/dev/null && echo has-tty'], { tty: { cols: 100, rows: 30 } });
    const out = outputOf(proc);
    await proc.started;
    expect(await eventually(() => out().includes('30 100'), 5_000)).toBe(true);
    proc.resize(120, 40);
    proc.stdin!.write('\n');
    expect(await closed(proc)).toEqual({ code: 0, signal: null });
    expect(out()).toBe('30 100\r\n\r\n40 120\r\nhas-tty\r\n');
  });

  it("signals the command's process group; kill reaches the whole tree", async () => {
    const mark = `${randomInt(1000, 9000)}.${randomInt(1e6, 9e6)}`;
    const proc = start('/bin/sh', ['-c', `setsid -f sleep ${mark}; sleep ${mark} & echo up; wait`]);
    const out = outputOf(proc);
    await proc.started;
    expect(await eventually(() => out() === 'up\n' && processesWithMarker(mark, 'sleep').length === 2, 5_000)).toBe(true);
    proc.kill('SIGTERM'); // the group: sh and its background sleep, not the setsid one
    expect(await eventually(() => processesWithMarker(mark, 'sleep').length === 1, 5_000)).toBe(true);
    expect(proc.alive).toBe(true); // still babysitting the setsid'd sleep
    proc.killTree();
    await proc.whenGone;
    expect(processesWithMarker(mark)).toEqual([]);
    expect(proc.exitCode ?? proc.signalCode).toBe('SIGTERM');
  });

  it('kills the tree when its control socket closes (what a dying server does)', async () => {
    const mark = `${randomInt(1000, 9000)}.${randomInt(1e6, 9e6)}`;
    const proc = start('/bin/sh', ['-c', `(sleep ${mark} &); nohup sleep ${mark} >/dev/null 2>&1 & exec sleep ${mark}`]);
    await proc.started;
    expect(await eventually(() => processesWithMarker(mark, 'sleep').length === 3, 5_000)).toBe(true);
    (proc as unknown as { control: import('node:net').Socket }).control.destroy();
    expect(await eventually(() => processesWithMarker(mark).length === 0, 2_000)).toBe(true);
  });

  it('reports death by signal, and a program that closes its terminal early keeps its own exit code', async () => {
    const killed = start('/bin/sh', ['-c', 'kill -KILL $$']);
    expect(await closed(killed)).toEqual({ code: null, signal: 'SIGKILL' });
    const early = start('/bin/sh', ['-c', 'echo bye; exec <&- >&- 2>&-; sleep 0.2; exit 5'], { tty: { cols: 80, rows: 24 } });
    const out = outputOf(early);
    expect(await closed(early)).toEqual({ code: 5, signal: null });
    expect(out()).toBe('bye\r\n');
  });

  it('SIGTERM to the keeper kills the tree; SIGKILL to it is reported as a kill, and the command\'s group is killed', async () => {
    const mark = `${randomInt(1000, 9000)}.${randomInt(1e6, 9e6)}`;
    const termed = start('/bin/sh', ['-c', `setsid -f sleep ${mark}; exec sleep ${mark}`]);
    await termed.started;
    expect(await eventually(() => processesWithMarker(mark, 'sleep').length === 2, 5_000)).toBe(true);
    process.kill(termed.keeperPid, 'SIGTERM'); // e.g. a `pkill -f` that matched the keeper's argv
    await termed.whenGone;
    expect(processesWithMarker(mark)).toEqual([]);
    expect(termed.signalCode).toBe('SIGKILL');

    const killed = start('/bin/sh', ['-c', `sleep ${mark} & exec sleep ${mark}`]);
    await killed.started;
    expect(await eventually(() => processesWithMarker(mark, 'sleep').length === 2, 5_000)).toBe(true);
    const exit = closed(killed);
    process.kill(killed.keeperPid, 'SIGKILL'); // what escapes by design, but the group still dies
    expect(await exit).toEqual({ code: null, signal: 'SIGKILL' });
    expect(await eventually(() => processesWithMarker(mark).length === 0, 2_000)).toBe(true);
  });
});


const openDescriptors = () => readdirSync('/proc/self/fd').length;

// Issue 22 item 11: a stopped zygote hung every later start forever, each holding its descriptors.
describe('a keeper zygote that does not answer', () => {
  let previous: 'zygote' | 'spawn';
  const stopped: number[] = [];
  beforeAll(() => void (previous = setKeeperLaunch('zygote')));
  afterAll(() => void setKeeperLaunch(previous));
  afterEach(() => {
    vi.useRealTimers();
    for (const pid of stopped.splice(0)) {
      for (const signal of ['SIGCONT', 'SIGKILL'] as const) {
        try {
          process.kill(pid, signal);
        } catch {
          /* already gone: replaced as it should be */
        }
      }
    }
  });

  it('fails the start after the deadline (ETIMEDOUT), replaces the zygote, lets go of its descriptors; the next start works', async () => {
    const warm = start('/bin/true', []);
    await warm.started;
    await warm.whenGone;
    const [zygotePid] = childrenOf(process.pid, '--zygote');
    expect(zygotePid).toBeGreaterThan(0);
    // The zygote keeps one idle keeper forked ahead: once it is there, stop the zygote alone
    // (what a same-user SIGSTOP does). The idle keeper still takes one start...
    expect(await eventually(() => childrenOf(zygotePid!, '--zygote').length === 1, 5_000)).toBe(true);
    process.kill(zygotePid!, 'SIGSTOP');
    stopped.push(zygotePid!);
    const taken = start('/bin/cat', [], { stdin: true });
    await taken.started;

    // ...but nobody forks the next one: this start waits on a zygote that cannot answer.
    const before = openDescriptors();
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
    const stuck = start('/bin/true', []);
    const failure = stuck.started.then(() => null, (err: Error) => err);
    vi.advanceTimersByTime(5_000); // the default deadline
    vi.useRealTimers();
    expect(await failure).toMatchObject({
      code: 'ETIMEDOUT',
      message: expect.stringMatching(new RegExp(`keeper zygote \\(pid ${zygotePid}\\) did not answer within 5000 ms.*replaced.*/bin/true`)),
    });
    await stuck.whenGone;
    expect(await eventually(() => openDescriptors() <= before, 2_000)).toBe(true);
    expect(await eventually(() => !running(zygotePid!), 2_000)).toBe(true);

    // A new zygote serves the next start; the process the old idle keeper took still runs.
    const next = start('/bin/echo', ['after']);
    const out = outputOf(next);
    await next.started;
    expect(await closed(next)).toEqual({ code: 0, signal: null });
    expect(out()).toBe('after\n');
    expect(taken.alive).toBe(true);
    const takenClosed = closed(taken);
    taken.stdin!.end();
    expect(await takenClosed).toEqual({ code: 0, signal: null });
  }, 20_000);
});
